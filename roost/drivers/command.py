"""The command driver: any command-line agent, one run of its command line per turn.

The worker is roost/programs/command_worker.py, which speaks the worker protocol natively; this
module checks the command exists and hands the worker its spec (the command line, how the prompt
goes, and ``max_output``: how much of one turn's output the timeline keeps).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any, Mapping

from roost.bounds import MAX_OUTPUT
from roost.drivers.base import Driver, DriverError, Launch, LaunchContext, inherited_env, own_file
from roost.models import Job


def find_command(options: Mapping[str, Any]) -> str:
    """The command's program, found on PATH (the driver's own ``env`` PATH first); DriverError if not."""
    program = os.path.expanduser(str(options["command"][0]))
    search = (options.get("env") or {}).get("PATH") or os.environ.get("PATH", "")
    found = shutil.which(program, path=search)
    if found is None:
        raise DriverError(f"the command driver's program {program!r} was not found on PATH: install it, or "
                          f"give its full path as the first element of `command` in the config")
    return found


class CommandDriver(Driver):
    kind = "command"
    ready_timeout = 15.0

    def check(self, options: Mapping[str, Any]) -> None:
        find_command(options)

    def launch(self, job: Job, ctx: LaunchContext) -> Launch:
        options = ctx.options
        if not ctx.remote:
            find_command(options)
        if not ctx.remote and not os.path.isdir(job.cwd):
            raise DriverError(f"the job's working directory {job.cwd} no longer exists")
        session = job.session or str(ctx.sessions_dir / "command" / f"{job.id}.jsonl")
        spec = {"command": list(options["command"]), "resume_args": list(options.get("resume_args") or ()),
                "prompt_via": options.get("prompt_via", "arg"),
                "max_output": options.get("max_output", MAX_OUTPUT)}
        argv = [sys.executable, "-m", "roost.programs.command_worker", "--session", session, "--spec", json.dumps(spec)]
        env = inherited_env({**(options.get("env") or {}), **ctx.roost_env(job)})
        writable = () if ctx.remote else (own_file(session),)
        return Launch(argv=argv, env=env, cwd=job.cwd, session=session, record=ctx.record(job), writable=writable)
