"""The spare built-in worker (roost/daemon/processes/spare.py): real daemons, real worker processes.

A spawn or resume of a local built-in job takes the spare the daemon started ahead (its pid is
the job's worker's), the bound worker is the job's in everything (environment, cwd, session,
tools, log, record), a new spare follows; a spare that dies is replaced and ones that keep dying
back off; a SIGKILLed daemon leaves none behind; other drivers and remote jobs never take it."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from roost.client import ClientError
from roost.config import ConfigError, parse_config
from roost import paths as paths_mod
from roost.daemon.processes.spare import BACKOFF_MAX, ROOM, ROOM_VAR, Spares, backoff, bind_frame
from roost.drivers.base import Launch
from roost.models import Job
from roost.proctree import MARK_VAR, WorkerTree, read_proc

from conftest import DaemonHarness
from test_hosts import pytestmark as NEEDS_SSHD
from test_hosts import sshd  # noqa: F401 (the module's server fixture)

SH = '[drivers.sh]\nkind = "command"\ncommand = ["sh", "-c", "{prompt}"]\n'


def spares(daemon: DaemonHarness) -> dict[str, Any]:
    return daemon.call("status")["spares"]


def ready_spare(daemon: DaemonHarness, other_than: int | None = None) -> int:
    """The pid of a spare that answered, once there is one (and it is not ``other_than``)."""
    def one() -> int | None:
        return next((pid for pid in spares(daemon)["ready"] if pid != other_than), None)
    return daemon.wait_for(one, timeout=15, what="a ready spare worker")


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(item.split("=", 1) for item in raw if "=" in item)


def alive(who: tuple[int, int]) -> bool:
    proc = read_proc(who[0])
    return proc is not None and proc.start == who[1] and proc.state not in ("Z", "X")


def ident(pid: int) -> tuple[int, int]:
    proc = read_proc(pid)
    assert proc is not None
    return pid, proc.start


def records(daemon: DaemonHarness) -> dict[str, WorkerTree]:
    folder = daemon.paths.state_dir / "workers"
    found = {p.stem: WorkerTree.load(p) for p in folder.glob("*.json")} if folder.is_dir() else {}
    return {name: tree for name, tree in found.items() if tree is not None}


# -- taking it -------------------------------------------------------------------------------------------
def test_a_spawn_takes_the_spare_and_a_new_one_starts_behind_it(daemon_factory):
    daemon: DaemonHarness = daemon_factory("max_running_jobs = 1\n")  # the spare holds no place under it
    spare = ready_spare(daemon)
    spare_record = next(name for name, tree in records(daemon).items() if tree.pid == spare)
    assert spare_record.startswith("spare-")
    job = daemon.spawn("say hi")
    row = daemon.wait_state(job, "idle")
    assert row["pid"] == spare and row["last_text"] == "hi"
    assert [e["data"]["pid"] for e in daemon.timeline(job) if e["kind"] == "worker"] == [spare]
    assert spare not in spares(daemon)["ready"] + spares(daemon)["starting"]
    after = ready_spare(daemon, other_than=spare)
    # The record is the job's now (same process, same mark); the spare's own went with it.
    mine = records(daemon)
    assert mine[job].pid == spare and mine[job].job == job and spare_record not in mine
    assert environ(spare)[MARK_VAR] == mine[job].mark
    assert any(name.startswith("spare-") and tree.pid == after for name, tree in mine.items())
    # It holds no place: status counts one worker, the job's.
    assert daemon.call("status")["workers"] == 1


def test_the_bound_worker_is_the_job_s_in_everything(daemon: DaemonHarness, tmp_path: Path):
    spare = ready_spare(daemon)
    work = tmp_path / "elsewhere"
    work.mkdir()
    job = daemon.spawn("say one\nrun pwd\nrun sh -c 'echo $ROOST_JOB_ID'\nspawn say child;report done c",
                       cwd=str(work))
    row = daemon.wait_state(job, "idle")
    assert row["pid"] == spare
    assert os.readlink(f"/proc/{spare}/cwd") == str(work)
    assert daemon.texts(job)[:3] == ["one", str(work), job]
    env = environ(spare)  # what /proc shows, as for a fresh worker
    assert env["ROOST_JOB_ID"] == job and len(env["ROOST_TOKEN"]) == 32
    assert env["ROOST_SOCKET"] == str(daemon.paths.socket) and ROOM_VAR not in env
    assert {k: v for k, v in env.items() if not k.startswith("ROOST_")} == \
        {k: v for k, v in daemon.env.items() if not k.startswith("ROOST_")}
    # Its tool calls are the job's: the child is its child, and the token proves the job.
    kids = daemon.children(job)
    assert len(kids) == 1 and daemon.wait_state(kids[0]["id"], "done")["parent"] == job
    daemon.wait_for(lambda: "noted 1 report from subagents" in daemon.texts(job)
                    and daemon.show(job)["state"] == "idle", what="the child's report to be noted")
    with daemon.client(job=job, token=env["ROOST_TOKEN"]) as as_job:
        assert as_job.call("children")["rows"][0]["id"] == kids[0]["id"]
    session = daemon.paths.sessions_dir / f"{job}.jsonl"
    assert row["session"] == str(session) and '"text": "say one' in session.read_text()

    # Closed, and resumed by a message: the next spare is bound to it, reads its session back, and
    # what it says on stderr (a bad line of that session, skipped) is in the job's log.
    daemon.call("close", job=job)
    daemon.wait_row(job, lambda r: r["pid"] is None)
    with session.open("a") as fh:
        fh.write("not json\n")
    second = ready_spare(daemon, other_than=spare)
    daemon.call("send", job=job, text="recall")
    row = daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"].startswith("earlier"))
    assert row["pid"] == second and os.readlink(f"/proc/{second}/cwd") == str(work)
    assert "say one" in row["last_text"]
    log = daemon.paths.job_log(job).read_text()
    assert "skipped 1 unreadable line" in log and str(session) in log


def test_a_burst_of_spawns_leaves_one_spare_ready_behind_it(daemon: DaemonHarness):
    ready_spare(daemon)
    jobs: list[str] = []

    def spawn_four() -> None:  # four clients at once: starts take spares that are still starting, or none
        with daemon.client() as client:
            jobs.extend(client.call("spawn", prompt="say hi", cwd=str(daemon.home))["id"] for _ in range(4))

    clients = [threading.Thread(target=spawn_four) for _ in range(4)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    rows = [daemon.wait_state(job, "idle", timeout=30) for job in jobs]
    assert len({row["pid"] for row in rows}) == 16
    spare = ready_spare(daemon)
    state = spares(daemon)
    assert state["ready"] == [spare] and state["starting"] == [] and state["opening"] == 0
    assert spare not in {row["pid"] for row in rows}


def test_a_job_whose_cwd_is_gone_is_left_to_a_fresh_start_and_the_spare_stays(daemon: DaemonHarness,
                                                                              tmp_path: Path):
    spare = ready_spare(daemon)
    gone = tmp_path / "gone"
    gone.mkdir()
    job = daemon.spawn("say first", cwd=str(gone))
    daemon.wait_state(job, "idle")
    daemon.call("close", job=job)
    daemon.wait_row(job, lambda r: r["pid"] is None)
    gone.rmdir()
    second = ready_spare(daemon, other_than=spare)
    with pytest.raises(ClientError) as info:  # what a fresh start says: the spare's chdir would say less
        daemon.call("send", job=job, text="say again")
    assert info.value.code == "refused" and f"No such file or directory: {gone}" in info.value.message
    assert "No such file or directory" in daemon.wait_state(job, "failed")["reason"]
    assert second in spares(daemon)["ready"], "the spare was not spent on it"


# -- losing it ---------------------------------------------------------------------------------------------
def test_a_spare_that_dies_is_replaced_and_ones_that_keep_dying_back_off(daemon_factory, tmp_path: Path):
    daemon: DaemonHarness = daemon_factory("")
    first = ready_spare(daemon)
    os.kill(first, signal.SIGKILL)
    second = ready_spare(daemon, other_than=first)
    assert spares(daemon)["failures"] == 1 and spares(daemon)["retry_in"] is None, "the first is replaced at once"
    pids = [tree.pid for tree in records(daemon).values()]
    assert first not in pids and second in pids, "its record went with it; the new one's is there"
    log = daemon.log_text()
    assert log.count("spare worker") == 1 and "killed by SIGKILL" in log
    daemon.stop()

    # Spares that die at start.
    daemon.env["PYTHONPATH"] = spares_do(tmp_path, "print('spare refuses to live', file=sys.stderr)\n"
                                                   "    sys.stderr.flush()\n    os._exit(7)")
    daemon.start()
    seen: list[tuple[int, float]] = []  # (failures, seconds to the next spare) while they keep dying

    def waits_grew() -> bool:
        state = spares(daemon)
        assert state["ready"] == [], "no spare lives to be ready"
        if state["retry_in"] is not None:
            seen.append((state["failures"], state["retry_in"]))
        return any(failures >= 3 and wait > backoff(2) for failures, wait in seen)

    daemon.wait_for(waits_grew, timeout=15, what="the wait before the next spare to grow")
    # 0: the retry is due and the loop has not run it yet (a busy machine)
    assert not [(f, w) for f, w in seen if not 0 <= w <= backoff(f)], seen
    assert min(failures for failures, _ in seen) >= 2, "the first one is replaced at once"
    log = daemon.log_text().split("serving on")[-1]
    assert log.count("spare worker") == 1 and "exited with code 7" in log and "spare refuses to live" in log
    # Jobs do not wait for spares: a fresh worker serves the spawn.
    job = daemon.spawn("say fresh")
    assert daemon.wait_state(job, "idle")["last_text"] == "fresh"


def spares_do(tmp_path: Path, code: str) -> str:
    """A PYTHONPATH whose sitecustomize runs ``code`` in every process that has the spare's room
    variable (spares, never the daemon or a fresh worker)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"import os, sys\nif {ROOM_VAR!r} in os.environ:\n    {code}\n")
    return str(site)


