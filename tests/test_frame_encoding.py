"""Frames are written by orjson where it can (roost.protocol.encode) and by json where it cannot:
either way a frame reads back as the value it was made of, and what json alone would write
reads back the same."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roost.cli.listing import write_json_array
from roost.protocol import ProtocolError, decode, dumps, encode, loads

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
scalars = (st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 64 - 1) | texts
           | st.floats(allow_nan=False, allow_infinity=False))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(texts, inner, max_size=5),
                      max_leaves=30)


def _json_frame(obj: object) -> bytes:
    return (dumps(obj) + "\n").encode()


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(texts, values, max_size=6))
def test_a_frame_reads_back_as_what_json_alone_would_have_written(obj: dict) -> None:
    frame = encode(obj)
    assert frame.endswith(b"\n") and frame.count(b"\n") == 1
    assert loads(frame) == loads(_json_frame(obj)) == obj


@pytest.mark.parametrize("obj", [{"n": 2 ** 70}, {"k": {1: "a key that is not a string"}}, {"t": (1, 2)}])
def test_what_orjson_refuses_is_written_by_json(obj: dict) -> None:
    assert encode(obj) == _json_frame(obj)


def test_text_beyond_ascii_stays_utf8_in_a_frame_as_json_wrote_it() -> None:
    obj = {"text": "naïve — 日本 😀 \u2028 \x00 \x7f \"q\" \\"}
    assert encode(obj) == _json_frame(obj)


def test_a_lone_surrogate_escape_is_still_refused_and_a_pair_or_an_escaped_backslash_is_not() -> None:
    with pytest.raises(ProtocolError, match="lone surrogate"):
        decode(b'{"text": "\\ud800 alone"}')
    assert decode(b'{"text": "\\ud83d\\ude00"}') == {"text": "😀"}
    assert decode(b'{"text": "\\\\ud800 is six characters"}') == {"text": "\\ud800 is six characters"}


def test_ls_json_is_one_array_one_record_a_line_whatever_the_pages() -> None:
    pages = [["{\"id\":\"a\"}", "{\"id\":\"b\"}"], [], ["{\"id\":\"c\"}"]]
    out = io.StringIO()
    assert write_json_array(iter(pages), out) == 3
    assert out.getvalue() == '[\n{"id":"a"},\n{"id":"b"},\n{"id":"c"}\n]\n'
    assert [row["id"] for row in json.loads(out.getvalue())] == ["a", "b", "c"]
    empty = io.StringIO()
    assert write_json_array(iter([[], []]), empty) == 0 and json.loads(empty.getvalue()) == []
