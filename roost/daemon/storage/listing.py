"""Filling a page of ``list`` or ``children``: rows of the index's jobs up to a count and a byte
budget, built from each record's data (``models.wire_row``), so a listing of 100k jobs neither
loads the records it reads nor builds a ``Job`` for each. With ``lines`` a row goes as its line
of ``roost ls --json`` (``models.record_json``, encoded once, here), which the CLI writes as it
comes: the daemon encodes a record once, the CLI neither decodes nor encodes it again."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from roost.bounds import LABELS_CHARS, LABELS_MAX, LAST_TEXT_MAX, PATH_MAX, TITLE_MAX, quote
from roost.daemon.storage.records import Facts
from roost.models import PEEK_MAX, record_json
from roost.protocol import PAGE_BYTES, ErrorCode, ProtocolError

#: How much a row costs on the wire beyond its texts (keys, numbers, punctuation), a safe estimate.
ROW_OVERHEAD = 512
#: Records a listing reads from the store in one query (it stops at its limit or PAGE_BYTES).
READ_AT_ONCE = 256

#: A row of a job's record data: (facts, data, full) -> the wire row (JobIndex.wire).
Wire = Callable[[Facts, dict[str, Any], bool], dict[str, Any]]
#: The record data of ids, each with its stored length when read from the store (Records.peek_data).
Peek = Callable[[list[str]], dict[str, tuple[dict[str, Any], int | None]]]


def cursor_of(job: Facts) -> str:
    return f"{job.created_at!r}/{job.id}"


def parse_cursor(cursor: str, op: str) -> tuple[float, str]:
    try:
        ts, job_id = cursor.split("/", 1)
        return float(ts), job_id
    except ValueError:
        raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: cursor {quote(cursor)} is not one this daemon gave") from None


def fill(jobs: Iterator[Facts], limit: int, full: bool, peek: Peek, wire: Wire,
         lines: bool = False) -> tuple[list[Any], str | None]:
    """Rows of ``jobs`` (or, with ``lines``, their ``ls --json`` lines) until ``limit`` of them or
    PAGE_BYTES, and the cursor after the last one when more are left (None when not). Records
    are read a batch at a time, no more of them than the rest of the page is likely to hold."""
    out: list[Any] = []
    size = 0
    last: Facts | None = None
    average = ROW_OVERHEAD
    while batch := list(itertools.islice(jobs, _batch(limit - len(out), PAGE_BYTES - size, average))):
        datas = peek([j.id for j in batch])
        for facts in batch:
            if len(out) >= limit or (out and size >= PAGE_BYTES):
                return out, cursor_of(last) if last is not None else None
            data, stored = datas[facts.id]
            row = wire(facts, data, full)
            if lines:
                line = ls_line(row)
                out.append(line)
                size += len(line) + line.count('"') + line.count("\\") + 3  # as a string in the frame
            else:
                out.append(row)
                size += ROW_OVERHEAD + stored if full and stored is not None else row_size(row, full)
            last = facts
        average = max(size // max(len(out), 1), 1)
    return out, None


def ls_line(row: dict[str, Any]) -> str:
    """A row's line of ``roost ls --json``: ``record_json`` as compact, ASCII-only JSON (every
    non-ASCII character and DEL escaped, so no job text in it can act on a terminal). orjson
    encodes it in a tenth of json's time (110k records a listing); json where orjson cannot
    (text beyond ASCII, which json escapes; a value orjson refuses)."""
    record = record_json(row)
    try:
        raw = orjson.dumps(record)
    except TypeError:  # orjson.JSONEncodeError
        raw = b"\x80"
    line = raw.decode() if raw.isascii() else json.dumps(record, separators=(",", ":"))
    return line.replace("\x7f", "\\u007f") if "\x7f" in line else line


def _batch(rows_left: int, bytes_left: int, average: int) -> int:
    """How many records to read next: the rows the page may still take and one more (to know
    whether more are left), no more than its bytes left hold at the average row so far."""
    return max(1, min(rows_left + 1, READ_AT_ONCE, bytes_left // average + 1))


def row_size(row: dict[str, Any], full: bool) -> int:
    """About how many bytes a row takes on the wire (texts in UTF-8, the rest estimated), its
    fields counted as cut to their caps (roost/bounds.py), as the row carries them."""
    labels = row["labels"]
    chars = sum(len(k) + len(v) for k, v in labels.items())
    size = (ROW_OVERHEAD + _utf8(row["title"], TITLE_MAX) + _utf8(row["cwd"], PATH_MAX)
            + 64 * min(len(labels), LABELS_MAX) + 4 * min(chars, LABELS_CHARS))
    if row["approvals"]:  # each at most about WHAT_MAX bytes (roost/rules/approvals.py)
        size += len(repr(row["approvals"]))
    if full:
        size += (len(repr(row["approval_policy"])) + len(repr(row["approval_grants"]))
                 + _utf8(row["last_text"], LAST_TEXT_MAX) + _utf8(row["reason"], LAST_TEXT_MAX)
                 + len(row["question"].encode()) + len(repr(row["driver_opts"])) + len(repr(row["usage"])))
    else:
        size += 2 * (min(len(row["last_text"]), PEEK_MAX) + min(len(row["reason"]), PEEK_MAX)
                     + min(len(row["question"]), PEEK_MAX)) + len(repr(row["usage"]))
    return size


def _utf8(text: str, cap: int) -> int:
    """The bytes of ``text`` cut to ``cap`` characters, at most (4 bytes a character)."""
    return len(text.encode()) if len(text) <= cap else 4 * cap
