"""`roost stop` reaches a job's worker while no daemon runs (docs/reliability.md, "Workers that
outlive the daemon"): the agent mid-turn under its shim is ended, no daemon is started for it, and
the next daemon records the job as stopped by a person, with the reason, not as failed."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest

from roost.client import daemon_running
from roost.daemon.processes.offline_stop import StopMark
from roost.daemon.storage.index import JobIndex
from roost.daemon.storage.recovery import recover
from roost.daemon.storage.store import Store
from roost.models import Job, State

from conftest import DaemonHarness, pid_alive, shims_of


def roost(daemon: DaemonHarness, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "roost.cli", *args], env=daemon.env, capture_output=True,
                          text=True, timeout=60)


def test_roost_stop_after_a_daemon_crash_ends_the_agent_and_the_next_daemon_records_it_stopped(
        daemon: DaemonHarness) -> None:
    job = daemon.spawn("say before\nwait-for held\nsay after")
    daemon.at_gate(job, "held")
    pid = daemon.show(job)["pid"]
    shim = json.loads((daemon.paths.state_dir / "workers" / f"{job}.json").read_text())["shim"]["pid"]
    daemon.kill()
    done = roost(daemon, "stop", job)
    assert done.returncode == 0, done.stderr
    assert f"ended its worker (pid {pid})" in done.stdout and "no roost daemon runs" in done.stdout
    assert not pid_alive(pid) and not pid_alive(shim), "the agent and its shim are gone"
    assert not daemon_running(daemon.paths.socket), "no daemon was started to do it"
    assert job in StopMark.load_all(daemon.paths.state_dir)
    daemon.start()
    row = daemon.wait_state(job, "stopped")
    assert row["reason"] == "stopped by a person while no daemon ran (roost stop)" and row["pid"] is None
    states = [e["data"] for e in daemon.timeline(job) if e["kind"] == "state"]
    assert states[-1] == {"state": "stopped", "by": "person", "reason": row["reason"]}
    assert StopMark.load_all(daemon.paths.state_dir) == {}, "the mark is recorded, then gone"
    assert "after" not in [e["data"]["text"] for e in daemon.timeline(job) if e["kind"] == "text"]
    assert daemon.call("send", job=job, text="say back")["outcome"] == "restarted"
    assert daemon.wait_state(job, "idle")["last_text"] == "back"


def test_a_subagent_stopped_with_no_daemon_is_reported_to_its_parent_as_stopped(daemon: DaemonHarness) -> None:
    """As an online stop's turn end is: the parent's outbox has the child's ``stopped`` with the
    stop's reason, and the parent takes it in (it had said it was idle)."""
    parent = daemon.spawn("spawn wait-for held\nsay parent")
    daemon.wait_state(parent, "idle")
    child = daemon.children(parent)[0]["id"]
    daemon.at_gate(child, "held")
    daemon.kill()
    assert roost(daemon, "stop", child).returncode == 0
    daemon.start()
    row = daemon.wait_state(child, "stopped")
    assert row["reason"] == "stopped by a person while no daemon ran (roost stop)"
    [sent] = daemon.wait_for(lambda: [e["data"] for e in daemon.timeline(child) if e["kind"] == "reported"],
                             what="the child's report")
    assert sent == {"to": parent, "state": "stopped"}
    [taken] = daemon.wait_for(lambda: [e["data"]["reports"] for e in daemon.timeline(parent) if e["kind"] == "reports"],
                              what="the parent to take the report in")
    assert [(r["child"], r["state"], r["text"]) for r in taken] == [(child, "stopped", row["reason"])]
    daemon.wait_for(lambda: [e for e in daemon.timeline(parent) if e["kind"] == "turn_end"][-1]["data"]["outcome"] == "ok"
                    and daemon.show(parent)["state"] == "idle", what="the parent's turn of reports to end")
    assert not [e for e in daemon.timeline(parent) if e["kind"] == "error"], "its re-adopted worker took the prompt"


def test_roost_stop_with_no_daemon_and_no_worker_on_record_says_so(daemon: DaemonHarness) -> None:
    job = daemon.spawn("say done")
    daemon.wait_state(job, "idle")
    daemon.call("close", job=job)
    daemon.wait_for(lambda: not (daemon.paths.state_dir / "workers" / f"{job}.json").exists(),
                    what="its worker's record to go")
    daemon.kill()
    done = roost(daemon, "stop", job)
    assert done.returncode == 2 and f"no worker of job {job} is on record" in done.stderr
    assert "nothing to stop" in done.stderr and done.stdout == ""
    assert roost(daemon, "stop", "--tree", job).returncode == 1
    assert not daemon_running(daemon.paths.socket) and not shims_of(daemon.paths.state_dir)


