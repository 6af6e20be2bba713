"""The daemon's own socket at the Unix path limit and past it: at 107 bytes the real daemon serves;
one byte more and it exits at once saying which path, why, and what to do (as a host's socket
does, tests/test_review_host_errors.py), never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from roost.client import daemon_running
from roost.paths import resolve

from conftest import DaemonHarness

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="107 bytes is Linux's limit (macOS: 103)")

#: The most bytes a Unix socket's path holds (``sun_path`` is 108 with its terminating NUL).
UNIX_PATH_MAX = 107


def home_with_socket_of(base: Path, length: int) -> Path:
    """A ROOST_HOME under ``base`` whose daemon socket's path is ``length`` bytes long."""
    probe = len(str(resolve({"ROOST_HOME": str(base / "h")}).socket))
    return base / ("h" + "x" * (length - probe))


def test_the_daemon_serves_on_a_socket_path_of_107_bytes(roost_home: Path) -> None:
    harness = DaemonHarness(home_with_socket_of(roost_home.parent, UNIX_PATH_MAX))
    assert len(str(harness.paths.socket)) == UNIX_PATH_MAX
    harness.write_config("")
    try:
        harness.start()
        assert daemon_running(harness.paths.socket)
    finally:
        harness.stop()


def test_one_byte_past_it_the_daemon_says_which_path_and_the_fix(roost_home: Path) -> None:
    harness = DaemonHarness(home_with_socket_of(roost_home.parent, UNIX_PATH_MAX + 1))
    harness.write_config("")
    done = subprocess.run([sys.executable, "-m", "roost.daemon"], env=harness.env, capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    said = done.stdout.strip()
    assert said == (f"roost daemon: cannot listen on {harness.paths.socket}: AF_UNIX path too long; "
                    "put roost's runtime directory somewhere shorter")
    assert "Traceback" not in done.stderr
    assert not harness.paths.socket.exists()
