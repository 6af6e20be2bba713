"""A job's worker put inside its walls: the paths of ``walls.Mounts`` looked up for this job (its
tree, its agent's state, the repository's control files, the secrets and roost's own directories),
its environment cut to what its driver needs, its limits set. The shim starts what comes out, so
everything in the sandbox descends from the shim."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Iterable

from roost.drivers.base import Launch
from roost.models import Job
from roost.paths import Paths
from roost.sandbox.network import INSIDE_SOCKET, NetWalls, proxy_argv, proxy_env
from roost.sandbox.probe import Support
from roost.sandbox.walls import Mounts, bwrap_argv, kept_env, rlimits

#: The directory beside the control socket holding only a hard link to it: what a sandbox is shown.
SOCKET_DIR = "walls"
#: A repository's control files, kept read-only even in a writable tree (``commondir``: where a
#: worktree's git finds its config and hooks).
GIT_CONTROL = ("hooks", "config", "config.worktree", "info", "commondir")


def enclose(net: NetWalls, job: Job, paths: Paths, settings: Any, support: Support,
            prefixes: tuple[str, ...]) -> Launch:
    """The launch of ``net`` (its network's part done: roost/sandbox/network.py) as it runs inside the
    job's walls (``support`` says the machine can build them), started by the job's egress proxy when
    its network is ``allow``; ``prefixes``: the variables its driver's agent needs."""
    launch = net.launch
    home = launch.env.get("HOME") or os.path.expanduser("~")
    # A profile may give its agent a HOME of its own: the person's secrets stay hidden under both.
    homes = list(dict.fromkeys([home, os.path.expanduser("~")]))
    tree = _existing([job.cwd, git_common_dir(job.cwd)])
    state = _existing(launch.writable)
    protected = [p for root in tree + state if os.path.isdir(root) for p in _git_control(root)]
    # The tree's .git stays where it is: a directory bound onto itself (a mount point cannot be renamed,
    # so no .git of the job's making takes its place), a worktree's .git file read-only.
    dot_git = [os.path.join(root, ".git") for root in tree]
    pinned = [p for p in dot_git if os.path.isdir(p)]
    protected += [p for p in dot_git if os.path.isfile(p)]
    hidden = [*(p for h in homes for p in _expand(settings.sandbox_hide, h)),
              paths.state_dir, paths.config_dir, paths.runtime_dir]
    if settings.source is not None:
        hidden.append(settings.source)
    if settings.worktree.dir:
        hidden.append(Path(settings.worktree.dir).expanduser())
    shown = {os.path.realpath(p) for h in homes for p in _expand(settings.sandbox_show, h)}
    hidden = [p for p in _existing(hidden) if p not in shown]
    # A tree inside a hidden directory (a worktree under roost's state) is bound after the hiding, as the
    # agent's state is; one holding a hidden directory (roost's home as the cwd) before it, so it stays hidden.
    inside = [t for t in tree if any(_under(t, h) for h in hidden)]
    mounts = Mounts(readable=tuple(_existing(_expand(settings.sandbox_read, home))),
                    tree=tuple(t for t in tree if t not in inside), state=tuple(inside + state + pinned),
                    protected=tuple(protected),
                    hidden_dirs=tuple(p for p in hidden if os.path.isdir(p)),
                    hidden_files=tuple(p for p in hidden if not os.path.isdir(p)),
                    socket=(str(socket_link(paths)), str(paths.runtime_dir)),
                    share_net=net.share, proxy=(net.proxy[0], INSIDE_SOCKET) if net.proxy else None)
    most = settings.sandbox_processes
    where = support.group(job.id)
    group = _pids_group(where, most) if where is not None and most else None
    argv = bwrap_argv(support.bwrap, mounts, launch.argv)
    if net.proxy is not None:
        argv = proxy_argv(net.proxy[1], argv)
    own = {k for k, v in launch.env.items() if os.environ.get(k) != v}
    own |= set(settings.driver(job.driver).options.get("env") or {}) | set(settings.sandbox_env)
    own |= set(proxy_env()) if net.proxy else set()
    return dataclasses.replace(launch, argv=argv, env=kept_env(launch.env, own, prefixes), cgroup=group,
                               rlimits=rlimits(settings.sandbox_memory_mb, 0 if group else most))


def socket_link(paths: Paths) -> Path:
    """A directory beside the control socket with a hard link to it and nothing else, made anew for
    this daemon's socket: bound over the runtime directory, it shows a job roost's socket only."""
    folder = paths.runtime_dir / SOCKET_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    link = folder / paths.socket.name
    try:
        if link.exists() and os.path.samefile(link, paths.socket):
            return folder
        part = folder / (paths.socket.name + ".part")
        part.unlink(missing_ok=True)
        os.link(paths.socket, part)
        os.replace(part, link)
    except OSError:  # no socket yet (a test's own factory): the job's tools find none
        pass
    return folder


def _pids_group(group: Path, most: int) -> Path:
    """The job's own pids cgroup, holding at most ``most`` processes of its worker's tree and its shim
    (which joins it before it starts the agent: roost/daemon/processes/shim_process.py)."""
    group.mkdir(exist_ok=True)
    (group / "pids.max").write_text(str(most + 1))
    return group


def _git_control(root: str) -> list[str]:
    """The control files of the repository at ``root`` (its .git directory, or the common directory a
    worktree's .git file names), the hooks directory made when missing so it can be kept read-only."""
    git = Path(root) / ".git"
    folders: list[Path] = []
    if git.is_dir():
        folders.append(git)
    elif git.is_file():
        text = git.read_text(errors="replace").strip()
        if text.startswith("gitdir:"):
            own = (Path(root) / text.split(":", 1)[1].strip()).resolve()
            common = own / "commondir"
            folders += [own, (own / common.read_text().strip()).resolve() if common.is_file() else own.parent.parent]
    out = []
    for folder in folders:
        if (folder / "objects").is_dir():  # a repository's own (not a worktree's private) directory
            (folder / "hooks").mkdir(exist_ok=True)
        out += [str(folder / name) for name in GIT_CONTROL if (folder / name).exists()]
    return out


def git_common_dir(root: str) -> str | None:
    """The common git directory of the worktree at ``root`` (where its commits go), or None."""
    git = Path(root) / ".git"
    if not git.is_file():
        return None
    folders = [p for p in _git_control(root) if p.endswith("/hooks")]
    return str(Path(folders[-1]).parent) if folders else None


def _expand(items: Iterable[str], home: str) -> list[Path]:
    return [Path(home + item[1:]) if item.startswith("~") else Path(item) for item in items]


def _existing(items: Iterable[Any]) -> list[str]:
    """The real paths of those that exist (None: left out), each once, in order."""
    out: list[str] = []
    for item in filter(None, items):
        real = os.path.realpath(item)
        if os.path.lexists(real) and real not in out:
            out.append(real)
    return out


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")
