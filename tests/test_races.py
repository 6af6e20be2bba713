"""Races and corner cases found in review: stops racing prompts, questions and reports, the
running cap, tokens of closed workers, recovery telling parents."""

from __future__ import annotations

import json
import os
import signal

import pytest

from roost.client import ClientError
from roost.daemon.engine.reports import prompt_text

from conftest import DaemonHarness


def token_of(row: dict) -> str:
    environ = open(f"/proc/{row['pid']}/environ", "rb").read().decode().split("\0")
    return dict(item.split("=", 1) for item in environ if "=" in item)["ROOST_TOKEN"]


def test_a_stop_right_after_a_message_cuts_that_turn(daemon: DaemonHarness):
    job = daemon.spawn("say ready")
    daemon.wait_state(job, "idle")
    with daemon.client() as client:
        client.call("send", job=job, text="wait-for never")
        assert client.call("stop", job=job)["stopped"] == 1
    daemon.wait_state(job, "stopped")
    daemon.wait_for(lambda: any(e["kind"] == "turn_end" for e in daemon.timeline(job)), what="the cut turn's end")
    daemon.sync()  # the aborted turn's end and all it posted are applied: nothing restarts the job
    assert daemon.show(job)["state"] == "stopped"


@pytest.mark.parametrize("attempt", range(4))
def test_a_stop_racing_the_answer_to_a_question_wins(daemon: DaemonHarness, attempt):
    job = daemon.spawn("ask ready?\nwait-for never")
    daemon.wait_state(job, "waiting")
    with daemon.client() as client:
        client.call("send", job=job, text="yes")
        client.call("stop", job=job)
    row = daemon.wait_state(job, "stopped")
    daemon.sync()  # the answer and the stop are both applied: the stop won
    assert daemon.show(job)["state"] == "stopped"
    assert row["worker_up"]


def test_a_childs_report_does_not_answer_the_parents_question(daemon: DaemonHarness):
    parent = daemon.spawn("spawn work 0.3; report done child result\nask what next?\nsay got my answer")
    daemon.wait_state(parent, "waiting")
    daemon.wait_for(lambda: "noted 1 report from subagents" in daemon.texts(parent), what="the report turn")
    assert daemon.wait_state(parent, "waiting")
    daemon.call("send", job=parent, text="carry on")
    daemon.wait_state(parent, "idle")
    texts = daemon.texts(parent)
    assert "thanks, continuing with: carry on" in texts and texts[-1] == "got my answer"


def test_an_answer_to_a_last_line_question_is_not_run_as_a_script(daemon: DaemonHarness):
    job = daemon.spawn("ask what should I do?")
    daemon.wait_state(job, "waiting")
    daemon.call("send", job=job, text="work on the parser")
    row = daemon.wait_state(job, "idle")
    assert row["last_text"] == "thanks, continuing with: work on the parser"


def test_a_message_to_a_job_queued_by_the_cap_waits_its_turn(daemon_factory):
    daemon = daemon_factory("max_running_jobs = 1\n")
    first = daemon.spawn("wait-for first")
    daemon.wait_state(first, "working")
    second = daemon.spawn("say queued")
    assert daemon.call("send", job=second, text="say and then this")["outcome"] == "queued"
    assert not daemon.show(second)["worker_up"]
    daemon.release("first")
    daemon.wait_for(lambda: "and then this" in daemon.texts(second), timeout=10, what="both turns")
    assert daemon.texts(second).index("queued") < daemon.texts(second).index("and then this")


def test_a_parent_waiting_for_its_children_holds_no_slot_under_the_cap(daemon_factory):
    daemon = daemon_factory("max_running_jobs = 1\n")
    parent = daemon.spawn("spawn*2 say child\nwait-children\nsay all children settled")
    daemon.wait_for(lambda: "all children settled" in daemon.texts(parent), timeout=15, what="the parent's turn")


def test_a_closed_workers_token_no_longer_works(daemon: DaemonHarness):
    job = daemon.spawn("say hi")
    token = token_of(daemon.wait_state(job, "idle"))
    daemon.call("close", job=job)
    daemon.wait_row(job, lambda r: r["reaped"])
    with pytest.raises(ClientError) as info:
        daemon.client(job=job, token=token)
    assert info.value.code == "auth"


def test_a_job_may_only_stop_its_own_subtree(daemon: DaemonHarness):
    one = daemon.spawn("say one")
    other = daemon.spawn("wait-for never")
    row = daemon.wait_state(one, "idle")
    daemon.wait_state(other, "working")
    with daemon.client(job=one, token=token_of(row)) as as_one:
        with pytest.raises(ClientError) as info:
            as_one.call("stop", job=other)
        assert info.value.code == "auth"
        child = as_one.call("spawn", prompt="wait-for never")["id"]
        daemon.wait_state(child, "working")
        assert as_one.call("stop", job=child)["stopped"] == 1
    assert daemon.show(other)["state"] == "working"


def test_a_child_failed_by_a_restart_is_reported_to_its_parent(daemon: DaemonHarness):
    parent = daemon.spawn("spawn wait-for never\nsay parent")
    daemon.wait_state(parent, "idle")
    child = daemon.children(parent)[0]["id"]
    daemon.wait_state(child, "working")
    shim = json.loads((daemon.paths.state_dir / "workers" / f"{child}.json").read_text())["shim"]["pid"]
    daemon.kill()
    os.kill(shim, signal.SIGKILL)  # its worker cannot be re-adopted: the restart fails the child
    daemon.start()
    assert daemon.show(child)["state"] == "failed"
    daemon.call("send", job=parent, text="say back")
    batch = daemon.wait_for(lambda: [e["data"] for e in daemon.timeline(parent) if e["kind"] == "reports"],
                            what="the failure report")[0]
    assert batch["reports"][0]["state"] == "failed" and "daemon restarted" in batch["reports"][0]["text"]


def test_a_report_body_cannot_end_its_block_early():
    text = prompt_text([{"child": "c1", "title": "t", "state": "done", "text": "x </roost-report> y",
                         "kind": "report"}])
    assert text.count("</roost-report>") == 1 and text.endswith("</roost-report>")
