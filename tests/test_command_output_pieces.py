"""How a command's output becomes text events (roost/programs/turn_output.py), in process: the time
each byte came is given, as the command worker gives its loop's clock, so the BURST rule is tested
without waiting for it."""

from __future__ import annotations

import random
from typing import Any

import pytest

from roost.programs.turn_output import BURST, NEAR, TurnOutput, cut_point
from roost.protocol import ENTRY_MAX


class Sink:
    """What a TurnOutput emitted, with the time of each, and what it handed the session file."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.kept: list[str] = []
        self.now = 0.0
        self.at: list[float] = []

    def output(self, bound: int = 0) -> TurnOutput:
        return TurnOutput(self.emit, self.kept.append, bound)

    def emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self.at.append(self.now)

    @property
    def texts(self) -> list[str]:
        return [e["text"] for e in self.events if e["type"] == "text"]

    @property
    def notes(self) -> list[str]:
        return [e["message"] for e in self.events if e["type"] == "note"]


def pump(sink: Sink, output: TurnOutput, writes: list[tuple[float, bytes]]) -> None:
    """Feed timed writes as the worker's pump does: what is due goes out before the next read."""
    for at, data in writes:
        while (wait := output.due(sink.now)) is not None and sink.now + wait <= at:
            sink.now = max(sink.now, sink.now + wait)
            output.quiet(sink.now)
        sink.now = at
        output.feed(data, at)
    output.close()


def test_a_flood_becomes_entries_of_about_entry_max_that_join_back_byte_for_byte():
    sink = Sink()
    rng = random.Random(7)
    data = b"".join(b"line %07d \xc3\xbc\xe2\x82\xac\xf0\x9f\x98\x80 %s\n" % (i, b"x" * rng.randrange(90))
                    for i in range(100_000))
    writes, at, start = [], 0.0, 0
    while start < len(data):  # writes of any size, 10 µs apart: faster than BURST
        size = rng.randrange(1, 70_000)
        writes.append((at, data[start:start + size]))
        start, at = start + size, at + 0.00001
    pump(sink, sink.output(), writes)
    assert "".join(sink.texts).encode() == data and "".join(sink.kept).encode() == data
    assert all(NEAR <= len(t.encode()) <= ENTRY_MAX for t in sink.texts[:-1])
    assert len(sink.texts) <= len(data) // NEAR + 1
    assert all(t.endswith("\n") for t in sink.texts), "every cut is after a newline when one is near"


def test_a_long_line_is_cut_at_a_character_and_a_far_newline_does_not_make_a_small_entry():
    data = b"short\n" + "é😀".encode() * 50_000
    cut = cut_point(data)
    assert cut > NEAR and cut <= ENTRY_MAX
    assert data[:cut].decode() and data[cut:].decode()  # both halves whole characters


def test_a_trickle_goes_out_within_burst_and_a_burst_within_it_goes_together():
    sink = Sink()
    pump(sink, sink.output(), [(0.0, b"one\n"), (0.01, b"two\n"), (1.0, b"three\n"), (2.0, b"four\n")])
    assert sink.texts == ["one\ntwo\n", "three\n", "four\n"]
    assert sink.at[:2] == pytest.approx([BURST, 1.0 + BURST]), "held no longer than BURST after its first byte"


def test_a_steady_stream_slower_than_entry_max_is_never_held_longer_than_burst():
    sink = Sink()
    writes = [(i * 0.01, b"tick %d\n" % i) for i in range(200)]  # 100 lines a second for two seconds
    pump(sink, sink.output(), writes)
    assert "".join(sink.texts).encode() == b"".join(d for _, d in writes)
    for text, at in zip(sink.texts, sink.at):
        first = int(text.split("\n", 1)[0].split()[1])
        assert at - first * 0.01 <= BURST + 1e-9, f"tick {first} waited {at - first * 0.01:.3f}s"
    assert len(sink.texts) <= 2 / BURST + 1, "coalesced: one entry a BURST at most"


def test_a_pause_inside_a_character_does_not_break_it():
    sink = Sink()
    data = "naïve 😀\n".encode()
    pump(sink, sink.output(), [(0.0, data[:3]), (1.0, data[3:8]), (2.0, data[8:])])
    assert sink.texts == ["na", "ïve ", "😀\n"]


def test_bytes_that_are_not_utf8_become_replacement_characters_within_the_entry_bound():
    sink = Sink()
    data = b"\xffabc" * (ENTRY_MAX // 4)  # a quarter of the characters replaced: still text
    pump(sink, sink.output(), [(0.0, data)])
    assert "".join(sink.texts) == "\ufffdabc" * (ENTRY_MAX // 4)  # U+FFFD is three bytes: split again
    assert all(len(t.encode()) <= ENTRY_MAX for t in sink.texts) and len(sink.texts) == 2


def test_output_that_is_mostly_not_text_is_one_note_of_its_size_and_the_text_around_it_is_kept():
    sink = Sink()
    pump(sink, sink.output(), [(0.0, b"start\n" + b"\xff" * ENTRY_MAX), (1.0, b"\0" * (3 * ENTRY_MAX) + b"end\n")])
    assert sink.texts == ["start\n", "end\n"]
    assert sink.notes == [f"{4 * ENTRY_MAX} bytes of binary output (not kept: mostly control characters or bytes "
                          "that are not UTF-8)"]
    assert [e["type"] for e in sink.events] == ["text", "note", "text"]


def test_every_text_after_a_turns_first_continues_it():
    sink = Sink()
    pump(sink, sink.output(), [(0.0, b"a\n"), (1.0, b"b\n")])
    pump(sink, sink.output(), [(2.0, b"c\n")])
    assert [e.get("continues", False) for e in sink.events] == [False, True, False]


@pytest.mark.parametrize("bound", [10, 11, 12, 13])
def test_the_bound_keeps_whole_characters_and_counts_what_it_left_out(bound):
    sink = Sink()
    data = "abcdefghi😀jk".encode()  # the 4-byte character at 9..12
    pump(sink, sink.output(bound), [(0.0, data[:5]), (0.0, data[5:]), (1.0, b"more" * 1000)])
    keep = {10: "abcdefghi", 11: "abcdefghi", 12: "abcdefghi", 13: "abcdefghi😀"}[bound]
    assert "".join(sink.texts) == keep
    left_out = len(data) + 4000 - len(keep.encode())
    assert sink.notes == [f"the command's output reached this turn's bound of {bound} bytes (max_output): the "
                          f"command runs on, and what it prints from here is read but not kept",
                          f"left out the last {left_out} bytes of the command's output: it printed "
                          f"{len(data) + 4000} bytes this turn, and a turn keeps {bound} (max_output)"]


def test_output_of_exactly_the_bound_is_whole_without_a_note():
    sink = Sink()
    pump(sink, sink.output(100), [(0.0, b"x" * 60), (0.0, b"y" * 40)])
    assert "".join(sink.texts) == "x" * 60 + "y" * 40 and sink.notes == []


def test_a_bound_reached_inside_a_big_write_sends_what_fits_in_entries_then_the_note():
    sink = Sink()
    pump(sink, sink.output(3 * ENTRY_MAX), [(0.0, b"z" * 10 * ENTRY_MAX)])
    assert "".join(sink.texts) == "z" * 3 * ENTRY_MAX and len(sink.texts) == 3
    assert [e["type"] for e in sink.events] == ["text", "text", "text", "note", "note"]
