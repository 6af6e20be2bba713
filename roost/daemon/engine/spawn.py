"""A new job, decided in its own mailbox: its record, its ``spawned`` entry, its first message and
its place in the run queue are written in one change, so a spawn the store refuses leaves no job,
no count and no queue place behind (the journal takes the index's record back)."""

from __future__ import annotations


from roost.daemon.engine import spend
from roost.daemon.engine.messages import Spawn
from roost.daemon.engine.ports import EngineApi
from roost.models import Job
from roost.protocol import ErrorCode, ProtocolError



def on_spawn(eng: EngineApi, job: Job, msg: Spawn) -> None:
    if eng.index.get(job.id) is not None:
        raise ProtocolError(ErrorCode.INTERNAL, f"spawn: job id {job.id} is taken; spawn again")
    parent = eng.index.get(job.parent) if job.parent else None
    if job.parent and (parent is None or parent.archived_at is not None):  # archived since it was asked
        raise ProtocolError(ErrorCode.ARCHIVED, f"parent {job.parent} is archived")
    spend.set_budget(eng, job, *msg.budget, spent=spend.Spent())
    eng.store.save_job(job)
    eng.timeline(job, "spawned", parent=job.parent, driver=job.driver, lifetime=job.lifetime, by=msg.by)
    eng.changed(eng.index.add(job))
    eng.add_message(job.id, msg.prompt)
    eng.queue.add(job.id)
    eng.pump()  # once committed: it starts, or its row says what it waits for
    msg.answer(job.id)
