"""Where roost keeps things: config, state (store, sessions, logs) and runtime (socket, lock).

platformdirs picks the user's directories; ``ROOST_HOME=DIR`` puts all three under one
directory, which is what tests and scripts use so nothing touches the real user directories.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path


APP = "roost"


class UnsafePath(Exception):
    """A file or directory roost would read or keep private data in could be changed by another
    user (OpenSSH's StrictModes is the model). The message names the path and the fix."""


def check_private(path: Path, what: str, sticky_ok: bool = False) -> None:
    """Refuse ``path`` (following a symlink to what it points at) when someone else owns it or
    group or others may write it. Root's own files are trusted: root can change anything anyway.
    With ``sticky_ok``, a sticky directory such as /tmp passes (nobody may rename what is yours in
    it). A missing path is fine: roost creates it owner-only."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    shown = f"{path} (a link to {path.resolve()})" if path.is_symlink() else str(path)
    if st.st_uid not in (os.getuid(), 0):
        raise UnsafePath(f"{what} {shown} belongs to uid {st.st_uid}, not to you (uid {os.getuid()}): another "
                         f"user could change it. Use a {what} of your own (remove it, or chown it to yourself).")
    if st.st_mode & 0o022 and not (sticky_ok and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if st.st_mode & bit)
        raise UnsafePath(f"{what} {shown} is writable by {who} (mode {stat.S_IMODE(st.st_mode):o}): another user "
                         f"could change it. Fix: chmod go-w {path}")


def check_ancestors(path: Path, what: str) -> None:
    """Refuse ``path`` when another user could rename or replace it or any directory above it,
    up to ``/``: then they could put a directory of their own in its place (and listen on the
    socket, or write the store). Each existing directory above it, along the path as written and
    along the path its links lead to, must be this user's or root's and writable by nobody else;
    a sticky directory writable by others (``/tmp``) is fine when what is in it on the way down
    is this user's (or root's), since nobody else may rename that. Raises UnsafePath saying which
    directory and how to fix it."""
    me = os.getuid()
    seen: set[Path] = set()
    for chain in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
        below = chain
        for d in chain.parents:
            if d not in seen:
                seen.add(d)
                _check_above(d, below, path, what, me)
            below = d


def _check_above(d: Path, below: Path, path: Path, what: str, me: int) -> None:
    """One directory above ``path``; ``below`` is the entry in it on the way down."""
    try:
        st = os.stat(d)
    except FileNotFoundError:
        return  # roost creates it, owner-only
    if st.st_uid not in (me, 0):
        raise UnsafePath(f"{what} {path}: the directory {d} above it belongs to uid {st.st_uid}, not to you "
                         f"(uid {me}) or root: that user could rename it and put a directory of their own in its "
                         f"place. Use a {what} under directories only you (or root) own: set ROOST_HOME, or fix "
                         f"the owner (chown {me} {d}).")
    if not st.st_mode & 0o022:
        return
    if st.st_mode & stat.S_ISVTX:
        try:
            owner = os.lstat(below).st_uid  # a link there is replaced by whoever owns it
        except FileNotFoundError:
            return  # roost creates it, as yours
        if owner in (me, 0):
            return
        raise UnsafePath(f"{what} {path}: {below} is in the shared directory {d} (sticky, writable by others) but "
                         f"belongs to uid {owner}, not to you (uid {me}): that user could replace what is in it. "
                         f"Use a directory of your own there (set ROOST_HOME).")
    who = " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if st.st_mode & bit)
    raise UnsafePath(f"{what} {path}: the directory {d} above it is writable by {who} (mode "
                     f"{stat.S_IMODE(st.st_mode):o}): another user could rename what is in it and put a directory "
                     f"of their own in its place. Fix: chmod go-w {d} (or chmod +t {d} to make it sticky, like "
                     f"/tmp), or set ROOST_HOME to a directory under ones only you can write.")


def make_private_dir(path: Path) -> None:
    """Create ``path`` and any missing parents owner-only (0700) from the first moment: a mode
    given to mkdir can only lose bits to the umask, never gain them."""
    missing = []
    for p in [path, *path.parents]:
        if p.exists() or p.is_symlink():
            break
        missing.append(p)
    for p in reversed(missing):
        try:
            p.mkdir(mode=0o700)
        except FileExistsError:
            pass


def open_private(path: Path, append: bool = True) -> int:
    """Open (creating it 0600, whatever the umask) a file only its user may read: logs, the store."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else 0) | os.O_CLOEXEC
    return os.open(path, flags, 0o600)


@dataclass(frozen=True)
class Paths:
    config_dir: Path
    state_dir: Path
    runtime_dir: Path

    @property
    def store(self) -> Path:
        return self.state_dir / "roost.db"

    @property
    def sessions_dir(self) -> Path:
        return self.state_dir / "sessions"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def daemon_log(self) -> Path:
        return self.logs_dir / "daemon.log"

    @property
    def socket(self) -> Path:
        return self.runtime_dir / "roost.sock"

    @property
    def lock(self) -> Path:
        return self.runtime_dir / "roost.lock"

    @property
    def default_config(self) -> Path:
        return self.config_dir / "roost.toml"

    def job_log(self, job_id: str) -> Path:
        """The file a job's worker stderr is drained into."""
        return self.logs_dir / f"{job_id}.stderr.log"

    def ensure(self) -> None:
        """Create the directories owner-only (0700) and refuse any that another user owns or
        may write (or that is a link to one), or that sits below a directory another user could
        rename it out of (``check_ancestors``, up to ``/``; ``ROOST_HOME`` is one of those): the
        config is what the daemon runs, state holds conversations, runtime the socket. Raises
        UnsafePath saying which and how to fix it."""
        for d, what in ((self.config_dir, "config directory"), (self.state_dir, "state directory"),
                        (self.runtime_dir, "runtime directory")):
            check_private(d, what)
            check_ancestors(d, what)
            make_private_dir(d)
        for d in (self.sessions_dir, self.logs_dir):
            make_private_dir(d)
            check_private(d, "state directory")


def resolve(environ: dict[str, str] | None = None) -> Paths:
    """The paths in force for this process's environment."""
    env = os.environ if environ is None else environ
    home = env.get("ROOST_HOME")
    if home:
        root = Path(home).expanduser().resolve()
        return Paths(root / "config", root / "state", root / "run")
    import platformdirs  # here: with ROOST_HOME (tests, workers' own tools) nobody pays its import

    runtime = platformdirs.user_runtime_dir(APP)
    return Paths(
        Path(platformdirs.user_config_dir(APP)),
        Path(platformdirs.user_state_dir(APP)),
        Path(runtime),
    )


def config_file(explicit: str | os.PathLike[str] | None = None, environ: dict[str, str] | None = None) -> Path:
    """The config file: ``--config``, then ``ROOST_CONFIG``, then the platform's config dir."""
    env = os.environ if environ is None else environ
    if explicit:
        return Path(explicit).expanduser()
    if env.get("ROOST_CONFIG"):
        return Path(env["ROOST_CONFIG"]).expanduser()
    return resolve(env).default_config