def test_a_spare_that_answers_anything_but_its_get_state_is_killed_and_replaced(roost_home, tmp_path: Path):
    daemon = DaemonHarness(roost_home)
    daemon.env["PYTHONPATH"] = spares_do(tmp_path, "os.write(1, b'junk\\n')")
    daemon.start()
    try:
        state = daemon.wait_for(lambda: (s := spares(daemon))["failures"] >= 2 and s, what="two spares killed")
        assert state["ready"] == []
        assert daemon.log_text().count("spare worker answered get_state with b'junk'") == 1
        job = daemon.spawn("say still served")
        assert daemon.wait_state(job, "idle")["last_text"] == "still served"
    finally:
        daemon.stop()
    assert records(daemon) == {}


def test_a_daemon_whose_environment_names_a_job_still_binds_each_job_as_itself(roost_home):
    daemon = DaemonHarness(roost_home)  # say, started by a tool inside another roost's worker
    daemon.env.update(ROOST_JOB_ID="zzzz", ROOST_TOKEN="0" * 32)
    daemon.start()
    try:
        spare = ready_spare(daemon)
        assert "ROOST_JOB_ID" not in environ(spare)
        job = daemon.spawn("run sh -c 'echo $ROOST_JOB_ID'")
        row = daemon.wait_state(job, "idle")
        assert row["pid"] == spare and row["last_text"] == job and environ(spare)["ROOST_JOB_ID"] == job
    finally:
        daemon.stop()


