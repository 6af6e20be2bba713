"""The daemon with real built-in workers: trees, every state, deaths, stop, resume, restart."""

from __future__ import annotations

import os
import signal
import time

import pytest

from roost.client import ClientError

from conftest import DaemonHarness, assert_token_in_no_argv, pid_alive


def kinds(daemon: DaemonHarness, job: str) -> list[str]:
    return [e["kind"] for e in daemon.timeline(job)]


def errors(daemon: DaemonHarness, job: str) -> list[str]:
    return [e["data"]["message"] for e in daemon.timeline(job) if e["kind"] == "error"]


def test_a_tree_spawned_by_the_builtin_agent(daemon):
    root = daemon.spawn("spawn work 0.2; spawn work 0.2;; report done g; report done c\nspawn*2 say twin")
    daemon.wait_for(lambda: len(daemon.children(root)) == 3, what="three children")
    kids = daemon.children(root)
    assert all(k["parent"] == root for k in kids)
    assert all(k["depth"] == 1 for k in kids)
    assert sorted(k["title"] for k in kids) == ["say twin", "say twin", "work 0.2"]
    middle = next(k for k in kids if k["title"] == "work 0.2")
    daemon.wait_for(lambda: daemon.children(middle["id"]), what="a grandchild")
    grandchild = daemon.children(middle["id"])[0]
    assert grandchild["parent"] == middle["id"] and grandchild["depth"] == 2
    assert daemon.wait_state(grandchild["id"], "done")["last_text"] == "g"
    daemon.wait_state(middle["id"], "done")
    reports = [e["data"] for e in daemon.timeline(middle["id"]) if e["kind"] == "report"]
    assert reports == [{"status": "done", "text": "c"}]
    assert daemon.show(root)["descendants"] == 4


@pytest.mark.parametrize("script, state, last_text", [
    ("say fine", "idle", "fine"),
    ("report done all good", "done", "all good"),
    ("report blocked need a key", "blocked", "need a key"),
    ("ask which branch?", "waiting", "which branch?"),
    ("fail the tests are red", "failed", "the tests are red"),
])
def test_each_turn_outcome_lands_in_its_state(daemon, script, state, last_text):
    job = daemon.spawn(script)
    row = daemon.wait_state(job, state)
    assert row["last_text"] == last_text if state != "failed" else True
    if state == "failed":
        assert any("the tests are red" in str(e["data"]) for e in daemon.timeline(job) if e["kind"] == "turn_end")


def test_working_then_stopped_and_stop_is_idempotent(daemon):
    job = daemon.spawn("wait-for never")
    daemon.wait_state(job, "working")
    first = daemon.call("stop", job=job)
    assert first["stopped"] == 1
    row = daemon.wait_state(job, "stopped")
    assert row["worker_up"], "a stop cuts the turn short; it does not close the worker"
    again = daemon.call("stop", job=job)
    assert again == {"stopped": 0, "ids": [], "subagents": 0, "already": True}
    daemon.wait_for(lambda: any(e["kind"] == "turn_end" and e["data"]["outcome"] == "aborted"
                                for e in daemon.timeline(job)), what="the worker to cut its turn short")
    assert daemon.texts(job) == [], "the stop is said once, by the daemon's state line (it said '(stopped)' too)"
    assert daemon.show(job)["state"] == "stopped"


def test_an_agents_message_to_a_stopped_job_is_refused_and_a_persons_restarts_it(daemon):
    lead = daemon.spawn("say lead")
    daemon.wait_state(lead, "idle")
    job = daemon.spawn("wait-for never", parent=lead)
    daemon.wait_state(job, "working")
    daemon.call("stop", job=job)
    daemon.wait_state(job, "stopped")
    token = dict(item.split("=", 1) for item in open(f"/proc/{daemon.show(lead)['pid']}/environ", "rb").read()
                 .decode().split("\0") if "=" in item)["ROOST_TOKEN"]
    with daemon.client(job=lead, token=token) as agent, pytest.raises(ClientError) as info:
        agent.call("send", job=job, text="say again")
    assert info.value.code == "stopped" and "stopped" in info.value.message
    assert daemon.show(job)["state"] == "stopped"
    assert daemon.call("send", job=job, text="say again")["outcome"] == "restarted"
    assert daemon.wait_state(job, "idle")["last_text"] == "again"


