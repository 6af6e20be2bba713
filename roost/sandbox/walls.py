"""The pure rules of a job's walls: isolation levels and which one wins, the environment a sandboxed
worker keeps, and the bubblewrap command line for a set of paths already looked up."""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import Iterable, Mapping

#: From the loosest to the strictest: no walls; walls where the machine has them (else it runs
#: unsandboxed, saying so); walls or no job at all.
LEVELS = ("none", "sandbox", "sandbox!")
DEFAULT_LEVEL = "none"

#: What no job reads unless a profile opens it (``sandbox_hide`` adds, ``sandbox_show`` takes away).
DEFAULT_HIDE = ("~/.ssh", "~/.aws", "~/.config/gcloud", "~/.config/gh", "~/.netrc", "~/.docker", "~/.kube",
                "~/.gnupg", "~/.local/share/keyrings", "~/.password-store", "~/.git-credentials",
                "~/.config/git/credentials", "~/.pypirc", "~/.npmrc", "~/.azure")
#: Directories that hold other programs' unix sockets: each job gets an empty one of its own.
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/user")
#: Variables a sandboxed worker keeps from the daemon's environment whatever its driver.
ENV_KEEP = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "COLORTERM",
                      "TMPDIR", "NO_COLOR", "PYTHONPATH", "VIRTUAL_ENV", "NODE_PATH"})
ENV_PREFIXES = ("LC_", "ROOST_")


class IsolationRefused(Exception):
    """A job that requires walls where this machine cannot build them: the message says why."""


def asked(levels: Iterable[str | None]) -> bool:
    """Whether any job asks for walls (the default, or a profile's level): only then is a machine
    that cannot build them worth a notice in the app."""
    return any(strictest(level) != "none" for level in [*levels, None])


def strictest(*levels: str | None) -> str:
    """The strictest of the levels given (None: not given); ``DEFAULT_LEVEL`` when none is."""
    given = [level for level in levels if level is not None]
    return max(given, key=LEVELS.index) if given else DEFAULT_LEVEL


def decide(asked: str | None, profile: str | None, parent: str | None, by_job: bool,
           supported: bool, why_not: str, remote: bool) -> tuple[str, str]:
    """A new job's (level, walls): its level is the spawn's, else its profile's, never looser than its
    parent's nor, when a job spawns it, than its profile's. Its walls are "sandbox", or "none" with
    the reason when it runs without. IsolationRefused when it requires walls it cannot have."""
    own = asked if asked is not None else profile
    level = strictest(own, parent, profile if by_job else None)
    if level == "none":
        return level, "none"
    reason = "it runs on another host" if remote else (why_not if not supported else "")
    if not reason:
        return level, "sandbox"
    if level == "sandbox!":
        raise IsolationRefused(f"this job requires a sandbox (isolation = \"sandbox!\") and cannot have one: {reason}")
    return level, f"none: not sandboxed, {reason}"


def kept_env(env: Mapping[str, str], own: set[str], prefixes: tuple[str, ...]) -> dict[str, str]:
    """The part of a worker's environment a sandboxed one gets: ``ENV_KEEP``, roost's and the locale's,
    the names its driver set itself (``own``) and those its driver's agent needs (``prefixes``)."""
    every = ENV_PREFIXES + prefixes
    return {k: v for k, v in env.items() if k in ENV_KEEP or k in own or k.startswith(every)}


@dataclass(frozen=True)
class Mounts:
    """A job's walls as paths already looked up (roost/sandbox/enclose.py)."""

    #: Paths under the private temporary directories a job may still read (``sandbox_read``).
    readable: tuple[str, ...]
    #: The job's tree it may write (its cwd, its worktree's git directory)...
    tree: tuple[str, ...]
    #: ... and its agent's own state, bound after the hidden paths (roost's state directory holds it).
    state: tuple[str, ...]
    #: Paths inside those kept read-only (``.git/hooks``, ``.git/config``).
    protected: tuple[str, ...]
    #: What it may not read: directories shown empty, files shown as /dev/null.
    hidden_dirs: tuple[str, ...]
    hidden_files: tuple[str, ...]
    #: (a directory holding only roost's control socket, where it shows: the socket's own directory).
    socket: tuple[str, str] | None
    #: Whether the job keeps the machine's network (network = "all"); else it gets loopback only.
    share_net: bool
    #: (the job's egress proxy socket, where it is seen inside) when its network is ``allow``.
    proxy: tuple[str, str] | None = None


def bwrap_argv(bwrap: str, mounts: Mounts, argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` inside ``mounts``: the machine read-only, private temporary
    directories, the job's tree writable, the hidden paths empty (in the tree too: roost's state), the
    agent's state writable, then the protected paths read-only again (later mounts cover earlier
    ones), in new pid, ipc and uts namespaces (and network, unless it keeps the machine's), every
    capability dropped, ending with its parent (the shim, or the job's egress proxy)."""
    out = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for path in PRIVATE_DIRS:
        out += ["--tmpfs", path]
    for path in mounts.readable:
        out += ["--ro-bind", path, path]
    for path in mounts.tree:
        out += ["--bind", path, path]
    for path in mounts.hidden_dirs:  # empty, and what is written there goes with the sandbox
        out += ["--tmpfs", path]
    for path in mounts.hidden_files:
        out += ["--ro-bind", "/dev/null", path]
    for path in mounts.state:
        out += ["--bind", path, path]
    for path in mounts.protected:
        out += ["--ro-bind", path, path]
    if mounts.socket is not None:
        out += ["--ro-bind", mounts.socket[0], mounts.socket[1]]
    if mounts.proxy is not None:
        out += ["--ro-bind", mounts.proxy[0], mounts.proxy[1]]
    out += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL",
            "--die-with-parent"]
    if not mounts.share_net:
        out.append("--unshare-net")
    return [*out, "--", *argv]


def rlimits(memory_mb: int, processes: int) -> tuple[tuple[int, int], ...]:
    """The per-process limits (resource, most) for a job's data (heap) and processes (0: none); the
    process count is per user, so only a backstop where no cgroup is (docs/isolation.md)."""
    limits = [(resource.RLIMIT_DATA, memory_mb << 20)] if memory_mb else []
    return tuple(limits + ([(resource.RLIMIT_NPROC, processes)] if processes else []))
