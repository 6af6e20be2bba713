"""The quota rules without a daemon (roost/rules/quotas.py): each bound at and past it."""

from __future__ import annotations

import collections

from roost.rules.quotas import BINARY_JUDGED, SPAWN_WINDOW, binary, recent, spawn_refusal, text_ends, tree_root


def test_binary_is_judged_from_its_size_and_past_a_quarter_of_controls() -> None:
    assert not binary("\0" * (BINARY_JUDGED - 1))  # too short to judge
    assert binary("\0" * BINARY_JUDGED)
    quarter = "\0" * 64 + "a" * 192  # exactly a quarter: still text
    assert not binary(quarter) and binary("\0" + quarter[:-1])
    assert binary("\ufffd" * 100 + "a" * 200)  # bytes that were not UTF-8 count
    assert not binary("\x1b[01;34mdirectory\x1b[0m\n" * 40)  # coloured output is text
    assert not binary("a\tb\r\n" * 100)


def test_text_ends_are_what_comes_before_and_after_the_binary() -> None:
    assert text_ends("make\n\0\0\x01\0done\n") == ("make\n", "done\n")
    assert text_ends("plain") == ("plain", "")
    assert text_ends("\0\0") == ("", "")


def test_spawn_refusal_at_and_past_each_cap() -> None:
    assert spawn_refusal("r", 4, 0, 5, 0) is None
    assert "holds 5 jobs, its cap (max_tree_jobs = 5)" in str(spawn_refusal("r", 5, 0, 5, 0))
    assert spawn_refusal("r", 1, 2, 0, 3) is None
    assert "spawned 3 jobs in the last 60 s" in str(spawn_refusal("r", 1, 3, 0, 3))
    assert spawn_refusal("r", 10 ** 6, 10 ** 6, 0, 0) is None  # 0: no cap


def test_the_window_drops_what_is_a_minute_old() -> None:
    times = collections.deque([0.0, 10.0, 59.0])
    assert recent(times, SPAWN_WINDOW - 0.1) == 3
    assert recent(times, SPAWN_WINDOW) == 2 and list(times) == [10.0, 59.0]
    assert tree_root(["p", "root"], "x") == "root" and tree_root([], "x") == "x"