def test_a_gate_holds_the_turn_until_its_file_appears_and_a_stop_cuts_it_short(daemon):
    held = daemon.spawn("say before\nwait-for go\nsay after")
    cut = daemon.spawn("wait-for never\nsay not reached")
    daemon.at_gate(held, "go")
    daemon.at_gate(cut, "never")
    assert daemon.show(held)["state"] == "working" and daemon.texts(held) == ["before"]
    daemon.release("go")
    assert daemon.wait_state(held, "idle")["last_text"] == "after"
    daemon.call("stop", job=cut)
    daemon.wait_for(lambda: any(e["kind"] == "turn_end" and e["data"]["outcome"] == "aborted"
                                for e in daemon.timeline(cut)), what="the stop to cut the gate short")
    assert "not reached" not in daemon.texts(cut) and daemon.show(cut)["state"] == "stopped"


@pytest.mark.parametrize("name", ["", "a/b", "..", "x" * 201])
def test_a_gate_that_is_not_one_file_name_fails_the_turn(daemon, name):
    job = daemon.spawn(f"wait-for {name}".strip())
    daemon.wait_state(job, "failed")
    assert any("wait-for: expected a file name of 1 to 200 characters" in str(e["data"])
               for e in daemon.timeline(job) if e["kind"] == "turn_end")


def test_starting_while_the_running_cap_is_full(daemon_factory):
    daemon = daemon_factory("max_running_jobs = 1\n")
    first = daemon.spawn("wait-for first")
    daemon.wait_state(first, "working")
    second = daemon.spawn("say second")
    row = daemon.show(second)
    assert row["state"] == "queued" and not row["worker_up"]
    daemon.release("first")
    daemon.wait_state(first, "idle", timeout=10)
    assert daemon.wait_state(second, "idle")["last_text"] == "second"


@pytest.mark.parametrize("when", ["mid-turn", "between turns"])
def test_a_worker_killed_with_sigkill_fails_its_job_within_a_second(daemon, when):
    job = daemon.spawn("wait-for never" if when == "mid-turn" else "say ready")
    row = daemon.wait_state(job, "working" if when == "mid-turn" else "idle")
    os.kill(row["pid"], signal.SIGKILL)
    killed = time.monotonic()
    row = daemon.wait_state(job, "failed", timeout=3)
    assert time.monotonic() - killed < 1.0
    assert row["pid"] is None and not row["worker_up"]
    assert any("killed by SIGKILL" in m for m in errors(daemon, job))


def test_crash_and_exit_between_turns_are_failures_with_the_exit_code(daemon):
    crash = daemon.spawn("say about to crash\ncrash")
    exiter = daemon.spawn("say bye\nexit-after 0.2")
    daemon.wait_state(crash, "failed")
    assert any("exited with code 3" in m for m in errors(daemon, crash))
    daemon.wait_state(exiter, "idle", "failed")
    daemon.wait_state(exiter, "failed")
    assert any("exited with code 0" in m for m in errors(daemon, exiter))


def test_a_message_resumes_a_done_job_from_its_session_file(daemon):
    job = daemon.spawn("say first words\nreport done finished")
    first = daemon.wait_state(job, "done")
    daemon.call("close", job=job)
    closed = daemon.wait_row(job, lambda r: r["reaped"] and not r["worker_up"])
    assert closed["state"] == "done"
    assert not pid_alive(first["pid"])
    result = daemon.call("send", job=job, text="recall")
    assert result["outcome"] == "resumed"
    row = daemon.wait_state(job, "idle")
    assert row["pid"] != first["pid"] and row["worker_up"]
    assert "say first words" in row["last_text"], "the resumed worker knows the earlier conversation"
    assert row["id"] == job and row["session"] == first["session"]
    workers = [entry["data"]["resumed"] for entry in daemon.timeline(job) if entry["kind"] == "worker"]
    assert workers == [False, True], "a new job's worker started; the one from its session file resumed"


def test_a_message_while_a_turn_runs_is_queued_then_delivered(daemon):
    job = daemon.spawn("wait-for sent")
    daemon.wait_state(job, "working")
    assert daemon.call("send", job=job, text="say after the work")["outcome"] == "queued"
    daemon.release("sent")
    daemon.wait_for(lambda: "after the work" in daemon.texts(job), what="the queued message's turn")


def test_an_unknown_job_is_a_clear_error(daemon):
    with pytest.raises(ClientError) as info:
        daemon.call("send", job="nope", text="hi")
    assert info.value.code == "unknown_job" and "nope" in info.value.message


def test_stop_tree_stops_every_running_job_and_says_how_many(daemon):
    root = daemon.spawn("spawn spawn wait-for never; wait-for never\nspawn wait-for never\nwait-for never")
    daemon.wait_for(lambda: len(daemon.children(root)) == 2, what="children")
    daemon.wait_for(lambda: sum(len(daemon.children(k["id"])) for k in daemon.children(root)) == 1,
                    what="a grandchild")
    everyone = [root] + [k["id"] for k in daemon.children(root)]
    everyone += [g["id"] for k in daemon.children(root) for g in daemon.children(k["id"])]
    for job in everyone:
        daemon.wait_state(job, "working")
    result = daemon.call("stop", job=root, tree=True)
    assert result["stopped"] == 4 and sorted(result["ids"]) == sorted(everyone)
    for job in everyone:
        daemon.wait_state(job, "stopped")


