"""``seen``: a person opened the job (the app sends it), so it is no longer marked as ended unseen
(roost/rules/attention.py). Only a person may say what a person has looked at. Answers the job's row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roost.daemon.engine.messages import Message
from roost.daemon.ops.operation import PERSON, Context, Operation, Request
from roost.models import Job
from roost.protocol import JOB_ID

if TYPE_CHECKING:
    from roost.daemon.engine.ports import EngineApi
    from roost.daemon.supervisor import Supervisor


@dataclass
class Seen(Message):
    """A person opened the job: what its turn ended with has been seen."""

    def apply(self, eng: EngineApi, job: Job) -> None:
        if job.unseen:
            job.unseen = False
            eng.save(job)
        self.answer(None)


async def seen(sup: Supervisor, job_id: str) -> dict[str, Any]:
    """Mark the job seen; its row once that is committed."""
    sup.index.require(job_id)
    await sup.engine.ask(job_id, Seen())
    return sup.index.row(job_id)


def _run(ctx: Context, req: Request) -> Any:
    return seen(ctx.supervisor, req.args["job"])


OPERATION = Operation("seen", {"job": JOB_ID}, PERSON, _run)
