"""Quotas one job cannot go past, whatever it does: jobs in its tree, spawns a minute in its tree,
and what its output may cost the store (docs/reliability.md#quotas). Pure rules, time passed in.

A tree is a root job and every job below it that is not archived. A spawn into a tree is refused,
saying which key and how to raise it, when the tree already holds ``max_tree_jobs`` jobs or had
``max_spawns_per_minute`` spawns in the last SPAWN_WINDOW seconds.

What output may cost the store: roost/binary_text.py (the worker side judges it too).
"""

from __future__ import annotations

import collections
from typing import Sequence

#: The window of ``max_spawns_per_minute``, in seconds.
SPAWN_WINDOW = 60.0


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
