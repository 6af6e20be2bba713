"""`roost stop`: through the daemon, or, when none answers (after a crash), on the workers a past
daemon left under their shims (roost/daemon/processes/offline_stop.py; docs/reliability.md,
"`roost stop` while no daemon runs"). It never starts a daemon for a stop: one may be what crashes."""

from __future__ import annotations

import fcntl
import os
from typing import Any

import click

from roost import paths as paths_mod
from roost.cli.common import Ctx, fail, pass_ctx, refused, say
from roost.client import UNREACHABLE, ClientError, job_identity, probe
from roost.models import STOPPABLE_STATES


@click.command()
@click.argument("job_id", required=False)
@click.option("--tree", is_flag=True, help="Also every running job below it, nested too.")
@click.option("--all", "every", is_flag=True, help="Every job in a turn, queued or waiting for an answer.")
@pass_ctx
def stop(ctx: Ctx, job_id: str | None, tree: bool, every: bool) -> None:
    """Stop a job's turn (and with --tree its whole tree), or with --all every job's. With no daemon
    running, the workers are ended where a past daemon left them, and the next daemon records
    their jobs as stopped."""
    if every == (job_id is not None) or (every and tree):
        fail("give a job's id (with --tree or not), or --all")
    paths = paths_mod.resolve()
    error = probe(paths.socket)
    if error is not None and error.code == UNREACHABLE:
        return stop_offline(ctx, paths, job_id, tree)
    if job_id is None:
        return stop_every(ctx)
    result = ctx.call("stop", job=job_id, tree=tree)
    n = result["stopped"]
    if n == 0:
        say(f"{job_id} was already stopped" if result.get("already") else "nothing was running")
    else:
        own = result.get("subagents", 0)
        say(f"stopped {n} job{'s' if n != 1 else ''}: {' '.join(result['ids'])}"
            + (f" (and {own} subagent{'s' if own != 1 else ''} of the agent's own)" if own else ""))


def stop_every(ctx: Ctx) -> None:
    """Every job in a stoppable state, each stopped on its own (one that settled meanwhile is skipped)."""
    stopped: list[str] = []
    with ctx.client() as client:
        try:
            ids, cursor = [], None
            while True:
                page = client.call("list", states=sorted(s.value for s in STOPPABLE_STATES), cursor=cursor,
                                   limit=1000)
                ids += [row["id"] for row in page["rows"]]
                if (cursor := page["next"]) is None:
                    break
            for job_id in ids:
                stopped += client.call("stop", job=job_id, tree=False)["ids"]
        except ClientError as exc:
            refused(exc)
    say(f"stopped {len(stopped)} job{'s' if len(stopped) != 1 else ''}: {' '.join(stopped)}" if stopped
        else "nothing was running")


def stop_offline(ctx: Ctx, paths: paths_mod.Paths, job_id: str | None, tree: bool) -> None:
    """The stop with no daemon, the daemon's lock held meanwhile so that none starts under it. A job's
    is refused: told by what a job cannot shed — the caller runs below a worker's shim on record (every
    shim is a subreaper: what a job's tree orphans stays below it; roost/daemon/server/peers.py) —
    besides what its environment says."""
    from roost.daemon.processes.offline_stop import (jobs_on_record, shims_on_record,  # most stops find a daemon
                                                     stop_without_daemon)
    from roost.daemon.server.peers import shim_owner

    owner = shim_owner(os.getpid(), shims_on_record(paths.state_dir))
    if owner is not None or job_identity()[0] is not None:
        fail("no roost daemon answers: a job's stop waits for one"
             + (f" (this runs below the worker of job {owner})" if owner else ""))
    if tree:
        fail("no roost daemon answers, and the jobs below this one are known to it only: "
             f"`roost stop {job_id}` ends this job's worker without it")
    paths.ensure()
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fail("a roost daemon holds its lock but does not answer; try again in a moment")
        targets = [job_id] if job_id is not None else jobs_on_record(paths.state_dir)
        hosts = _hosts(ctx)  # a worker on an SSH host is ended there, over a session of its own
        if not targets:
            say("no roost daemon runs, and no worker is on record: nothing to stop")
        for target in targets:
            try:
                say(f"no roost daemon runs; {stop_without_daemon(paths.state_dir, target, hosts=hosts)}")
            except LookupError as exc:
                if job_id is not None:
                    fail(f"no roost daemon runs, and {exc}: nothing to stop", 2)
                say(f"no roost daemon runs; {exc}: nothing to stop")
    finally:
        os.close(fd)


def _hosts(ctx: Ctx) -> dict[str, Any]:
    """The config's hosts; none when the config cannot be read (a stop of a worker here needs none,
    and one on a host is then left marked for the next daemon, which says why)."""
    from roost.config import ConfigError, load_config

    try:
        return dict(load_config(paths_mod.config_file(ctx.config)).hosts)
    except ConfigError as exc:
        say(f"the config cannot be read ({exc}): workers on hosts are left for the next daemon to stop")
        return {}
