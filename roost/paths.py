"""Where roost keeps things: config, state (store, sessions, logs) and runtime (socket, lock).

platformdirs picks the user's directories; ``ROOST_HOME=DIR`` puts all three under one
directory, which is what tests and scripts use so nothing touches the real user directories.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP = "roost"


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
        """Create the directories; state and runtime only their user may enter (0700)."""
        self.config_dir.mkdir(parents=True, exist_ok=True)
        # State holds conversations, runtime the socket: both only for their user.
        for d in (self.state_dir, self.sessions_dir, self.logs_dir, self.runtime_dir):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.state_dir, 0o700)
        os.chmod(self.runtime_dir, 0o700)


def resolve(environ: dict[str, str] | None = None) -> Paths:
    """The paths in force for this process's environment."""
    env = os.environ if environ is None else environ
    home = env.get("ROOST_HOME")
    if home:
        root = Path(home).expanduser().resolve()
        return Paths(root / "config", root / "state", root / "run")
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
