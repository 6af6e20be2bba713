"""A dropped SSH link does not end the turn (docs/hosts.md#a-dropped-link): a remote worker runs under
roost's shim on the host, the daemon tries the link again with back-off and the turn goes on with
its output whole; past ``host_lost_after`` the job fails saying so; a host back without its shim
fails the job clearly and a message resumes it. A real sshd on 127.0.0.1 (tests/sshd.py)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from roost.proctree import read_proc
from test_hosts import _config, _server, master_pid, remote_procs, sshd  # noqa: F401 (sshd: the module's server fixture)
from test_hosts import pytestmark  # noqa: F401 (no sshd here: skipped as those are)
from test_shim import AGENT, kinds, texts

LINES, HALF = 3000, 1200


def _numbered(server, remote: Path, extra: str = "") -> str:
    driver = (f'[drivers.numbered]\nkind = "command"\ncommand = [{json.dumps(sys.executable)}, '
              f'{json.dumps(str(AGENT))}, "{{prompt}}"]\n\n')
    return _config(server, remote, extra + driver)


def test_a_turn_goes_on_across_a_dropped_link_with_every_line_once_and_in_order(daemon_factory, sshd, tmp_path):
    remote = tmp_path / "remote"
    daemon = daemon_factory(_numbered(sshd, remote))
    gate = tmp_path / "gate"
    job = daemon.spawn(f"{LINES} {HALF} {gate}", host="h", driver="numbered", cwd=str(tmp_path))
    daemon.wait_for(lambda: f"line-{HALF:05d}\n" in texts(daemon, job), timeout=30, what="the first lines")
    pid, master = daemon.show(job)["pid"], master_pid(daemon)
    os.kill(master, signal.SIGKILL)  # the link drops; the rest of the lines come while it is down
    dropped = time.monotonic()
    gate.touch()
    row = daemon.wait_state(job, "idle", "failed", timeout=60)
    print(f"master killed to the turn's end: {time.monotonic() - dropped:.2f}s")
    assert row["state"] == "idle", row["reason"]
    assert row["pid"] == pid, "the same worker, its shim reached again"
    assert master_pid(daemon) != master
    said = texts(daemon, job)
    assert said == "".join(f"line-{i:05d}\n" for i in range(1, LINES + 1))
    assert len(kinds(daemon, job, "turn_end")) == 1 and not kinds(daemon, job, "error")
    notes = [n["message"] for n in kinds(daemon, job, "note")]
    assert any("the link to its worker on h dropped: trying again" in n for n in notes), notes
    assert any("the link to its worker on h is back after" in n for n in notes), notes


def test_a_host_lost_past_host_lost_after_fails_its_job_saying_so(daemon_factory, tmp_path):
    (tmp_path / "own-sshd").mkdir()
    server = _server(tmp_path / "own-sshd")
    daemon = daemon_factory(_config(server, tmp_path / "remote", "host_lost_after = 2\n"))
    job = daemon.spawn("wait-for never", host="h", cwd=str(tmp_path))
    daemon.wait_state(job, "working", timeout=30)
    server.stop()
    os.kill(master_pid(daemon), signal.SIGKILL)
    lost = time.monotonic()
    assert daemon.show(job)["state"] == "working"  # its worker runs on there: the job waits for the link
    row = daemon.wait_state(job, "failed", timeout=30)
    took = time.monotonic() - lost
    print(f"lost: {row['reason']} ({took:.1f}s)")
    assert "host h was lost for" in row["reason"] and "host_lost_after = 2s" in row["reason"], row["reason"]
    assert took >= 2
    assert remote_procs(job)  # out of the daemon's reach while the host is; its shim there ends it soon after
    daemon.wait_for(lambda: not remote_procs(job), timeout=20, what="the shim on the host to end its worker alone")


def test_a_host_back_without_its_shim_fails_the_job_and_a_message_resumes_it(daemon_factory, sshd, tmp_path):
    remote = tmp_path / "remote"
    daemon = daemon_factory(_config(sshd, remote))
    job = daemon.spawn("wait-for never", host="h", cwd=str(tmp_path))
    daemon.wait_state(job, "working", timeout=30)
    tree = json.loads((remote / "run" / f"{job}.tree").read_text())
    worker = tree["pid"]
    os.kill(tree["shim_pid"], signal.SIGKILL)  # the host "restarted": its shim is gone
    os.kill(master_pid(daemon), signal.SIGKILL)
    row = daemon.wait_state(job, "failed", timeout=30)
    print("gone:", row["reason"])
    assert "its worker on h is gone" in row["reason"], row["reason"]
    daemon.wait_for(lambda: read_proc(worker) is None or read_proc(worker).state == "Z", timeout=15,
                    what="the worker the shim left to be ended")
    daemon.call("send", job=job, text="recall")  # a new worker there, from the same session file
    daemon.wait_for(lambda: any("earlier prompts: wait-for never" in t for t in daemon.texts(job)), timeout=30,
                    what="the job to resume from its session")
