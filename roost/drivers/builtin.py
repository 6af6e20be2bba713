"""The built-in agent's driver: runs roost/programs/builtin_agent.py as a separate process, or
starts one ahead as a spare (``--spare``) that a bind turns into that process."""

from __future__ import annotations

import sys
from typing import Any, Mapping

from pathlib import Path

from roost.drivers.base import JOB_VARS, Driver, Launch, LaunchContext, copy_session, inherited_env, own_file
from roost.models import Job


#: How the built-in agent is run (the interpreter the daemon runs on).
PROGRAM = (sys.executable, "-m", "roost.programs.builtin_agent")


class BuiltinDriver(Driver):
    kind = "builtin"
    ready_timeout = 15.0

    def launch(self, job: Job, ctx: LaunchContext) -> Launch:
        session = job.session or str(ctx.sessions_dir / f"{job.id}.jsonl")
        argv = [*PROGRAM, "--session", session]
        writable = () if ctx.remote else (own_file(session),)
        return Launch(argv=argv, env=inherited_env(ctx.roost_env(job)), cwd=job.cwd, session=session,
                      record=ctx.record(job), writable=writable)

    def fork(self, source: Job, sessions_dir: Path, new_id: str) -> tuple[str | None, str | None]:
        """The built-in agent has no fork of its own: the fork gets a copy of the session file."""
        return copy_session(source, sessions_dir / f"{new_id}.jsonl"), None

    def provider_urls(self, options: Mapping[str, Any]) -> list[str]:
        """None: the built-in agent needs no model and no network."""
        return []

    def spare(self, ctx: LaunchContext) -> Launch:
        """The same program and environment, less the job (also one the daemon's environment named:
        a bind adds the job's); it waits in the state directory."""
        env = {k: v for k, v in inherited_env({"ROOST_SOCKET": str(ctx.socket)}).items() if k not in JOB_VARS}
        return Launch(argv=[*PROGRAM, "--spare"], env=env, cwd=str(ctx.state_dir))
