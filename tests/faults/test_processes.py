"""No process outlives its job, and a job's turn ends when its agent's turn ends (issue 9, items 1-2).

Real daemons, real command workers, and small shell scripts as the agents: each script writes the
pids of what it starts into files, the test waits for them, then asserts by pid and start time
(read from /proc, so a pid the kernel handed out again is never taken for the process we meant).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from roost import paths as paths_mod
from roost.daemon.storage.recovery import kill_stale_workers
from roost.models import Job
from roost.proctree import WorkerTree, boot_id, read_proc, record_path

from conftest import DaemonHarness

CONFIG = '[drivers.sh]\nkind = "command"\ncommand = ["sh", "-c", "{prompt}"]\n'


@pytest.fixture
def daemon(daemon_factory: Callable[[str], DaemonHarness]) -> DaemonHarness:
    return daemon_factory(CONFIG)


Ident = tuple[int, int]  # a process: its pid and its start time
#: Every process a test named, so that one that fails leaves nothing running behind it either.
SEEN: list[Ident] = []


@pytest.fixture
def pids_dir(tmp_path: Path) -> Iterator[Path]:
    out = tmp_path / "pids"
    out.mkdir()
    yield out
    while SEEN:
        pid, start = SEEN.pop()
        proc = read_proc(pid)
        if proc is not None and proc.start == start:
            os.kill(pid, signal.SIGKILL)


def ident(pid: int) -> Ident:
    proc = read_proc(pid)
    assert proc is not None and proc.state != "Z", f"pid {pid} is not running"
    SEEN.append((pid, proc.start))
    return pid, proc.start


def running(who: Ident) -> bool:
    """Whether that very process (same pid, same start time) still runs; a zombie does not."""
    proc = read_proc(who[0])
    return proc is not None and proc.start == who[1] and proc.state != "Z"


def zombies_of(pid: int) -> list[int]:
    """The children of ``pid`` that are zombies (exited, never reaped)."""
    out = []
    for entry in os.scandir("/proc"):
        proc = read_proc(int(entry.name)) if entry.name.isdigit() else None
        if proc is not None and proc.ppid == pid and proc.state == "Z":
            out.append(proc.pid)
    return out


def recorded(daemon: DaemonHarness, pids_dir: Path, *names: str) -> dict[str, Ident]:
    """Wait for the agent script to write each named pid file; their processes."""
    files = [pids_dir / name for name in names]
    daemon.wait_for(lambda: all(f.exists() and f.read_text().strip() for f in files), what=f"pid files {names}")
    return {f.name: ident(int(f.read_text())) for f in files}


def wait_gone(daemon: DaemonHarness, procs: dict[str, Ident], timeout: float = 10.0) -> None:
    daemon.wait_for(lambda: not any(running(p) for p in procs.values()), timeout,
                    what="these to be gone: " + ", ".join(n for n, p in procs.items() if running(p)))


def turn_ends(daemon: DaemonHarness, job: str) -> list[dict[str, Any]]:
    return [e["data"] for e in daemon.timeline(job) if e["kind"] == "turn_end"]


def spawn(daemon: DaemonHarness, script: str) -> str:
    return daemon.spawn(script, driver="sh")


# -- a turn ends with its agent ----------------------------------------------------------------------
HOLDER = "(trap '' TERM HUP; exec sleep 1000) & echo $! > {p}/holder; echo done"


def test_an_agent_that_leaves_a_child_holding_its_pipes_ends_its_turn_and_the_child_goes(daemon, pids_dir):
    job = spawn(daemon, HOLDER.format(p=pids_dir))
    procs = recorded(daemon, pids_dir, "holder")
    started = time.monotonic()
    row = daemon.wait_state(job, "idle", timeout=10)
    took = time.monotonic() - started
    assert turn_ends(daemon, job) == [{"outcome": "ok", "report": None}]
    assert "done" in row["last_text"]
    wait_gone(daemon, procs)
    assert took < 5, f"the turn took {took:.1f}s to end after its agent exited"
    worker = ident(row["pid"])
    assert daemon.call("close", job=job)  # not refused "in a turn"
    daemon.wait_row(job, lambda r: r["reaped"] and not r["worker_up"])
    wait_gone(daemon, {"worker": worker})


LEAVES = {
    "holder": "(trap '' TERM HUP; exec sleep 1000) & echo $! > {p}/holder",
    "setsid": "setsid sh -c 'echo $$ > {p}/setsid; exec sleep 1000' &",
    "double": "(setsid sh -c 'echo $$ > {p}/double; exec sleep 1000' &)",
    "nohup": "(nohup sh -c 'echo $$ > {p}/nohup; exec sleep 1000' >/dev/null 2>&1 &)",
}
WAIT_FOR_FILES = "until [ -s {p}/holder ] && [ -s {p}/setsid ] && [ -s {p}/double ] && [ -s {p}/nohup ]; do sleep 0.02; done"


@pytest.mark.parametrize("ending", ["the agent exits", "stop", "a worker crash", "daemon shutdown"])
def test_nothing_an_agent_starts_outlives_its_turn(daemon, pids_dir, ending):
    """Its own session, a double fork, a child that ignores SIGTERM and holds the pipes: all go,
    however the turn ends."""
    last = "echo left them" if ending == "the agent exits" else "echo $$ > {p}/agent; exec sleep 1000"
    script = "\n".join([*LEAVES.values(), WAIT_FOR_FILES, last]).format(p=pids_dir)
    job = spawn(daemon, script)
    procs = recorded(daemon, pids_dir, *LEAVES)
    if ending != "the agent exits":
        procs |= recorded(daemon, pids_dir, "agent")
        daemon.wait_state(job, "working")
    worker = ident(daemon.show(job)["pid"])
    if ending == "stop":
        daemon.call("stop", job=job)
        daemon.wait_state(job, "stopped")
    elif ending == "a worker crash":
        os.kill(worker[0], signal.SIGKILL)
        daemon.wait_state(job, "failed")
    elif ending == "daemon shutdown":
        procs["worker"] = worker
        daemon.stop()
    else:
        daemon.wait_state(job, "idle")
    wait_gone(daemon, procs)
    if ending in ("the agent exits", "stop"):
        assert running(worker), "the worker itself stays for the next message"


def test_an_agent_that_ignores_sigterm_is_killed_with_its_children_on_stop(daemon, pids_dir):
    script = ("trap '' TERM; sleep 1000 & echo $! > {p}/c1; sh -c 'sleep 1000 & echo $! > {p}/c2; wait' & "
              "echo $$ > {p}/agent; wait").format(p=pids_dir)
    job = spawn(daemon, script)
    procs = recorded(daemon, pids_dir, "c1", "c2", "agent")
    daemon.wait_state(job, "working")
    started = time.monotonic()
    daemon.call("stop", job=job)
    daemon.wait_state(job, "stopped")
    wait_gone(daemon, procs)
    assert time.monotonic() - started < 8
    daemon.wait_for(lambda: [e["outcome"] for e in turn_ends(daemon, job)] == ["aborted"],
                    what="the worker's own end of the aborted turn")


def test_a_worker_that_forks_many_short_lived_children_leaves_no_zombie(daemon, pids_dir):
    # Double forks: each grandchild is orphaned to the worker (its subreaper), which must reap it.
    script = ("i=0; while [ $i -lt 300 ]; do (sh -c 'exit 0' &); i=$((i+1)); done; "
              "echo $$ > {p}/agent; exec sleep 1000").format(p=pids_dir)
    job = spawn(daemon, script)
    recorded(daemon, pids_dir, "agent")
    worker = daemon.show(job)["pid"]
    daemon.wait_for(lambda: not zombies_of(worker) and not zombies_of(daemon.proc.pid), timeout=10,
                    what="no zombie under the worker or the daemon")
    daemon.call("stop", job=job)
    daemon.wait_for(lambda: turn_ends(daemon, job), what="the end of the stopped turn")
    daemon.call("close", job=job)
    daemon.wait_row(job, lambda r: not r["worker_up"])
    daemon.wait_for(lambda: not zombies_of(daemon.proc.pid), what="no zombie under the daemon")


# -- recovery after a SIGKILL of the daemon ----------------------------------------------------------
@pytest.mark.slow
def test_after_a_daemon_sigkill_no_old_worker_or_agent_is_left_and_nothing_resumes(daemon, pids_dir):
    """Three working jobs: one whose worker hangs (stopped), one whose worker dies while the daemon
    is down (its agents are orphaned, one in a session of its own), one left alone (its worker sees
    the daemon go and cleans up itself). The next daemon kills what is left, by pid and start time."""
    script = ("setsid sh -c 'echo $$ > {p}/{j}-escaped; exec sleep 1000' & sleep 1000 & echo $! > {p}/{j}-child; "
              "echo $$ > {p}/{j}-agent; wait")
    jobs = {name: spawn(daemon, script.format(p=pids_dir, j=name)) for name in ("hung", "dead", "alone")}
    procs = {}
    for name, job in jobs.items():
        procs |= recorded(daemon, pids_dir, f"{name}-escaped", f"{name}-child", f"{name}-agent")
        daemon.wait_state(job, "working")
        procs[f"{name}-worker"] = ident(daemon.show(job)["pid"])
    records = daemon.paths.state_dir / "workers"
    assert sorted(p.name for p in records.iterdir() if not p.name.startswith("spare-")) == \
        sorted(f"{job}.{kind}" for job in jobs.values() for kind in ("json", "sock"))  # and the spare's
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in records.iterdir())
    shims = [json.loads((records / f"{job}.json").read_text())["shim"]["pid"] for job in jobs.values()]
    for name in ("hung", "dead"):  # neither may see the daemon go and clean up after itself
        os.kill(procs[f"{name}-worker"][0], signal.SIGSTOP)
    daemon.kill()
    for shim in shims:  # what is tested here is a worker that cannot be re-adopted (docs/reliability.md)
        os.kill(shim, signal.SIGKILL)
    os.kill(procs["dead-worker"][0], signal.SIGKILL)
    daemon.wait_for(lambda: not running(procs["dead-worker"]), what="the dead worker to be gone")
    assert running(procs["dead-escaped"]) and running(procs["hung-agent"]), "left behind, as a crash leaves them"

    daemon.start()
    wait_gone(daemon, procs)
    assert [p.name for p in records.iterdir() if not p.name.startswith("spare-")] == []
    for job in jobs.values():
        row = daemon.show(job)
        assert row["state"] == "failed" and row["pid"] is None and not row["worker_up"]
        said = [str(e["data"].get("reason", "")) + str(e["data"].get("message", "")) for e in daemon.timeline(job)]
        assert any("daemon" in s for s in said), said
    # The new daemon runs its loop (a new job goes through a whole turn); the old jobs stay down.
    fresh = spawn(daemon, "echo fresh")
    daemon.wait_state(fresh, "idle")
    assert all(not daemon.show(job)["worker_up"] and daemon.show(job)["state"] == "failed" for job in jobs.values())


@pytest.fixture
def unrelated() -> Any:
    """A live process of ours that no roost ever started."""
    proc = subprocess.Popen(["sleep", "1000"])
    yield proc
    proc.kill()
    proc.wait()


def stale_record(home: Path, job: Job, pid: int, start: int) -> Path:
    path = record_path(paths_mod.resolve({"ROOST_HOME": str(home)}).state_dir, job.id)
    WorkerTree(job=job.id, pid=pid, start=start, floor=0, mark=WorkerTree.new_mark(), boot=boot_id()).save(path)
    return path


def test_recovery_never_kills_a_recycled_pid(roost_home, unrelated):
    job = Job(id="j-recycled", title="t", driver="sh", cwd="/", pid=unrelated.pid)
    found = read_proc(unrelated.pid)
    assert found is not None
    other = (unrelated.pid, found.start)
    path = stale_record(roost_home, job, unrelated.pid, other[1] + 1)  # the pid, as another process
    state_dir = paths_mod.resolve({"ROOST_HOME": str(roost_home)}).state_dir
    kill_stale_workers(state_dir)
    assert running(other), "a pid that now names another process is left alone"
    assert not path.exists()
    # The same record with the right start time is that process: it is killed (the check can fail).
    stale_record(roost_home, job, unrelated.pid, other[1])
    kill_stale_workers(state_dir)
    assert unrelated.wait(5) == -signal.SIGKILL
