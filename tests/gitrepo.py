"""Real git repositories the tests make: one place for the commands both the worktree and the
diff-view tests run, and a daemon whose git calls are logged."""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from tests.conftest import DaemonHarness


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def make_repo(path: Path, files: dict[str, str]) -> Path:
    """A repository at ``path`` with ``files`` in one commit on main, and an identity for the
    commits the tests make."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.com")
    for name, text in files.items():
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "first")
    return path


@contextmanager
def daemon_logging_git(home: Path, where: Path) -> Iterator[tuple["DaemonHarness", Path]]:
    """A real daemon whose git (found first on its PATH) writes each command line to a log, one a
    line, before it runs the real git: (the daemon, the log)."""
    from tests.conftest import DaemonHarness

    log, bin_dir = where / "git-calls.log", where / "logged-git"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{shutil.which("git")}" "$@"\n')
    (bin_dir / "git").chmod(0o755)
    daemon = DaemonHarness(home)
    daemon.env["PATH"] = f"{bin_dir}{os.pathsep}{daemon.env['PATH']}"
    daemon.write_config("")
    daemon.start()
    try:
        yield daemon, log
    finally:
        daemon.stop()