def test_a_sigkilled_daemon_leaves_no_spare_nor_bound_worker_after_the_next_start(daemon: DaemonHarness):
    spare = ready_spare(daemon)
    job = daemon.spawn("say bound")
    assert daemon.wait_state(job, "idle")["pid"] == spare
    bound, waiting = ident(spare), ident(ready_spare(daemon, other_than=spare))
    for pid, _ in (bound, waiting):  # neither may see the daemon go and end by itself
        os.kill(pid, signal.SIGSTOP)
    daemon.kill()
    assert alive(bound)
    daemon.start()
    daemon.wait_for(lambda: not alive(waiting), what="the old spare to be gone (its shim ends it, or the start)")
    fresh = ready_spare(daemon)
    assert fresh not in (bound[0], waiting[0])
    assert sorted(tree.pid for tree in records(daemon).values()) == sorted([fresh, bound[0]])
    row = daemon.show(job)  # the bound one is the job's worker: its shim lives, so it is re-adopted
    assert alive(bound) and row["pid"] == bound[0] and row["worker_up"] and row["state"] == "idle"
    os.kill(bound[0], signal.SIGCONT)


def test_shutdown_kills_the_spare_and_removes_its_record(daemon: DaemonHarness):
    spare = ident(ready_spare(daemon))
    daemon.stop()
    assert not alive(spare) and records(daemon) == {}


