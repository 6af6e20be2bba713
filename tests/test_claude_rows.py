"""What a Claude Code job's row says, from the real daemon running the real ``claude`` against
tests/fake_anthropic.py: its own (``Task``) subagents counted as the panel counts them, and the
permission request it waits on as its approval."""

from __future__ import annotations

import json
from typing import Any

import pytest

from roost.models import Row, State
from roost.rules.provider_subagents import provider_rows
from roost.rules.views import subagent_counts

from conftest import DaemonHarness
from test_claude_driver import START, claude_bin, claude_daemon, fake  # noqa: F401 (fixtures)


def slim_row(daemon: DaemonHarness, job: str) -> dict[str, Any]:
    (row,) = [r for r in daemon.rows() if r["id"] == job]
    return row


def counted_as_in_the_panel(daemon: DaemonHarness, job: str) -> tuple[int, int]:
    """The job's own subagents as its slim row counts them, checked against its panel's rows
    (made from its timeline's ``subagent`` entries): they must agree."""
    row = Row.from_wire(slim_row(daemon, job))
    shown = provider_rows([e for e in daemon.timeline(job) if e["kind"] == "subagent"], row)
    counts = (row.job.provider_subagents, row.job.provider_running)
    assert counts == (len(shown), sum(r.state is State.WORKING for r in shown)) == subagent_counts(row)
    return counts


def task(prompt: str) -> str:
    return "CALL Task " + json.dumps({"description": f"do: {prompt}", "prompt": prompt,
                                      "subagent_type": "general-purpose"})


@pytest.mark.claude
def test_task_subagents_are_counted_on_the_parents_row_as_in_its_panel(claude_daemon):
    daemon = claude_daemon()
    job = daemon.spawn(task("SLOW"), driver="claude")  # its subagent's model answer trickles
    daemon.wait_row(job, lambda r: r["provider_running"] == 1, timeout=START, what="a running subagent")
    assert counted_as_in_the_panel(daemon, job) == (1, 1)
    daemon.call("stop", job=job)  # a stop of the parent stops its subagents too: Claude Code says it stopped
    daemon.wait_state(job, "stopped", timeout=START)
    daemon.wait_row(job, lambda r: r["provider_running"] == 0, timeout=START, what="the subagent's end")
    assert counted_as_in_the_panel(daemon, job) == (1, 0)
    assert [e["data"]["state"] for e in daemon.timeline(job) if e["kind"] == "subagent"][-1] == "stopped"
    done = daemon.spawn(task("count them"), driver="claude")  # one that ends within its turn
    daemon.wait_state(done, "idle", timeout=START)
    assert counted_as_in_the_panel(daemon, done) == (1, 0)
    assert [e["data"]["state"] for e in daemon.timeline(done) if e["kind"] == "subagent"][-1] == "done"


@pytest.mark.claude
def test_a_permission_request_is_the_waiting_rows_approval_until_answered(claude_daemon):
    daemon = claude_daemon()
    work = daemon.home / "work"
    work.mkdir(parents=True)
    job = daemon.spawn('CALL Bash {"command": "echo hi > made.txt"}', driver="claude", cwd=str(work))
    daemon.wait_state(job, "waiting", timeout=START)
    [pending] = slim_row(daemon, job)["approvals"]
    assert (pending["tool"], pending["what"]) == ("Bash", {"command": "echo hi > made.txt", "cwd": str(work)})
    daemon.call("answer_approval", approval=pending["id"], decision="once")  # it works on, asking nothing
    daemon.wait_row(job, lambda r: r["state"] != "waiting", timeout=START, what="the answer taken")
    assert slim_row(daemon, job)["approvals"] == []