def test_the_daemon_killed_and_started_again_keeps_every_record_and_its_workers(daemon):
    """A SIGKILL of the daemon loses no worker: the next one re-adopts each through its shim
    (docs/reliability.md); the turn in flight goes on and ends, an idle worker stays up."""
    idle = daemon.spawn("say still here")
    busy = daemon.spawn("wait-for never")
    idle_row = daemon.wait_state(idle, "idle")
    busy_row = daemon.wait_state(busy, "working")
    daemon.at_gate(busy, "never")
    daemon.kill()
    daemon.start()
    rows = {r["id"]: r for r in daemon.rows()}
    assert set(rows) == {idle, busy}
    assert rows[idle]["state"] == "idle" and rows[idle]["pid"] == idle_row["pid"] and rows[idle]["worker_up"]
    assert rows[busy]["state"] == "working" and rows[busy]["pid"] == busy_row["pid"]
    daemon.release("never")
    daemon.wait_state(busy, "idle")
    # The next message goes to the same worker, not a second one.
    assert daemon.call("send", job=idle, text="recall")["outcome"] == "delivered"
    row = daemon.wait_state(idle, "idle")
    assert "say still here" in row["last_text"] and row["pid"] == idle_row["pid"]
    assert daemon.call("status")["workers"] == 2


def test_a_full_stop_closes_the_workers_and_a_start_resumes_from_the_session(daemon):
    """``roost daemon stop --all`` (the ``shutdown`` operation with ``all``) closes every worker as
    before shims: records reaped, the next message resumes the job from its session."""
    idle = daemon.spawn("say still here")
    idle_row = daemon.wait_state(idle, "idle")
    daemon.stop()
    assert not pid_alive(idle_row["pid"])
    daemon.start()
    row = daemon.show(idle)
    assert row["pid"] is None and row["reaped"]
    assert daemon.call("send", job=idle, text="recall")["outcome"] == "resumed"
    assert "say still here" in daemon.wait_state(idle, "idle")["last_text"]


def test_pin_and_unpin(daemon):
    job = daemon.spawn("say pin me")
    daemon.wait_state(job, "idle")
    assert daemon.call("pin", job=job)["pinned"] is True
    assert daemon.show(job)["pinned"] is True
    assert daemon.call("unpin", job=job)["pinned"] is False


def test_a_missing_working_directory_is_refused_at_spawn(daemon, tmp_path):
    with pytest.raises(ClientError) as info:
        daemon.call("spawn", prompt="say hi", cwd=str(tmp_path / "gone"))
    assert info.value.code == "bad_args" and "gone" in info.value.message
    assert daemon.rows() == []


def test_an_unknown_driver_is_refused_at_spawn(daemon):
    with pytest.raises(ClientError) as info:
        daemon.spawn("say hi", driver="nosuch")
    assert "nosuch" in info.value.message


def test_the_worker_environment_carries_the_job_and_its_token(daemon):
    job = daemon.spawn("say env check")
    row = daemon.wait_state(job, "idle")
    environ = dict(item.split("=", 1) for item in
                   open(f"/proc/{row['pid']}/environ", "rb").read().decode().split("\0") if "=" in item)
    assert environ["ROOST_JOB_ID"] == job
    assert environ["ROOST_SOCKET"] == str(daemon.paths.socket)
    assert len(environ["ROOST_TOKEN"]) >= 32
    assert_token_in_no_argv(job, environ["ROOST_TOKEN"])
    # That token proves the job; a wrong one is refused.
    with pytest.raises(ClientError) as info:
        daemon.client(job=job, token="0" * 32)
    assert info.value.code == "auth"
    with daemon.client(job=job, token=environ["ROOST_TOKEN"]) as as_job:
        child = as_job.call("spawn", prompt="say child", parent=None)
    assert child["parent"] == job, "a job's spawn is always its own child"


def test_a_daemon_stopped_mid_turn_leaves_no_job_working_without_a_worker(daemon):
    job = daemon.spawn("wait-for never")
    daemon.wait_state(job, "working")
    daemon.stop()
    daemon.start()
    row = daemon.show(job)
    assert row["state"] == "failed" and row["pid"] is None
    assert any("shut down during its turn" in str(e["data"]) for e in daemon.timeline(job))