# -- not taking it -----------------------------------------------------------------------------------------
def test_spare_workers_0_starts_none_and_a_reload_starts_and_drops_them(daemon_factory):
    daemon: DaemonHarness = daemon_factory("spare_workers = 0\n")
    assert spares(daemon) == {"wanted": 0, "ready": [], "starting": [], "opening": 0, "failures": 0,
                              "retry_in": None}
    job = daemon.spawn("say no spare")
    assert daemon.wait_state(job, "idle")["last_text"] == "no spare"
    assert list(records(daemon)) == [job] and spares(daemon)["ready"] == []
    daemon.write_config("spare_workers = 2\n")
    daemon.wait_for(lambda: len(spares(daemon)["ready"]) == 2, timeout=15, what="two spares after the reload")
    pids = [ident(pid) for pid in spares(daemon)["ready"]]
    daemon.write_config("spare_workers = 0\n")
    daemon.wait_for(lambda: not any(alive(p) for p in pids), timeout=15, what="the spares to be dropped")
    assert spares(daemon)["wanted"] == 0 and list(records(daemon)) == [job]


def test_other_drivers_never_take_it(daemon_factory):
    daemon: DaemonHarness = daemon_factory(SH)
    spare = ready_spare(daemon)
    job = daemon.spawn("echo from sh", driver="sh")
    row = daemon.wait_state(job, "idle")
    assert row["pid"] != spare and spares(daemon)["ready"] == [spare]


def test_a_reload_to_a_default_driver_without_spares_drops_it_and_back_starts_one(daemon_factory):
    daemon: DaemonHarness = daemon_factory(SH)
    spare = ident(ready_spare(daemon))
    daemon.write_config('default_driver = "sh"\n' + SH)
    daemon.wait_for(lambda: not alive(spare), timeout=15, what="the spare to be dropped")
    assert spares(daemon)["wanted"] == 0 and spares(daemon)["opening"] == 0 and records(daemon) == {}
    job = daemon.spawn("echo hi")
    assert daemon.wait_state(job, "idle")["state"] == "idle"
    daemon.write_config(SH)
    assert ready_spare(daemon) != spare[0]


def test_which_jobs_a_spare_serves(roost_home: Path):
    config = parse_config(SH + '[drivers.mine]\nkind = "builtin"\n', "t.toml")
    pool = Spares(paths_mod.resolve(), lambda: config)
    pool.key = pool._plan().key
    builtin = config.driver("builtin")
    assert pool.key == ("builtin", builtin.options)
    local = Job(id="j1", title="t", driver="builtin", cwd="/")
    assert pool.serves(local, builtin) and pool.serves(local, config.driver("mine")), "alike profiles share it"
    assert not pool.serves(local, config.driver("sh"))
    assert not pool.serves(Job(id="j2", title="t", driver="builtin", cwd="/", host="h"), builtin)
    assert not pool.serves(Job(id="j3", title="t", driver="builtin", cwd="/", worktree="/w"), builtin)
    off = parse_config("spare_workers = 0\n", "t.toml")
    assert Spares(paths_mod.resolve(), lambda: off)._plan().key is None


