"""SSH workers outlive the daemon (docs/hosts.md#a-dropped-link, its limits): a job's worker on an SSH host runs
on under its shim there when the daemon stops (SIGTERM) or is killed (SIGKILL); the next daemon finds
it from the job's record (the host, the shim's socket and tree there, the far side's command), opens
a relay to that shim again and takes the turn on — its output whole, nothing twice, one turn end. A
real sshd on 127.0.0.1 (tests/sshd.py): the host is this machine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from roost.proctree import read_proc
from test_hosts import _config, sshd  # noqa: F401 (sshd: the module's server fixture)
from test_hosts import pytestmark  # noqa: F401 (no sshd here: skipped as those are)
from test_shim import AGENT, kinds, texts

LINES, HALF = 2000, 800
NUMBERED = (f'[drivers.numbered]\nkind = "command"\ncommand = [{json.dumps(sys.executable)}, '
            f'{json.dumps(str(AGENT))}, "{{prompt}}"]\n\n')


def _restart(daemon, how: str) -> None:
    if how == "SIGKILL":
        daemon.kill()
    else:
        daemon.stop(keep_workers=True)


def _alive(pid: int) -> bool:
    proc = read_proc(pid)
    return proc is not None and proc.state not in ("Z", "X")


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_turns_on_an_ssh_host_go_on_across_a_daemon_restart_whole_and_nothing_twice(daemon_factory, sshd, tmp_path,
                                                                                    how):
    work = tmp_path / "work"  # the jobs' cwd there, where the built-in agent's ``wait-for`` looks
    work.mkdir()
    daemon = daemon_factory("max_running_jobs = 0\n" + _config(sshd, tmp_path / "remote", NUMBERED))
    builtin = daemon.spawn("say before\nwait-for g\nsay after", host="h", cwd=str(work))
    numbered = daemon.spawn(f"{LINES} {HALF} {work / 'n'}", host="h", driver="numbered", cwd=str(work))
    daemon.at_gate(builtin, "g", timeout=60)
    daemon.wait_for(lambda: f"line-{HALF:05d}\n" in texts(daemon, numbered), timeout=60, what="the first lines")
    pids = {job: daemon.show(job)["pid"] for job in (builtin, numbered)}
    _restart(daemon, how)
    assert all(_alive(pid) for pid in pids.values()), "the workers run on there without a daemon"
    (work / "n").touch()  # the rest of the lines come while no daemon listens: its shim there keeps them
    daemon.start()
    (work / "g").touch()  # the built-in agent's turn goes on once the new daemon has it
    for job, pid in pids.items():
        row = daemon.wait_state(job, "idle", "failed", timeout=60)
        assert row["state"] == "idle", (job, row["reason"], kinds(daemon, job, "error"))
        assert row["pid"] == pid, "the same worker there, re-adopted"
        assert [e["outcome"] for e in kinds(daemon, job, "turn_end")] == ["ok"] and not kinds(daemon, job, "error")
        assert [w.get("adopted") for w in kinds(daemon, job, "worker")] == [None, True]
    said = texts(daemon, builtin)
    assert said.count("before") == 1 and said.count("after") == 1, said
    assert texts(daemon, numbered) == "".join(f"line-{n:05d}\n" for n in range(1, LINES + 1))
    # The worker taken over is the daemon's again: a message runs a turn on it, a close ends it there.
    daemon.call("send", job=builtin, text="say again")
    daemon.wait_for(lambda: "again" in texts(daemon, builtin), timeout=30, what="the next turn on the same worker")
    daemon.wait_state(builtin, "idle", timeout=30)
    daemon.call("close", job=builtin)
    daemon.wait_for(lambda: not _alive(pids[builtin]), timeout=30, what="the closed worker to end there")


def test_roost_stop_with_no_daemon_ends_an_ssh_jobs_worker_there_and_the_next_daemon_records_it_stopped(
        daemon_factory, sshd, tmp_path):
    """A crash, then ``roost stop``: the worker on the host is ended over an ssh session of the CLI's
    own (the host is this machine, so its pid is seen here), nothing is started, and the next daemon
    records the job stopped by a person."""
    work = tmp_path / "work"
    work.mkdir()
    daemon = daemon_factory(_config(sshd, tmp_path / "remote", NUMBERED))
    job = daemon.spawn("say before\nwait-for g\nsay after", host="h", cwd=str(work))
    daemon.at_gate(job, "g", timeout=60)
    pid = daemon.show(job)["pid"]
    daemon.kill()
    done = subprocess.run([sys.executable, "-m", "roost.cli", "stop", job], env=daemon.env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "no roost daemon runs" in done.stdout, done.stdout + done.stderr
    daemon.wait_for(lambda: not _alive(pid), timeout=30, what="the worker on the host to end")
    (work / "g").touch()
    daemon.start()
    row = daemon.wait_state(job, "stopped", timeout=60)
    assert row["reason"] == "stopped by a person while no daemon ran (roost stop)" and row["pid"] is None
    assert "after" not in texts(daemon, job)