@pytest.mark.parametrize("state", [State.STARTING, State.WORKING, State.IDLE])
def test_a_stop_mark_whose_worker_never_reached_the_jobs_record_stops_a_start_or_turn_under_way(
        tmp_path: Path, state: State) -> None:
    """The daemon died after writing the worker's record and before the job's (its pid): the stop
    still holds for a job that was starting or in a turn (not requeued, not failed); a job with
    nothing under way keeps its state. A mark about another worker than the job's is not read."""
    store = Store(tmp_path / "roost.db")
    try:
        store.save_job(Job(id="j1", title="t", driver="builtin", cwd="/w", state=state, created_at=1.0))
        store.save_job(Job(id="j2", title="t", driver="builtin", cwd="/w", state=State.WORKING, created_at=2.0,
                           pid=4321))
        (tmp_path / "workers").mkdir()  # where the worker's record was
        for job_id in ("j1", "j2"):
            StopMark(job_id, 1234, 5, 900.0, "stopped by a person while no daemon ran (roost stop)").save(tmp_path)
        index = JobIndex()
        try:
            out = recover(store, index, lambda: 1000.0, tmp_path)
        finally:
            gc.unfreeze()
        j1, j2 = index.jobs.whole(["j1", "j2"])
        assert j1.state == (State.IDLE if state == State.IDLE else State.STOPPED)
        assert j1.reason == ("" if state == State.IDLE else "stopped by a person while no daemon ran (roost stop)")
        assert "j1" not in out.queued and (j1 in out.ended) == (state != State.IDLE), "a stop is reported as one"
        assert j2.state == State.FAILED and j2.pid is None, "another worker's mark: lost as before"
        assert StopMark.load_all(tmp_path) == {}
    finally:
        store.close()


def test_roost_stop_all_stops_every_turn_with_a_daemon_and_without_one(daemon: DaemonHarness) -> None:
    """With a daemon: every job in a turn (or queued, or waiting) is stopped, an idle one is not.
    After a crash: every worker on record is ended, and the next daemon records each job stopped."""
    idle = daemon.spawn("say idle")
    daemon.wait_state(idle, "idle")
    held = [daemon.spawn(f"wait-for a{i}") for i in range(2)]
    for i, job in enumerate(held):
        daemon.at_gate(job, f"a{i}")
    done = roost(daemon, "stop", "--all")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("stopped 2 jobs: ") and set(done.stdout.split()[3:]) == set(held)
    assert [daemon.show(job)["state"] for job in held] == ["stopped", "stopped"]
    assert daemon.show(idle)["state"] == "idle"
    assert roost(daemon, "stop", "--all", "--tree").returncode == 1 and roost(daemon, "stop").returncode == 1

    crashed = [daemon.spawn(f"wait-for b{i}") for i in range(2)]
    for i, job in enumerate(crashed):
        daemon.at_gate(job, f"b{i}")
    pids = [daemon.show(job)["pid"] for job in crashed]
    daemon.kill()
    done = roost(daemon, "stop", "--all")
    assert done.returncode == 0, done.stderr
    assert all(f"ended its worker (pid {pid})" in done.stdout for pid in pids)
    assert not any(pid_alive(pid) for pid in pids) and not shims_of(daemon.paths.state_dir)
    daemon.start()
    for job in crashed:
        assert daemon.wait_state(job, "stopped")["reason"].startswith("stopped by a person while no daemon ran")
    assert daemon.show(idle)["state"] == "idle"


def test_a_jobs_own_stop_with_no_daemon_is_refused_whatever_it_sheds(daemon_factory, tmp_path: Path) -> None:
    """From the job's own shell, with every roost variable dropped and a new session: it still runs
    below its worker's shim, so it is refused, and its worker lives on for the next daemon."""
    daemon = daemon_factory('[drivers.sh]\nkind = "command"\ncommand = ["sh", "-c", "{prompt}"]\n')
    gate, out = tmp_path / "go", tmp_path / "out"
    script = (f"ID=$ROOST_JOB_ID; while [ ! -e {gate} ]; do sleep 0.05; done; "
              f"setsid env -u ROOST_JOB_ID -u ROOST_TOKEN -u ROOST_WORKER_MARK {sys.executable} -m roost.cli stop $ID "
              f"> {out}.part 2>&1; mv {out}.part {out}; sleep 30")
    job = daemon.spawn(script, driver="sh", cwd=str(tmp_path))
    pid = daemon.wait_state(job, "working")["pid"]
    daemon.kill()
    gate.touch()
    daemon.wait_for(out.exists, timeout=30, what="the job's own stop to answer")
    said = out.read_text()
    assert "a job's stop waits for one" in said and f"below the worker of job {job}" in said, said
    assert pid_alive(pid) and StopMark.load_all(daemon.paths.state_dir) == {}, "nothing was stopped"
