"""``rename``: give a job a new title (``roost rename JOB TITLE``), through its mailbox.

The title is one line: its whitespace is collapsed, and it must then hold 1 to TITLE_MAX characters.
The timeline keeps the old title beside the new one. Answers the job's row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roost.bounds import TITLE_MAX
from roost.daemon.engine.messages import Message
from roost.daemon.ops.operation import MINE, Context, Operation, Request
from roost.models import Job
from roost.protocol import JOB_ID, Arg, ErrorCode, ProtocolError

if TYPE_CHECKING:
    from roost.daemon.engine.ports import EngineApi
    from roost.daemon.supervisor import Supervisor


@dataclass
class Rename(Message):
    title: str

    def apply(self, eng: EngineApi, job: Job) -> None:
        eng.timeline(job, "renamed", old=job.title, title=self.title)
        job.title = self.title
        eng.save(job)
        self.answer(None)


async def rename(sup: Supervisor, job_id: str, title: str) -> dict[str, Any]:
    """Rename a job; its row once the new title is committed."""
    sup.index.require(job_id)
    title = " ".join(title.split())
    if not title or len(title) > TITLE_MAX:
        raise ProtocolError(ErrorCode.BAD_ARGS, f"rename: a title is 1 to {TITLE_MAX} characters, not {len(title)}")
    await sup.engine.ask(job_id, Rename(title))
    return sup.index.row(job_id)


def _run(ctx: Context, req: Request) -> Any:
    return rename(ctx.supervisor, req.args["job"], req.args["title"])


OPERATION = Operation("rename", {"job": JOB_ID, "title": Arg((str,), required=True, cap=TITLE_MAX)}, MINE, _run)
