"""Where a job's worker runs, and turning a driver's local launch into one on another host.

The daemon calls two functions: ``place`` when a job is spawned (its host and its cwd there), and
``prepare`` just before its worker starts (the master up, the setup and
the worker side written there, the launch rewritten to run over the master). Drivers know nothing
of hosts: what they launch locally is moved — this process's Python becomes the host's, paths under
roost's state dir (session files, pi's agent dir) go into roost's directory there, files of roost's
package (pi's extension) are shipped there, and only the variables the driver added travel.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from roost.config import Config, ConfigError, DriverProfile, HostSettings
from roost.drivers.base import Launch
from roost.hosts.bundle import bundle, package_file
from roost.hosts.link import HostDown, Link
from roost.hosts.remote import PYTHON
from roost.models import Job
from roost.paths import Paths, resolve
from roost.proctree import MARK_VAR
from roost.protocol import ErrorCode, ProtocolError

if TYPE_CHECKING:
    from roost.daemon.engine import Engine

#: The host name that means this machine (for a child of a remote job that should run here).
LOCAL = "local"

_links: dict[str, Link] = {}


@functools.cache
def _paths() -> Paths:
    return resolve()


def link_for(host: HostSettings, host_socket: Callable[[str], Path]) -> Link:
    """The daemon's one link to ``host`` (a reloaded config's settings replace the old ones); its
    forward targets the socket ``host_socket`` opens for that host, never the person's."""
    link = _links.get(host.name)
    if link is None:
        link = _links[host.name] = Link(host, _paths().runtime_dir, host_socket(host.name))
    link.host = host
    return link


def place(args: dict[str, Any], profile: DriverProfile, parent: Job | None, config: Config) -> tuple[str, str]:
    """A new job's host ("" for this machine) and its working directory there. A child runs on its
    parent's host unless told otherwise, in its parent's cwd when that is on the same host."""
    host = args.get("host") or profile.host or (parent.host if parent else "")
    host = "" if host == LOCAL else host
    same = parent is not None and parent.host == host
    if not host:
        cwd = args.get("cwd") or (parent.cwd if same and parent else os.getcwd())
        if not os.path.isdir(cwd):
            raise ProtocolError(ErrorCode.BAD_ARGS, f"working directory {cwd} does not exist")
        return "", os.path.abspath(cwd)
    try:
        settings = config.host(host)
    except ConfigError as exc:
        raise ProtocolError(ErrorCode.BAD_ARGS, exc.message) from None
    return host, args.get("cwd") or (parent.cwd if same and parent else settings.cwd)


async def prepare(eng: "Engine", job_id: str, worker: Any) -> str | None:
    """Make a remote job's worker ready to start over its host's master; the reason it cannot be,
    or None (also for a local job: nothing to do)."""
    job = eng.index.get(job_id)
    if job is None or not job.host:
        return None
    if eng.host_socket is None:
        return f"host {job.host}: this daemon serves no host sockets"
    try:
        settings = eng.config.host(job.host)
    except ConfigError as exc:
        return f"host {job.host} is gone from the config: {exc.message}"
    try:
        link = link_for(settings, eng.host_socket)
        await link.ensure()
        worker.launch = await _remote_launch(link, job, worker.launch)
    except HostDown as exc:
        return str(exc)
    except OSError as exc:  # ssh itself cannot be run (not installed, no file descriptors left)
        return f"host {job.host} unreachable: cannot run ssh: {exc.strerror or exc}"
    return None


async def _remote_launch(link: Link, job: Job, local: Launch) -> Launch:
    """``local`` moved to the host: its setup written there (with the files it needs shipped), the argv
    a session over the master."""
    files = [f for f in map(package_file, local.argv) if f is not None]
    moved = _mover(link.remote_dir)
    env = {k: moved(v) for k, v in local.env.items() if os.environ.get(k) != v and k != MARK_VAR}
    env["ROOST_SOCKET"] = link.remote_socket
    shipped = None if link.host.command else bundle()
    runner = list(link.host.command) or [link.host.python, f"{link.remote_dir}/{shipped.name}"]  # type: ignore[union-attr]
    setup = {"argv": [PYTHON if arg == sys.executable else moved(arg) for arg in local.argv], "env": env,
             "cwd": job.cwd, "pythonpath": runner[-1] if shipped else ""}
    path = await link.write_setup(job.id, json.dumps(setup).encode(), [*files, *([shipped] if shipped else [])])
    return Launch(argv=link.worker_argv("exec " + shlex.join([*runner, path])), env=dict(os.environ),
                  cwd=str(_paths().runtime_dir), session=moved(local.session) if local.session else None,
                  record=local.record)


def _mover(remote_dir: str) -> Callable[[str], str]:
    """What a local launch's argument or variable is on the host: a path under roost's state dir is
    the same path under roost's directory there (sessions, pi's agent dir), a file of roost's package
    is its shipped copy there; anything else is the host's already (a program, a cwd, a prompt)."""
    state = str(_paths().state_dir)

    def moved(value: str) -> str:
        if value == state or value.startswith(state + "/"):
            return remote_dir + value[len(state):]
        shipped = package_file(value)
        return f"{remote_dir}/{shipped.name}" if shipped else value

    return moved
