"""The size of every string roost keeps or echoes, defined once: checked where it enters (spawn,
label, rename, the agents' tools — all through the protocol), and applied again to every row, so
that a record from an older roost (or one written around the door) can never make a reply too
big for a frame. docs/protocols.md quotes these caps; a test reads them from here.

A cap counts characters (``len`` of the text): even a character JSON escapes to six bytes keeps a
row of capped fields a few tens of kilobytes, far under PAGE_BYTES.
"""

from __future__ import annotations

from typing import Any

#: A job's title (spawn, rename).
TITLE_MAX = 200
#: A label's key, a label's value, how many labels one job has, and all its keys and values together.
LABEL_KEY_MAX = 64
LABEL_VALUE_MAX = 1024
LABELS_MAX = 32
LABELS_CHARS = 8 * 1024
#: A path: a cwd, a worktree, a session file.
PATH_MAX = 4096
#: A name from the config or a client: a driver profile, a host, a lifetime, a client's name.
NAME_MAX = 128
#: A git branch or base (a ref name or a commit).
BRANCH_MAX = 255
#: A job id, a list cursor, a token: what the daemon itself hands out is far shorter.
ID_MAX = 128
#: How much of a job's last text (or why it failed) a record keeps from a report, and a full row
#: carries of any record (a turn's own text keeps its last 4,000 characters: roost/daemon/engine/turns.py).
LAST_TEXT_MAX = 16 * 1024
#: How much of a value an error message quotes.
QUOTE_MAX = 80
#: How many bytes of one turn's output a command driver keeps unless ``max_output`` says (0: all).
MAX_OUTPUT = 256 * 1024 * 1024

#: The cap of each string field of a record (roost.models.Job), as rows carry them.
RECORD_CAPS: dict[str, int] = {
    "title": TITLE_MAX, "driver": NAME_MAX, "cwd": PATH_MAX, "parent": ID_MAX, "session": PATH_MAX, "fork_of": PATH_MAX,
    "lifetime": NAME_MAX, "repo": PATH_MAX, "worktree": PATH_MAX, "branch": BRANCH_MAX, "base": BRANCH_MAX,
    "host": NAME_MAX, "last_text": LAST_TEXT_MAX, "reason": LAST_TEXT_MAX,
}


_RECORD_CAP_ITEMS = tuple(RECORD_CAPS.items())


def quote(value: Any) -> str:
    """``repr(value)`` cut to QUOTE_MAX characters, for an error message that names what it refused
    (a refusal must not be as big as what it refuses)."""
    text = repr(value)
    return text if len(text) <= QUOTE_MAX else f"{text[:QUOTE_MAX - 1]}… ({len(str(value))} characters)"


def too_long(field: str, value: str, cap: int) -> str | None:
    """What is wrong with ``value`` when it is over its cap (the field, its size, the cap), else None."""
    if len(value) <= cap:
        return None
    return f"{field} is {len(value)} characters, over the {cap}-character cap"


def labels_problem(labels: dict[Any, Any]) -> str | None:
    """What keeps ``labels`` from being kept as a job's labels (string keys and values, each and
    all within their caps), or None."""
    if len(labels) > LABELS_MAX:
        return f"{len(labels)} labels, over the {LABELS_MAX}-label cap"
    total = 0
    for key, value in labels.items():
        if not isinstance(value, str):
            return f"label {quote(key)} must be a string, not {type(value).__name__}"
        if not key:
            return "a label key may not be empty"
        problem = too_long(f"label key {quote(key)}", key, LABEL_KEY_MAX) or too_long(
            f"the value of label {quote(key)}", value, LABEL_VALUE_MAX)
        if problem:
            return problem
        total += len(key) + len(value)
    if total > LABELS_CHARS:
        return f"labels of {total} characters in all, over the {LABELS_CHARS}-character cap"
    return None


def cut(text: str, cap: int) -> str:
    """``text`` at most ``cap`` characters, a cut one ending in an ellipsis."""
    return text if len(text) <= cap else text[:cap - 1] + "…"


def bounded_labels(labels: dict[str, str]) -> tuple[dict[str, str], int]:
    """Labels as a row carries them whatever the record holds: each key and value cut to its cap,
    at most LABELS_MAX of them and LABELS_CHARS in all; with how many were left out."""
    out: dict[str, str] = {}
    total = 0
    for key, value in labels.items():
        key, value = cut(str(key), LABEL_KEY_MAX), cut(str(value), LABEL_VALUE_MAX)
        if len(out) >= LABELS_MAX or total + len(key) + len(value) > LABELS_CHARS:
            break
        out[key] = value
        total += len(key) + len(value)
    return out, len(labels) - len(out)


def bound_record(data: dict[str, Any]) -> None:
    """Cut a record's wire form (``Job.to_dict``) in place to the caps, so no row outgrows them.
    Every row read pays it (110k a listing), so the loop is kept to the bare checks."""
    get = data.get
    for name, cap in _RECORD_CAP_ITEMS:
        value = get(name)
        if value.__class__ is str and len(value) > cap:
            data[name] = cut(value, cap)
    labels = data.get("labels")
    if labels and (len(labels) > LABELS_MAX or sum(len(k) + len(v) for k, v in labels.items()) > LABELS_CHARS
                   or any(len(k) > LABEL_KEY_MAX or len(v) > LABEL_VALUE_MAX for k, v in labels.items())):
        data["labels"], left = bounded_labels(labels)
        data["labels_left_out"] = left
