"""The daemon's connection caps against a job that opens all it can (docs/reliability.md#connections):
a job holds at most ``max_connections_per_job`` connections as itself and jobs together never
take the room kept for a person, so the person's `ls`, `stop` and `daemon stop` still work; a
connection that idles past ``connection_idle_close`` is closed."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from roost.protocol import MAX_CONNECTIONS, PERSON_ROOM

FLOOD = Path(__file__).resolve().parent / "flood_client.py"


def test_a_job_with_600_connections_does_not_lock_the_person_out(daemon, tmp_path):
    victim = daemon.spawn("say a job the person stops")
    daemon.wait_state(victim, "idle")
    out, release = tmp_path / "flood.json", tmp_path / "release"
    flood = daemon.spawn(f"run {shlex.join([sys.executable, str(FLOOD), str(out), str(release), '600'])}",
                         cwd=str(tmp_path))
    said = json.loads(daemon.wait_for(lambda: out.exists() and out.read_text(), timeout=120, what="the flood"))
    as_job, silent = said["as_job"], said["silent"]
    assert as_job["served"] == 32, as_job
    assert as_job["refused"]["code"] == "busy"
    assert f"job {flood} already holds 32 connections" in as_job["refused"]["message"]
    assert "max_connections_per_job" in as_job["refused"]["message"]
    jobs_max = MAX_CONNECTIONS - PERSON_ROOM
    assert jobs_max - 40 <= silent["served"] <= jobs_max - 32, silent  # the workers' own connections count too
    assert silent["refused"]["code"] == "busy" and "kept for a person" in silent["refused"]["message"], silent
    # the person, meanwhile: ls, stop, daemon stop
    ls = subprocess.run([sys.executable, "-m", "roost.cli", "ls"], env=daemon.env, capture_output=True, text=True,
                        timeout=30)
    assert ls.returncode == 0 and victim in ls.stdout, ls.stderr
    stop = subprocess.run([sys.executable, "-m", "roost.cli", "stop", victim], env=daemon.env, capture_output=True,
                          text=True, timeout=30)
    assert stop.returncode == 0, stop.stderr
    down = subprocess.run([sys.executable, "-m", "roost.cli", "daemon", "stop"], env=daemon.env, capture_output=True,
                          text=True, timeout=30)
    assert down.returncode == 0, down.stderr
    assert daemon.proc.wait(15) == 0
    release.touch()


def test_a_connection_that_idles_past_the_bound_is_closed_but_a_subscriber_is_not(daemon_factory, tmp_path):
    daemon = daemon_factory("connection_idle_close = 1.0\n")
    watcher = daemon.raw(timeout=30)
    watcher.call("subscribe", req_id=2, what="agent_view")
    idle = daemon.raw(timeout=30)
    frames = idle.until_closed()
    assert [f["error"]["code"] for f in frames] == ["idle"], frames
    assert "connection_idle_close" in frames[0]["error"]["message"]
    # the subscriber outlived it, sending nothing all that time; a built-in job that spawns twice,
    # its connection closed between the two, says hello again
    job = daemon.spawn(f"spawn say one\nrun {shlex.join([sys.executable, '-c', 'import time; time.sleep(3)'])}\n"
                       "spawn say two", cwd=str(tmp_path))
    row = daemon.wait_state(job, "idle", "failed", timeout=60)
    assert row["state"] == "idle", row["reason"]
    assert len(daemon.call("children", job=job)["rows"]) == 2
    assert watcher.call("status", req_id=3)["pid"] == daemon.proc.pid
    watcher.close()
