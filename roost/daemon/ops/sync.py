"""``sync``: a barrier. Answers once everything posted to the jobs' mailboxes before it is applied and
committed — with what those messages posted in turn — and the rows it changed are pushed to
subscribers (queued before this answer on every connection). Then "nothing happened" can be checked
instead of slept on: the test harness's ``daemon.sync()`` (tests/conftest.py).

It does not wait for what a worker has not said yet; a test waits for the worker's word first (a
timeline entry), then syncs. It touches no job, so any caller may ask it.
"""

from __future__ import annotations

from typing import Any

from roost.daemon.ops.operation import Context, Operation, Reach, Request, Rule


async def _run(ctx: Context, req: Request) -> dict[str, Any]:
    sup = ctx.supervisor
    await sup.engine.idle()
    await sup.publisher.flushed()
    return {"synced": True}


OPERATION = Operation("sync", {}, Rule(Reach.ANY), _run)
