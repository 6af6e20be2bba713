"""A command's stdout on its way to the transcript: as it comes, coalesced, and whole.

Bytes collect until ENTRY_MAX of them have come (a flood becomes ``text`` events of about ENTRY_MAX,
not one per write) or BURST seconds have passed since the oldest of them came (a trickle shows line
by line, so `roost logs -f` follows a running build). An event's text is cut just after a newline
in the second half of its ENTRY_MAX window, else at the start of a UTF-8 character: no character is
ever split, not by a cut and not by a pause. The texts of a turn join back to its output byte for
byte (bytes that are not UTF-8 become U+FFFD); every one after the first says ``continues``.

What a turn keeps is bounded by ``bound`` (a profile's ``max_output``; 0 keeps everything): past it
the command runs on and its output is read and counted, not kept — a note says so when it happens,
and another how much was left out when the command ends. That is what a runaway ``yes`` costs the
store: the bound, not the disk. Memory is bounded whatever the size: less than 2 * ENTRY_MAX waits.
"""

from __future__ import annotations

from typing import Any, Callable

from roost.bounds import MAX_OUTPUT
from roost.protocol import ENTRY_MAX
from roost.rules.quotas import binary, binary_words, text_ends
from roost.worker_protocol import note, split_bytes

#: How long output may wait for more to go out with it, in seconds.
BURST = 0.05
#: A cut goes after a newline only if that leaves an event at least this big.
NEAR = ENTRY_MAX // 2


def whole_characters(data: bytes | bytearray) -> int:
    """How many leading bytes of ``data`` hold whole UTF-8 characters (all, unless its end is cut)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the last character's first byte: is it all there?
            need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
            return len(data) - back if need > back else len(data)
    return len(data)


def cut_point(data: bytes | bytearray) -> int:
    """Where the first event of ``data`` (longer than ENTRY_MAX) ends: after the last newline of
    its window when that is near the window's end, else at the start of a character."""
    cut = data.rfind(b"\n", NEAR, ENTRY_MAX) + 1
    if cut:
        return cut
    cut = ENTRY_MAX
    while cut > 1 and data[cut] & 0xC0 == 0x80:  # a continuation byte: back off to its character
        cut -= 1
    return cut


class TurnOutput:
    """Fed the bytes of one run of the command, with the time they came (the caller's clock);
    emits its text events and notes, and hands each text to ``keep`` (the session file)."""

    def __init__(self, emit: Callable[[dict[str, Any]], None], keep: Callable[[str], None] = lambda text: None,
                 bound: int = MAX_OUTPUT) -> None:
        self.emit = emit
        self.keep = keep
        self.bound = bound
        #: Bytes the command printed this turn, and how many of them were taken to be sent.
        self.total = 0
        self.taken = 0
        #: Bytes taken and not sent yet, and when the oldest of them came.
        self.pending = bytearray()
        self.since = 0.0
        #: How many text events went out, and whether the bound was reached.
        self.sent = 0
        self.full = False
        #: Bytes of binary output not sent yet as a note (a run of them is one note).
        self.binary = 0

    def due(self, now: float) -> float | None:
        """Seconds until what waits must go out (0 or less: now); None when nothing waits."""
        return self.since + BURST - now if self.pending else None

    def feed(self, data: bytes, now: float) -> None:
        self.total += len(data)
        if self.full:
            return
        if self.bound and self.taken + len(data) > self.bound:
            self._reach(data[:self.bound - self.taken])
            return
        if not self.pending:
            self.since = now
        self.taken += len(data)
        self.pending += data
        while len(self.pending) > ENTRY_MAX:
            self._send(cut_point(self.pending))
        if self.pending and len(self.pending) <= len(data):  # all that waits came just now
            self.since = now
        if self.pending and now - self.since >= BURST:
            self.quiet(now)

    def quiet(self, now: float) -> None:
        """Time is up for what waits: it goes out now (all but the first bytes of a character the
        pause cut in two, which wait for the rest of it)."""
        self._send(whole_characters(self.pending))
        self.since = now

    def close(self) -> None:
        """The command ended: the rest goes out, and what was left out past the bound is said."""
        self._flush()
        self._say_binary()
        if self.total > self.taken:
            self.emit(note(f"left out the last {self.total - self.taken} bytes of the command's output: it printed "
                           f"{self.total} bytes this turn, and a turn keeps {self.bound} (max_output)"))

    def _reach(self, last: bytes) -> None:
        """The bound is reached: what fits, to a whole character, goes out, then a note that says so."""
        self.full = True
        self.pending += last
        kept = whole_characters(self.pending)
        self.taken += len(last) - (len(self.pending) - kept)
        del self.pending[kept:]
        self._flush()
        self.emit(note(f"the command's output reached this turn's bound of {self.bound} bytes (max_output): "
                       f"the command runs on, and what it prints from here is read but not kept"))

    def _flush(self) -> None:
        while self.pending:
            self._send(cut_point(self.pending) if len(self.pending) > ENTRY_MAX else len(self.pending))

    def _say_binary(self) -> None:
        if self.binary:
            self.emit(note(binary_words(self.binary)))
            self.binary = 0

    def _send(self, size: int) -> None:
        """The first ``size`` bytes of what waits, as text events; binary in them (or in a piece
        that goes on a binary run) is counted for its note, the text before and after it sent."""
        if not size:
            return
        text = bytes(self.pending[:size]).decode(errors="replace")
        del self.pending[:size]
        if not (self.binary or binary(text)):
            self._say_binary()
            self._text(text)
            return
        head, tail = text_ends(text)
        if head:
            self._say_binary()
            self._text(head)
        self.binary += size - len(head.encode()) - len(tail.encode())  # what the replaced bytes were
        if tail:
            self._say_binary()
            self._text(tail)

    def _text(self, text: str) -> None:
        data = text.encode()  # longer than the bytes read only where they were not UTF-8
        for piece in split_bytes(data) if len(data) > ENTRY_MAX else [data]:
            part = piece.decode()
            event: dict[str, Any] = {"type": "text", "text": part}
            if self.sent:
                event["continues"] = True
            self.emit(event)
            self.keep(part)
            self.sent += 1
