"""The built-in agent's driver: runs roost/programs/builtin_agent.py as a separate process."""

from __future__ import annotations

import sys

from roost.drivers.base import Driver, Launch, LaunchContext, inherited_env
from roost.models import Job


class BuiltinDriver(Driver):
    kind = "builtin"
    ready_timeout = 15.0

    def launch(self, job: Job, ctx: LaunchContext) -> Launch:
        session = job.session or str(ctx.sessions_dir / f"{job.id}.jsonl")
        argv = [sys.executable, "-m", "roost.programs.builtin_agent", "--session", session]
        return Launch(argv=argv, env=inherited_env(ctx.roost_env(job)), cwd=job.cwd, session=session,
                      record=ctx.record(job))
