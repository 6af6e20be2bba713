"""The search screen's rules, without a terminal."""

from __future__ import annotations

from roost.rules.search_results import LEAD_CHARS, SNIPPET_SHOWN, one_line, when


def test_a_snippet_is_one_line_with_its_spans_kept() -> None:
    assert one_line({"text": "a\nheron\tthere", "marks": [[2, 7]]}) == ("a heron there", [(2, 7)])


def test_the_text_long_before_the_first_match_gives_way_to_an_ellipsis() -> None:
    text = "x" * 50 + " heron and heron"
    flat, spans = one_line({"text": text, "marks": [[61, 66], [51, 56]]})
    assert flat.startswith("…") and flat.endswith("x heron and heron")
    assert [flat[s:e] for s, e in spans] == ["heron", "heron"] and spans[0][0] == LEAD_CHARS + 1
    near = "a few words heron"[2:]
    assert one_line({"text": near, "marks": [[10, 15]]}) == (near, [(10, 15)]), "context that fits stays"


def test_spans_past_the_shown_text_are_cut_or_dropped_and_bad_ones_ignored() -> None:
    text = "x" * (SNIPPET_SHOWN - 2) + "heron"
    flat, spans = one_line({"text": text, "marks": [[SNIPPET_SHOWN - 2, SNIPPET_SHOWN + 3], [SNIPPET_SHOWN + 1, 9999],
                                                    "bad", [1], [5, 2]]})
    assert flat.endswith("x" * LEAD_CHARS + "he") and [flat[s:e] for s, e in spans] == ["he"]


def test_when_is_an_age_and_survives_a_bad_time() -> None:
    assert when({"ts": 100.0}, 400.0) == "5m"
    assert when({"ts": "nope"}, 400.0) == "?"
