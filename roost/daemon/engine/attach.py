"""Who has a job open, decided in its mailbox: "attached" is an input of the time rules (a job a
person has open is not reaped) and of its children's rows (``parent_open``), so it changes in the
job's order like everything else the rules read."""

from __future__ import annotations


from roost.daemon.engine.messages import Attach, Due, Release, Resume
from roost.daemon.engine.ports import EngineApi
from roost.models import RESUMABLE_STATES, Job



def on_attach(eng: EngineApi, job: Job, msg: Attach) -> None:
    """A client opened the job; with ``resume``, a job whose worker is closed starts it again from
    its session file (opening a job resumes it), taking any messages and reports waiting."""
    if eng.index.attach(job.id, msg.conn):
        _open_changed(eng, job)
    if msg.resume and job.id not in eng.slots and job.archived_at is None and job.state in RESUMABLE_STATES:
        eng.post(job.id, Resume())
    msg.answer(None)


def on_release(eng: EngineApi, job: Job, msg: Release) -> None:
    if eng.index.release(job.id, msg.conn):
        _open_changed(eng, job)
    msg.answer(None)


def _open_changed(eng: EngineApi, job: Job) -> None:
    eng.changed([job.id])
    eng.kids_changed(job)
    if job.id in eng.slots:
        eng.post(job.id, Due())
