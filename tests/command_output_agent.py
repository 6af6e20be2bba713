"""A command-line "agent" that prints as a build does, for tests/test_command_output.py and the bench.

    command_output_agent.py "flood SIZE SECONDS [WAIT_LINE WAIT_FILE]"   (one argument, split here)
    command_output_agent.py trickle LINES ACK_DIR
    command_output_agent.py split ACK_FILE

``flood`` prints ``flood_output(SIZE)`` in chunks of 50 lines, paced to take about SECONDS; with
WAIT_LINE it stops after the chunk holding that line until WAIT_FILE exists (the test makes it once
it saw the line), so what the test saw came while the command ran. ``trickle`` prints one line, then
waits for ACK_DIR/N before the next: each line must reach the transcript on its own. ``split`` prints
a line whose 4-byte character is cut in two by a wait for ACK_FILE. Every wait gives up after
WAIT_LIMIT seconds with exit code 4.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

CHUNK_LINES = 50
WAIT_LIMIT = 120.0
#: Every LONG_EVERY-th line is LONG_SIZE bytes without a newline, so some cuts fall inside a line.
LONG_EVERY = 2000
LONG_SIZE = 150_000


def flood_line(i: int) -> bytes:
    """Line ``i`` of the flood: numbered, with 2-, 3- and 4-byte characters, now and then very long."""
    if i % LONG_EVERY == LONG_EVERY - 1:
        return ("ü€😀" * (LONG_SIZE // 9)).encode() + b"\n"
    return "line %07d ü€😀 compiling module %07d ......................................\n".encode() % (i, i)


def flood_lines(size: int) -> list[bytes]:
    """The flood's lines: as many as make at least ``size`` bytes."""
    lines, total = [], 0
    while total < size:
        lines.append(flood_line(len(lines)))
        total += len(lines[-1])
    return lines


def flood_output(size: int) -> bytes:
    return b"".join(flood_lines(size))


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_LIMIT
    while not path.exists():
        if time.monotonic() > deadline:
            print(f"command_output_agent: nobody made {path} in {WAIT_LIMIT:g}s", file=sys.stderr, flush=True)
            sys.exit(4)
        time.sleep(0.005)


def write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view):]


def flood(size: int, seconds: float, wait_line: int | None, wait_file: Path | None) -> None:
    lines = flood_lines(size)
    start = time.monotonic()
    for first in range(0, len(lines), CHUNK_LINES):
        write(b"".join(lines[first:first + CHUNK_LINES]))
        if wait_file is not None and wait_line is not None and first <= wait_line < first + CHUNK_LINES:
            wait_for(wait_file)
            start = time.monotonic() - seconds * (first + CHUNK_LINES) / len(lines)
        ahead = start + seconds * (first + CHUNK_LINES) / len(lines) - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


def main(argv: list[str]) -> int:
    mode, *args = argv
    if mode == "flood":
        wait = (int(args[2]), Path(args[3])) if len(args) > 2 else (None, None)
        flood(int(args[0]), float(args[1]), *wait)
    elif mode == "trickle":
        for i in range(int(args[0])):
            write(b"tick %d\n" % i)
            wait_for(Path(args[1]) / str(i))
    elif mode == "split":
        face = "😀".encode()
        write(b"before " + face[:2])
        wait_for(Path(args[0]))
        write(face[2:] + b" after\n")
    else:
        print(f"command_output_agent: unknown mode {mode!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(shlex.split(" ".join(sys.argv[1:]))))  # the prompt comes as one argument
