"""The config is read again on SIGHUP, on `roost daemon reload` and, with inotify_simple, when the
file changes — and never on a timer: an idle daemon sleeps (docs/config.md#reloading)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from roost.daemon.config_reload import FileNotice
from roost.proctree import wakeups

from conftest import DaemonHarness

ROOST = str(Path(sys.executable).parent / "roost")


@pytest.fixture
def unnoticed(daemon: DaemonHarness) -> Iterator[int]:
    """An open descriptor on the config file: what is written through it and not closed changes
    the file without a notice (no close, no rename), so only a reload can have read it."""
    fd = os.open(daemon.config_path, os.O_WRONLY | os.O_TRUNC)
    yield fd
    os.close(fd)


def in_force(daemon: DaemonHarness, fd: int, text: str) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


def queued_behind_a_cap_of_one(daemon: DaemonHarness) -> tuple[str, str]:
    first = daemon.spawn("wait-for first")
    daemon.wait_state(first, "working")
    second = daemon.spawn("say second")
    assert daemon.show(second)["state"] == "queued"
    return first, second


def roost(daemon: DaemonHarness, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ROOST, *args], env=daemon.env, capture_output=True, text=True, timeout=30)


def test_sighup_reloads_and_a_raised_cap_lets_the_queued_spawn_start(daemon, unnoticed):
    in_force(daemon, unnoticed, "max_running_jobs = 1\n")
    os.kill(daemon.proc.pid, signal.SIGHUP)
    daemon.wait_for(lambda: "max_running_jobs changed" in daemon.log_text(), what="the reload's log line")
    first, second = queued_behind_a_cap_of_one(daemon)
    in_force(daemon, unnoticed, "max_running_jobs = 2\n")
    time.sleep(0.3)
    assert daemon.show(second)["state"] == "queued", "nothing reads the file by itself"
    os.kill(daemon.proc.pid, signal.SIGHUP)
    assert daemon.wait_state(second, "idle")["last_text"] == "second"
    daemon.release("first")


def test_roost_daemon_reload_says_what_changed_and_keeps_the_old_config_when_broken(daemon, unnoticed):
    in_force(daemon, unnoticed, "max_running_jobs = 1\nidle_timeout = 60\n")
    done = roost(daemon, "daemon", "reload")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"config reloaded from {daemon.config_path}: changed idle_timeout, max_running_jobs"
    assert roost(daemon, "daemon", "reload").stdout.strip().endswith(": nothing changed")

    in_force(daemon, unnoticed, "max_running_jobs = 'many'\n")
    broken = roost(daemon, "daemon", "reload")
    assert broken.returncode == 1
    assert f"config not reloaded, keeping the settings in force: {daemon.config_path}: key 'max_running_jobs'" \
        in broken.stderr
    assert "config not reloaded" in roost(daemon, "daemon", "status").stdout
    first, second = queued_behind_a_cap_of_one(daemon)  # the cap of 1 is still in force

    in_force(daemon, unnoticed, "max_running_jobs = 3\n")
    assert daemon.call("reload") == {"reloaded": True, "changed": ["idle_timeout", "max_running_jobs"],
                                     "error": None, "config": str(daemon.config_path)}
    assert daemon.call("status")["config_error"] is None
    daemon.wait_state(second, "idle")
    daemon.release("first")


def test_an_edit_is_noticed_through_the_kernel(daemon):
    assert daemon.call("status")["config_watch"].startswith("noticed (inotify)")
    daemon.write_config("max_running_jobs = 1\n")  # written and closed
    daemon.wait_for(lambda: "max_running_jobs changed" in daemon.log_text(), what="the write to be noticed")
    first, second = queued_behind_a_cap_of_one(daemon)
    saved = daemon.config_path.with_name(".roost.toml.swp")
    saved.write_text("max_running_jobs = 2\n")
    saved.replace(daemon.config_path)  # as an editor saves: a new file renamed over the old
    daemon.wait_state(second, "idle")
    daemon.release("first")


def test_without_inotify_simple_nothing_watches_and_the_daemon_says_so(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "inotify_simple", None)  # import fails as when not installed
    why = FileNotice(tmp_path / "roost.toml", lambda: None).start()
    assert why == "inotify_simple is not installed (pip install 'roost[watch]')"


def test_a_config_directory_that_is_not_there_is_not_watched(tmp_path):
    why = FileNotice(tmp_path / "nowhere" / "roost.toml", lambda: None).start()
    assert why is not None and why.startswith(f"cannot watch {tmp_path / 'nowhere'}: No such file")


def test_an_idle_daemon_wakes_at_most_once_in_ten_seconds(daemon):
    """Counted, not timed: a wake-up is a voluntary context switch, which a busy machine does not
    add (it preempts: the other counter). The old config poll woke it every second."""
    daemon.wait_for(lambda: daemon.call("status")["spares"]["ready"], what="the spare worker to be ready")
    for _ in range(20):  # until the last connection's end has been read: a quiet half second
        before = wakeups(daemon.proc.pid)
        time.sleep(0.5)
        if wakeups(daemon.proc.pid) == before:
            break
    before = wakeups(daemon.proc.pid)
    time.sleep(5.0)
    assert wakeups(daemon.proc.pid) - before <= 1, "an idle daemon with no jobs woke up"
