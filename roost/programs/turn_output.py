"""A command's stdout on its way to ``text`` events, within the worker protocol's size bounds.

Every event carries at most ENTRY_MAX bytes, cut after a newline where one is near. A turn's first
HEAD_KEEP bytes stream as they come. Past them, only the last TAIL_KEEP bytes are kept, and they go
out when the command ends, after one note that says exactly how many bytes between were left out:
an agent that prints a gigabyte costs the store HEAD_KEEP + TAIL_KEEP, and nothing vanishes unsaid.
"""

from __future__ import annotations

from typing import Any, Callable

from roost.protocol import ENTRY_MAX
from roost.worker_protocol import note, split_bytes

#: How much of a turn's output streams to the transcript before only its end is kept.
HEAD_KEEP = 4 * 1024 * 1024
#: How much of the end of a longer output is kept.
TAIL_KEEP = 1024 * 1024


def mib(size: int) -> str:
    return f"{size / (1024 * 1024):g} MiB"


def whole_characters(data: bytes | bytearray) -> int:
    """How many leading bytes of ``data`` hold whole UTF-8 characters (all, unless its end is cut)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the last character's first byte: is it all there?
            need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
            return len(data) - back if need > back else len(data)
    return len(data)


class TurnOutput:
    """Fed the bytes of one run of the command; emits its text events and keeps their texts."""

    def __init__(self, emit: Callable[[dict[str, Any]], None], head: int = HEAD_KEEP, tail: int = TAIL_KEEP) -> None:
        self.emit = emit
        self.head = head
        self.tail_keep = tail
        self.total = 0
        #: Bytes of the head not sent yet (at most ENTRY_MAX between calls).
        self.pending = bytearray()
        #: The last bytes past the head, at most ``tail_keep``.
        self.tail = bytearray()
        #: The texts sent, for the command worker's session file.
        self.texts: list[str] = []

    @property
    def waiting(self) -> bool:
        """Whether some output is held back until the stream goes quiet."""
        return bool(self.pending)

    def feed(self, data: bytes) -> None:
        room = max(0, self.head - self.total)
        self.total += len(data)
        if room:
            self.pending += data[:room]
            data = data[room:]
            if len(self.pending) > ENTRY_MAX:
                *ready, rest = split_bytes(bytes(self.pending))
                self.pending = bytearray(rest)
                self._send(ready)
        if data:
            self.tail += data
            del self.tail[:-self.tail_keep]

    def quiet(self) -> None:
        """The command paused: what has come goes out now, so the transcript follows it (all but
        the first bytes of a character the pause cut in two)."""
        ready = whole_characters(self.pending)
        self._send(split_bytes(bytes(self.pending[:ready])))
        del self.pending[:ready]

    def close(self) -> None:
        """The command ended: the rest, and the note and the tail when something was left out."""
        left_out = self.total - self.head - len(self.tail)
        if left_out <= 0:  # the tail follows the head without a gap
            self.pending += self.tail
            self.tail.clear()
        self._send(split_bytes(bytes(self.pending)))
        self.pending.clear()
        if left_out > 0:
            self.emit(note(f"left out {left_out} bytes of the command's output here: it printed {self.total} "
                           f"bytes this turn, and a turn keeps its first {mib(self.head)} and last "
                           f"{mib(self.tail_keep)}"))
            self._send(split_bytes(bytes(self.tail)))
            self.tail.clear()

    def _send(self, pieces: list[bytes]) -> None:
        for piece in pieces:
            text = piece.decode(errors="replace").replace("\r\n", "\n").strip("\r\n")
            if text:
                self.texts.append(text)
                self.emit({"type": "text", "text": text})
