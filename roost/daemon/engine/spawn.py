"""A new job, decided in its own mailbox: its record, its ``spawned`` entry, its first message and
its place in the run queue are written in one change, so a spawn the store refuses leaves no job,
no count and no queue place behind (the journal takes the index's record back). A spawn into a
tree is checked against the tree's quotas here, where no other spawn can interleave with the check
(roost/rules/quotas.py)."""

from __future__ import annotations

import collections

from roost.daemon.engine import spend
from roost.daemon.engine.messages import Spawn
from roost.daemon.engine.ports import EngineApi
from roost.models import Job
from roost.protocol import ErrorCode, ProtocolError
from roost.rules import quotas


def on_spawn(eng: EngineApi, job: Job, msg: Spawn) -> None:
    if eng.index.get(job.id) is not None:
        raise ProtocolError(ErrorCode.INTERNAL, f"spawn: job id {job.id} is taken; spawn again")
    parent = eng.index.get(job.parent) if job.parent else None
    if job.parent and (parent is None or parent.archived_at is not None):  # archived since it was asked
        raise ProtocolError(ErrorCode.ARCHIVED, f"parent {job.parent} is archived")
    if parent is not None:
        _count_spawn(eng, parent)
    spend.set_budget(eng, job, *msg.budget, spent=spend.Spent())
    eng.store.save_job(job)
    eng.timeline(job, "spawned", parent=job.parent, driver=job.driver, lifetime=job.lifetime, by=msg.by)
    eng.changed(eng.index.add(job))
    eng.add_message(job.id, msg.prompt)
    eng.queue.add(job.id)
    eng.pump()  # once committed: it starts, or its row says what it waits for
    msg.answer(job.id)


def check_room(eng: EngineApi, parent: Job) -> collections.deque[float]:
    """Refuse a child the parent's tree has no room for (ProtocolError ``quota``, saying which cap);
    the tree's spawn times otherwise. The supervisor asks before it makes anything for the spawn
    (a worktree); the spawn's own turn in the mailbox asks again and counts it."""
    root = quotas.tree_root(eng.index.ancestors(parent.id), parent.id)
    times = eng.spawn_times.setdefault(root, collections.deque())
    config = eng.config
    why = quotas.spawn_refusal(root, eng.index.counts(root)[0] + 1, quotas.recent(times, eng.monotonic()),
                               config.max_tree_jobs, config.max_spawns_per_minute)
    if why is not None:
        raise ProtocolError(ErrorCode.QUOTA, f"spawn refused: {why}")
    return times


def _count_spawn(eng: EngineApi, parent: Job) -> None:
    """Count the child against its tree's spawns of the minute (taken back if the spawn is not kept)."""
    times = check_room(eng, parent)
    now = eng.monotonic()
    times.append(now)
    eng.undo(lambda: times.remove(now) if now in times else None)
