"""The worker protocol's size bound, with real worker processes spoken to directly (no daemon).

No line over MAX_FRAME either way: the command worker turns big output into text events of at most
ENTRY_MAX bytes (how they are cut and bounded: tests/test_command_output_pieces.py); the daemon's
reader skips a longer line with a note and reads on.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from roost.text import WORDS_MAX

from roost.daemon.processes.process import Worker, open_process
from roost.drivers.base import Adapter, Launch
from roost.protocol import ENTRY_MAX, MAX_FRAME, encode
from roost.worker_protocol import split_bytes, text_events

from agent_script import build_log

#: Lets the test read any line a worker writes, so an over-long one fails an assertion, not the read.
READ_LIMIT = 64 * 1024 * 1024
TESTS = Path(__file__).resolve().parent
#: A command that prints a build log of as many bytes as its argument says, in one write: one burst
#: (the workers run in this directory, so it imports agent_script).
PRINT = "import sys; from agent_script import build_log; sys.stdout.buffer.write(build_log(int(sys.argv[1])))"


class WorkerPipe:
    """A worker program on pipes, and every line it wrote."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[bytes] = []

    @classmethod
    async def start(cls, *argv: str) -> "WorkerPipe":
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", *argv, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, limit=READ_LIMIT, cwd=TESTS)
        return cls(proc)

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")

    async def until(self, kind: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """The events up to and including the next one of ``kind``."""
        assert self.proc.stdout is not None
        events = []
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
            assert line, f"the worker ended before a {kind}"
            self.lines.append(line)
            events.append(json.loads(line))
            if events[-1]["type"] == kind:
                return events

    async def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        await asyncio.wait_for(self.proc.wait(), 10)


async def command_turn(tmp_path: Path, size: int) -> tuple[WorkerPipe, list[dict[str, Any]]]:
    """One turn of the command worker whose command prints ``size`` bytes in one write."""
    spec = {"command": [sys.executable, "-c", PRINT, str(size)]}
    worker = await WorkerPipe.start("roost.programs.command_worker", "--session", str(tmp_path / "s.jsonl"),
                                    "--spec", json.dumps(spec))
    worker.send(b'{"type": "prompt", "id": "p1", "message": "build", "run": 1}')
    events = await worker.until("turn_end")
    await worker.close()
    return worker, events


def texts(events: list[dict[str, Any]]) -> list[str]:
    return [e["text"] for e in events if e["type"] == "text"]


def assert_bounded(worker: WorkerPipe, events: list[dict[str, Any]]) -> None:
    assert max(len(line) for line in worker.lines) < MAX_FRAME
    assert all(0 < len(t.encode()) <= ENTRY_MAX for t in texts(events))


async def test_twenty_megabytes_in_one_burst_all_arrive_as_text_events(tmp_path):
    printed = build_log(20_000_000)
    worker, events = await command_turn(tmp_path, len(printed))
    assert events[-1] == {"type": "turn_end", "run": 1, "outcome": "ok"}
    assert_bounded(worker, events)
    assert "".join(texts(events)).encode() == printed
    assert len(printed) // ENTRY_MAX <= len(texts(events)) <= 2 * len(printed) // ENTRY_MAX  # coalesced
    assert not [e for e in events if e["type"] == "note"]


async def test_a_command_line_over_the_limit_is_answered_and_the_worker_reads_on(tmp_path):
    worker = await WorkerPipe.start("roost.programs.builtin_agent", "--session", str(tmp_path / "s.jsonl"))
    big = json.dumps({"type": "prompt", "id": "p1", "message": "say " + "x" * MAX_FRAME}).encode()
    worker.send(big)
    worker.send(b'{"type": "get_state", "id": "g2"}')
    refused, state = await worker.until("response"), await worker.until("response")
    assert refused[-1]["id"] is None and refused[-1]["success"] is False
    assert f"a line of {len(big)} bytes, over the {MAX_FRAME}-byte frame limit" in refused[-1]["error"]
    assert state[-1]["id"] == "g2" and state[-1]["data"]["busy"] is False
    await worker.close()


async def test_the_built_in_agent_says_a_long_text_in_pieces(tmp_path):
    worker = await WorkerPipe.start("roost.programs.builtin_agent", "--session", str(tmp_path / "s.jsonl"))
    said = "é" * 200_000  # 400 KB of UTF-8: cut at character boundaries
    worker.send(encode({"type": "prompt", "id": "p1", "message": "say " + said, "run": 1}).rstrip(b"\n"))
    events = await worker.until("turn_end")
    await worker.close()
    assert_bounded(worker, events)
    assert "".join(texts(events)) == said and len(texts(events)) == 7


# -- the daemon's side -----------------------------------------------------------------------------------------
WRITER = """
import json, sys
sys.stderr.write("e" * 3_000_000 + "\\n" + "the last words\\n")
sys.stdout.write(json.dumps({"type": "text", "text": "y" * 3_000_000}) + "\\n")
sys.stdout.write(json.dumps({"type": "text", "text": "after the big one"}) + "\\n")
"""


async def test_a_worker_line_over_the_limit_becomes_a_note_and_reading_goes_on(tmp_path):
    events: list[dict[str, Any]] = []
    exits: list[tuple[int, list[str]]] = []

    async def on_exit(code: int, stderr: list[str]) -> None:
        exits.append((code, stderr))

    launch = Launch(argv=[sys.executable, "-c", WRITER], env={}, cwd=str(tmp_path))
    worker = Worker("j1", launch, Adapter(), tmp_path / "j1.log", events.extend, on_exit)  # each step: a list
    await worker.start()
    await asyncio.wait_for(worker.exited.wait(), 30)
    worker.release()  # what the engine does once the exit is committed: the shim ends
    size = len(json.dumps({"type": "text", "text": "y" * 3_000_000}))
    assert events == [{"type": "note", "message": f"skipped a line of {size} bytes, over the {MAX_FRAME}-byte "
                                                  f"frame limit from the worker"},
                      {"type": "text", "text": "after the big one"}]
    # the stderr line kept (its first STDERR_LINE bytes), as the exit's words: one line of at most WORDS_MAX
    assert exits == [(0, ["e" * (WORDS_MAX - 1) + "…", "the last words"])]
    assert (tmp_path / "j1.log").stat().st_size == 3_000_000 + len("\nthe last words\n")


async def test_a_command_over_the_limit_is_refused_before_it_is_written(tmp_path):
    async def on_exit(code: int, stderr: list[str]) -> None:
        pass

    session = tmp_path / "s.jsonl"
    launch = Launch(argv=[sys.executable, "-m", "roost.programs.builtin_agent", "--session", str(session)],
                    env=dict(os.environ), cwd=str(tmp_path))
    worker = Worker("j1", launch, Adapter(), tmp_path / "j1.log", lambda event: None, on_exit)
    await worker.start()
    try:
        answer = await worker.request("prompt", timeout=10, message="say " + "é" * 600_000, run=1)
        assert answer["success"] is False
        assert re.fullmatch(rf"a prompt command of \d+ bytes is over the {MAX_FRAME}-byte frame limit of the "
                            r"worker protocol", answer["error"])
        state = await worker.request("get_state", timeout=10)
        assert state["success"] is True and state["data"]["busy"] is False
    finally:
        await worker.close()
        worker.release()


async def test_a_close_asked_while_the_worker_is_still_being_reached_closes_it_once_it_is(tmp_path):
    """A re-adopted worker's slot is ready at once and its shim reached a moment later: a close in
    between (a done job's auto-close, a shutdown) waits for it, else that worker outlived its close."""
    async def on_exit(code: int, stderr: list[str]) -> None:
        pass

    gate = asyncio.Event()

    async def slow_open(job_id: str, launch: Launch) -> Any:
        await gate.wait()
        return await open_process(job_id, launch)

    launch = Launch(argv=[sys.executable, "-m", "roost.programs.builtin_agent", "--session", str(tmp_path / "s.jsonl")],
                    env=dict(os.environ), cwd=str(tmp_path))
    worker = Worker("j1", launch, Adapter(), tmp_path / "j1.log", lambda event: None, on_exit, opener=slow_open)
    starting = asyncio.create_task(worker.start())
    closing = asyncio.create_task(worker.close(grace=1.0))
    await asyncio.sleep(0)  # both are under way: the start waits at the gate, the close for the start
    gate.set()
    await asyncio.wait_for(asyncio.gather(starting, closing), 30)
    try:
        assert worker.exited.is_set(), "the worker reached after the close was asked is closed"
    finally:
        worker.release()


# -- the pieces, in process ------------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"", b"short\n", b"a\n" * 100_000, b"x" * 200_000, "é€😀".encode() * 30_000])
def test_split_bytes_joins_back_within_the_limit_and_never_cuts_a_character(data):
    pieces = split_bytes(data)
    assert b"".join(pieces) == data
    assert all(0 < len(p) <= ENTRY_MAX for p in pieces)
    assert all(p.decode() for p in pieces)  # each decodes on its own


def test_a_text_within_the_limit_is_one_event():
    assert text_events("hello") == [{"type": "text", "text": "hello"}]


def test_the_worker_programs_and_the_daemon_do_not_import_each_other():
    roost = Path(__file__).resolve().parent.parent / "roost"
    imports = re.compile(r"^\s*(?:from|import)\s+roost\.(\w+)", re.M)

    def used(package: str) -> set[str]:
        return {name for path in (roost / package).rglob("*.py") for name in imports.findall(path.read_text())}

    assert not used("programs") & {"daemon", "drivers"}
    assert "programs" not in used("daemon") | used("drivers")