@NEEDS_SSHD
def test_a_remote_job_never_takes_it(daemon_factory, sshd, tmp_path: Path):
    daemon: DaemonHarness = daemon_factory(sshd.host_table("h", tmp_path / "remote", None))
    spare = ready_spare(daemon)
    job = daemon.spawn("say from afar", host="h", cwd=str(tmp_path))
    row = daemon.wait_state(job, "idle", "failed", timeout=30)
    assert row["state"] == "idle" and row["pid"] != spare, row["reason"]
    assert spares(daemon)["ready"] == [spare]


# -- the pieces ---------------------------------------------------------------------------------------------
def _launch(env: dict[str, str]) -> Launch:
    return Launch(argv=[sys.executable], env=env, cwd="/", session="/s.jsonl")


def test_a_bind_carries_what_the_launch_adds_and_fits_the_room_at_and_past_its_size():
    base = {"PATH": "/bin", "ROOST_SOCKET": "/s", MARK_VAR: "m"}
    frame = bind_frame(base, _launch({"PATH": "/bin", "ROOST_SOCKET": "/s", "ROOST_JOB_ID": "ab12"}), "m")
    assert frame == {"type": "bind", "session": "/s.jsonl", "cwd": "/", "env": {"ROOST_JOB_ID": "ab12"},
                     "unset": [ROOM_VAR]}
    value = "v" * (ROOM - len("BIG") - 2)  # "BIG=" + value + NUL is the room, exactly
    assert bind_frame(base, _launch({**base, "BIG": value}), "m") is not None
    assert bind_frame(base, _launch({**base, "BIG": value + "v"}), "m") is None
    assert bind_frame(base, _launch({**base, "PATH": "/usr/bin"}), "m") is None, "a variable of the spare changed"
    assert bind_frame(base, _launch({"ROOST_SOCKET": "/s"}), "m") is None, "a variable of the spare is gone"
    assert bind_frame(base, _launch(base), "other mark") is None


def test_backoff_doubles_up_to_its_cap():
    assert [backoff(n) for n in range(1, 6)] == [0.0, 1.0, 2.0, 4.0, 8.0]
    assert backoff(40) == BACKOFF_MAX


@pytest.mark.parametrize("value,ok", [("0", True), ("8", True), ("9", False), ("-1", False), ("true", False),
                                      ('"1"', False)])
def test_spare_workers_is_an_integer_from_0_to_8(value: str, ok: bool):
    if ok:
        assert parse_config(f"spare_workers = {value}\n", "t.toml").spare_workers == int(value)
        return
    with pytest.raises(ConfigError) as info:
        parse_config(f"spare_workers = {value}\n", "t.toml")
    assert info.value.key == "spare_workers" and "expected an integer from 0 to 8" in info.value.message


def test_a_spare_no_job_took_ends_with_a_sigkilled_daemon_and_a_bound_one_does_not(daemon: DaemonHarness):
    """A spare's shim belongs to its daemon until a job takes it (roost/programs/shim.py
    ``ephemeral``): with the daemon gone it kills its agent and ends; a bound one runs on for the next."""
    spare = ready_spare(daemon)
    job = daemon.spawn("say bound")
    assert daemon.wait_state(job, "idle")["pid"] == spare
    waiting = ident(ready_spare(daemon, other_than=spare))
    shims = {name: json.loads((daemon.paths.state_dir / "workers" / f"{name}.json").read_text())["shim"]["pid"]
             for name in records(daemon)}
    spare_shim = ident(next(pid for name, pid in shims.items() if name.startswith("spare-")))
    bound_shim = ident(shims[job])
    daemon.kill()
    daemon.wait_for(lambda: not alive(waiting) and not alive(spare_shim), what="the spare and its shim to end")
    assert alive(ident(spare)) and alive(bound_shim), "the job's worker waits for the next daemon"
