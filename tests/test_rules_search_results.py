"""The search screen's rules, without a terminal."""

from __future__ import annotations

from roost.rules.search_results import SNIPPET_SHOWN, one_line, when


def test_a_snippet_is_one_line_with_its_spans_kept() -> None:
    assert one_line({"text": "a\nheron\tthere", "marks": [[2, 7]]}) == ("a heron there", [(2, 7)])


def test_spans_past_the_shown_text_are_cut_or_dropped_and_bad_ones_ignored() -> None:
    text = "x" * (SNIPPET_SHOWN - 2) + "heron"
    flat, spans = one_line({"text": text, "marks": [[SNIPPET_SHOWN - 2, SNIPPET_SHOWN + 3], [SNIPPET_SHOWN + 1, 9999],
                                                    "bad", [1], [5, 2]]})
    assert len(flat) == SNIPPET_SHOWN and spans == [(SNIPPET_SHOWN - 2, SNIPPET_SHOWN)]


def test_when_is_an_age_and_survives_a_bad_time() -> None:
    assert when({"ts": 100.0}, 400.0) == "5m"
    assert when({"ts": "nope"}, 400.0) == "?"
