"""Quotas one job cannot go past, whatever it does: jobs in its tree, spawns a minute in its tree,
and what its output may cost the store (docs/reliability.md#quotas). Pure rules, time passed in.

A tree is a root job and every job below it that is not archived. A spawn into a tree is refused,
saying which key and how to raise it, when the tree already holds ``max_tree_jobs`` jobs or had
``max_spawns_per_minute`` spawns in the last SPAWN_WINDOW seconds.

Output that is mostly control characters or bytes that are not UTF-8 (a binary file sent to
stdout, a flood of NUL) is not text a person reads, and JSON keeps each such character as six
bytes: ``binary`` tells it, and the timeline keeps a count of it instead ("4194304 bytes of binary
output").
"""

from __future__ import annotations

import collections
import re
from typing import Sequence

#: The window of ``max_spawns_per_minute``, in seconds.
SPAWN_WINDOW = 60.0
#: A text shorter than this is never taken for binary (a colour code or a cursor move on its own).
BINARY_JUDGED = 256
#: The share of characters that are control characters (or U+FFFD, a byte that was not UTF-8)
#: past which a text is binary. Coloured output (an ESC every few characters) stays well under it.
BINARY_SHARE = 0.25
#: A character that is not text: a control but tab, newline and CR, DEL, C1, or a replaced byte.
_NOT_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd]")


def tree_root(ancestors: Sequence[str], parent: str) -> str:
    """The root of the tree a child of ``parent`` joins (``ancestors``: the parent's, nearest first)."""
    return ancestors[-1] if ancestors else parent


def recent(times: collections.deque[float], now: float) -> int:
    """How many of ``times`` (oldest first) fall in the last SPAWN_WINDOW seconds; older ones are dropped."""
    while times and times[0] <= now - SPAWN_WINDOW:
        times.popleft()
    return len(times)


def spawn_refusal(root: str, tree_jobs: int, spawns_in_window: int, max_tree_jobs: int,
                  max_spawns_per_minute: int) -> str | None:
    """Why a new job may not join the tree of ``root`` (None: it may). 0 in a cap: no cap."""
    if max_tree_jobs and tree_jobs >= max_tree_jobs:
        return (f"the tree of {root} holds {tree_jobs} jobs, its cap (max_tree_jobs = {max_tree_jobs}): "
                f"archive finished ones, or raise max_tree_jobs in the config")
    if max_spawns_per_minute and spawns_in_window >= max_spawns_per_minute:
        return (f"the tree of {root} spawned {spawns_in_window} jobs in the last {SPAWN_WINDOW:.0f} s, its cap "
                f"(max_spawns_per_minute = {max_spawns_per_minute}): try again in a minute, or raise "
                f"max_spawns_per_minute in the config")
    return None


def binary(text: str) -> bool:
    """Whether ``text`` is output no person reads as text: at least BINARY_JUDGED characters, more
    than BINARY_SHARE of them control characters or replaced bytes."""
    if len(text) < BINARY_JUDGED or (text.isprintable() and "\ufffd" not in text):
        return False
    controls = len(text) - len(_NOT_TEXT.sub("", text))
    return controls > BINARY_SHARE * len(text)


def text_ends(text: str) -> tuple[str, str]:
    """The text before the first character that is not text, and after the last one."""
    first = _NOT_TEXT.search(text)
    if first is None:
        return text, ""
    last = _NOT_TEXT.search(text[::-1])
    assert last is not None
    return text[:first.start()], text[len(text) - last.start():]


def binary_words(size: int) -> str:
    """What the timeline says in place of ``size`` bytes of binary output."""
    return f"{size} bytes of binary output (not kept: mostly control characters or bytes that are not UTF-8)"
