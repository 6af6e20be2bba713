"""Where a job's worker runs, and turning a driver's local launch into one on another host.

The daemon calls two functions: ``place`` when a job is spawned (its host and its cwd there), and
``prepare`` just before its worker starts (the master up, the setup and
the worker side written there, the launch rewritten to run over the master). Both take only what
they read (the job, the config, the daemon's host sockets): nothing here imports the daemon. Drivers know nothing
of hosts: what they launch locally is moved — this process's Python becomes the host's, paths under
roost's state dir (session files, pi's agent dir) go into roost's directory there, files of roost's
package (pi's extension) are shipped there, and only the variables the driver added travel.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Callable

from roost.config import Config, ConfigError, DriverProfile, HostSettings
from roost.drivers import driver_for
from roost.drivers.base import Launch
from roost.hosts.bundle import bundle, package_file, shim_file
from roost.hosts.link import HostDown, Link
from roost.hosts.remote_shim import PYTHON, QUOTED_PYTHON
from roost.models import Job
from roost.paths import Paths, resolve
from roost.proctree import MARK_VAR
from roost.protocol import ErrorCode, ProtocolError

#: The host name that means this machine (for a child of a remote job that should run here).
LOCAL = "local"

_links: dict[str, Link] = {}

#: The daemon's opener of a worker under a shim on an SSH host (roost/daemon/processes/remote_worker.py):
#: (the link, the command that runs roost's far side there, the setup's path there, the shim's path
#: there, ``host_lost_after``) -> what the worker starts with instead of a local process.
RemoteOpener = Callable[[Link, tuple[str, ...], str, str, Callable[[], float]], Any]


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


async def prepare(job: Job | None, config: Config, host_socket: Callable[[str], Path] | None,
                  worker: Any, remote_opener: RemoteOpener | None = None) -> str | None:
    """Make a remote job's worker ready to start over its host's master (on a Ray host: as a relay to
    its actor, roost/hosts/ray_relay.py); the reason it cannot be,
    or None (also for a local job, or one gone: nothing to do). ``host_socket`` opens the socket
    the daemon serves a host on (None: it serves none); ``remote_opener`` opens a worker under a
    shim on an SSH host (None: this daemon runs none there)."""
    if job is None or not job.host:
        return None
    if host_socket is None:
        return f"host {job.host}: this daemon serves no host sockets"
    try:
        settings = config.host(job.host)
    except ConfigError as exc:
        return f"host {job.host} is gone from the config: {exc.message}"
    if settings.kind == "ray":
        return _ray_launch(job, settings, host_socket, worker)
    if remote_opener is None:
        return f"host {job.host}: this daemon runs no workers on SSH hosts"
    try:
        link = link_for(settings, host_socket)
        await link.ensure()
        await _remote_shim(link, job, worker, config.host_lost_after, remote_opener)
    except HostDown as exc:
        return str(exc)
    except OSError as exc:  # ssh itself cannot be run (not installed, no file descriptors left)
        return f"host {job.host} unreachable: cannot run ssh: {exc.strerror or exc}"
    return None


async def _remote_shim(link: Link, job: Job, worker: Any, lost_after: float, remote_opener: RemoteOpener) -> None:
    """The worker's local launch moved to the host: its setup written there (with the files it needs
    shipped: the worker side, roost's shim), and the worker opened there under the shim
    (roost/daemon/processes/remote_worker.py) instead of here."""
    local: Launch = worker.launch
    files = [f for f in map(package_file, local.argv) if f is not None]
    moved = _mover(link.remote_dir)
    env = {k: moved(v) for k, v in local.env.items() if os.environ.get(k) != v and k != MARK_VAR}
    env["ROOST_SOCKET"] = link.remote_socket
    shipped = None if link.host.command else bundle()
    runner = list(link.host.command) or [link.host.python, f"{link.remote_dir}/{shipped.name}"]  # type: ignore[union-attr]
    shim = shim_file()
    setup = {"job": job.id, "argv": [for_host(arg, moved) for arg in local.argv],
             "env": env, "cwd": job.cwd, "pythonpath": runner[-1] if shipped else ""}
    path = await link.write_setup(job.id, json.dumps(setup).encode(), [*files, shim, *([shipped] if shipped else [])])
    worker.open = remote_opener(link, tuple(runner), path, f"{link.remote_dir}/{shim.name}", lambda: lost_after)
    worker.launch = Launch(argv=local.argv, env=local.env, cwd=local.cwd,
                           session=moved(local.session) if local.session else None, record=None)


def ray_token(host: HostSettings) -> str:
    """The cluster's auth token from where the host names it ("" for an ``insecure`` host without
    one); ValueError saying what is missing."""
    if host.token_env:
        token = os.environ.get(host.token_env, "").strip()
        if not token:
            raise ValueError(f"host {host.name}: token_env names {host.token_env}, which is not set in the "
                             f"daemon's environment")
        return token
    if host.token_file:
        try:
            token = Path(host.token_file).expanduser().read_text().strip()
        except OSError as exc:
            raise ValueError(f"host {host.name}: cannot read its token_file {host.token_file}: "
                             f"{exc.strerror or exc}") from None
        if not token:
            raise ValueError(f"host {host.name}: its token_file {host.token_file} is empty")
        return token
    return ""


#: A spawn's ``resources``: at most this many, each name at most this long.
MAX_RESOURCES = 16
RESOURCE_NAME_MAX = 64


def spawn_resources(args: dict[str, Any], profile: DriverProfile) -> dict[str, Any]:
    """What a job holds on a Ray host, for its record (``driver_opts``): the spawn's ``num_cpus`` and
    ``resources`` over its profile's (a name in both: the spawn's amount). BAD_ARGS for a bad one."""
    cpus, given = args.get("num_cpus"), args.get("resources") or {}
    if cpus is not None and (isinstance(cpus, bool) or not math.isfinite(cpus) or cpus < 0):
        raise ProtocolError(ErrorCode.BAD_ARGS, f"spawn: num_cpus must be a number >= 0, got {cpus!r}")
    if len(given) > MAX_RESOURCES:
        raise ProtocolError(ErrorCode.BAD_ARGS, f"spawn: at most {MAX_RESOURCES} resources, got {len(given)}")
    for name, amount in given.items():
        if not name or len(name) > RESOURCE_NAME_MAX:
            raise ProtocolError(ErrorCode.BAD_ARGS, f"spawn: a resource's name must have 1 to {RESOURCE_NAME_MAX} "
                                                    f"characters, got {name[:RESOURCE_NAME_MAX + 1]!r}")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) or amount < 0:
            raise ProtocolError(ErrorCode.BAD_ARGS, f"spawn: resource {name!r} must be a number >= 0, got {amount!r}")
    return {"num_cpus": profile.num_cpus if cpus is None else float(cpus),
            "resources": {**profile.resources, **{k: float(v) for k, v in given.items()}}}


def ray_resources(host: HostSettings, opts: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """What a job's actor holds on its node, from what its record says (its spawn's and profile's,
    ``spawn_resources``) over its host's: its CPUs, else the host's; the host's custom resources
    with its own over them."""
    cpus = opts.get("num_cpus")
    return (host.num_cpus if cpus is None else float(cpus)), {**host.resources, **(opts.get("resources") or {})}


def _ray_launch(job: Job, host: HostSettings, host_socket: Callable[[str], Path], worker: Any) -> str | None:
    """Turn the worker's launch into the local relay to an actor on the cluster (roost/hosts/ray_relay.py):
    its setup (the cluster, the token, the resources, the worker's own launch) in a file only the
    relay reads; the reason it cannot be, or None. Ray itself is imported by the relay, never here."""
    if importlib.util.find_spec("ray") is None:
        return f"host {host.name} is a Ray cluster and Ray is not installed here: pip install 'roost[ray]'"
    try:
        token = ray_token(host)
        socket_path = host_socket(host.name)
    except (ValueError, HostDown) as exc:
        return str(exc)
    local: Launch = worker.launch
    cpus, resources = ray_resources(host, job.driver_opts)
    env = {k: v for k, v in local.env.items() if os.environ.get(k) != v and k != MARK_VAR}
    env["ROOST_SOCKET"] = str(socket_path)  # a host connection: the job's token, this host's jobs only
    setup = {"host": host.name, "address": host.address, "token": token, "insecure": host.insecure, "job": job.id,
             "num_cpus": cpus, "resources": resources, "lease": host.lost_after,
             "ready_within": host.ready_time(driver_for(job.driver_opts.get("kind", "builtin")).ready_timeout),
             "worker": {"argv": [PYTHON if arg == sys.executable else arg for arg in local.argv], "env": env,
                        "cwd": job.cwd}}
    folder = _paths().runtime_dir / "ray"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = folder / f"{job.id}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(setup, f)
    except OSError as exc:
        return f"host {host.name}: cannot write the worker's setup: {exc.strerror or exc}"
    # Adoptable as the driver's own: the relay runs under a shim here, which outlives the daemon.
    worker.launch = Launch(argv=[sys.executable, "-m", "roost.hosts.ray_relay", str(path)], env=dict(os.environ),
                           cwd=str(_paths().runtime_dir), session=local.session, record=local.record,
                           adoptable=local.adoptable)
    return None


def for_host(arg: str, moved: Callable[[str], str]) -> str:
    """A local launch's argument as the host's setup says it: this machine's Python is the host's
    (``PYTHON``), as an argument or as a JSON string inside one (Claude Code's ``--mcp-config``:
    the Python that runs roost's tools; roost/hosts/remote_shim.py ``here_argv`` turns it back)."""
    if arg == sys.executable:
        return PYTHON
    return moved(arg).replace(json.dumps(sys.executable), QUOTED_PYTHON)


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
