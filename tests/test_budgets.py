"""Budgets end to end (issue 21): a real pi, priced by its fake model, runs a tree under a budget in
dollars. At 80 % the timeline says so; the call that reaches the cap stops the tree mid-turn — the pi
job in its bash command, its built-in child at its gate — as a stop by the budget, not a failure;
a spawn under it is refused with the reason; a person raises it and the tree takes spawns again."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roost.client import ClientError
from roost.rules.budgets import WARN_AT

from fake_anthropic import FakeAnthropic
from fakellm import FakeLLM
from test_attacks import ATTACK
from test_agents_alike import PI_PRICE, pi_profile
from test_claude_driver import claude_bin, claude_profile  # noqa: F401  (claude_bin is a fixture)
from test_pi_driver import pi_bin  # noqa: F401  (a fixture)

TURN = 60.0
CALL_USD = (120 * PI_PRICE["input"] + 8 * PI_PRICE["output"]) / 1e6  # what one fake call costs


def budget_entries(daemon, job: str) -> list[dict]:
    return [e["data"] for e in daemon.timeline(job) if e["kind"] == "budget"]


@pytest.mark.pi
def test_a_budget_warns_then_stops_its_tree_mid_turn_and_refuses_spawns_until_raised(
        pi_bin, daemon_factory, tmp_path: Path) -> None:  # noqa: F811
    fake = FakeLLM().start()
    try:
        daemon = daemon_factory(pi_profile(pi_bin, fake, tmp_path))
        budget = 2.4 * CALL_USD  # two calls reach the warning (80 %), the third the cap
        child_task = json.dumps({"task": "wait-for g1\nsay released", "title": "kid"})
        job = daemon.spawn(f"CALL roost_spawn {child_task}", driver="pi", budget_usd=budget, approvals="allow")
        daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"].startswith("tool said:"),
                        timeout=TURN, what="the first turn, which spawned a child")
        [child] = daemon.wait_for(lambda: daemon.children(job), timeout=TURN, what="the child")
        daemon.at_gate(child["id"], "g1", timeout=TURN)
        [warned] = budget_entries(daemon, job)
        assert warned["level"] == "warn" and f"{2 * CALL_USD / budget:.0%}" in warned["text"]
        assert 2 * CALL_USD / budget >= WARN_AT

        daemon.call("send", job=job, text='CALL bash {"command": "sleep 30"}')  # its first call reaches the cap
        row = daemon.wait_state(job, "stopped", timeout=TURN)
        assert daemon.wait_state(child["id"], "stopped", timeout=TURN)["state"] == "stopped"
        assert fake.calls == 3, "stopped in the turn's bash command: no call after the one that reached the cap"
        assert row["usage"]["cost"] == pytest.approx(3 * CALL_USD)
        reasons = [e["data"].get("reason") for e in daemon.timeline(job) if e["kind"] == "state"]
        assert reasons[-1] == f"stopped by the budget of job {job}"
        assert "failed" not in [e["data"]["state"] for e in daemon.timeline(job) if e["kind"] == "state"]
        assert [e["level"] for e in budget_entries(daemon, job)] == ["warn", "over"]

        for _ in range(2):  # every new turn past the cap is refused, not only the first stop's
            with pytest.raises(ClientError) as no_turn:  # a person's message would restart it
                daemon.call("send", job=job, text='CALL bash {"command": "echo more"}')
            assert no_turn.value.code == "refused" and "roost budget" in no_turn.value.message, no_turn.value
            assert f"job {job} spent" in no_turn.value.message
        assert daemon.show(job)["state"] == "stopped" and fake.calls == 3, "no turn ran past the cap"

        with pytest.raises(ClientError) as refused:
            daemon.spawn("say hi", driver="builtin", parent=job)
        assert refused.value.code == "refused"
        assert f"job {job} spent" in refused.value.message and "roost budget" in refused.value.message
        with pytest.raises(ClientError) as too_deep:  # a grandchild's spawn counts against it too
            daemon.spawn("say hi", driver="builtin", parent=child["id"])
        assert too_deep.value.code == "refused"

        raised = daemon.call("budget", job=job, usd=1.0)
        assert (raised["usd"], raised["level"]) == (1.0, "ok")
        assert budget_entries(daemon, job)[-1]["text"].startswith("budget set to $1 by a person")
        again = daemon.spawn("say hi", driver="builtin", parent=job)
        daemon.wait_row(again, lambda r: r["state"] in ("idle", "done"), timeout=TURN, what="the spawn after the raise")
        daemon.call("send", job=job, text="say after the raise")  # and a person's message runs a turn again
        daemon.wait_row(job, lambda r: r["state"] == "idle" and fake.calls > 3, timeout=TURN, what="the turn")
        shown = daemon.wait_row(job, lambda r: r["budget"]["spent_usd"] == pytest.approx(fake.calls * CALL_USD),
                                timeout=TURN, what="its cost")
        assert shown["subtree_usage"]["cost"] == pytest.approx(fake.calls * CALL_USD)
    finally:
        fake.stop()


def test_the_daily_budget_refuses_spawns_once_spent_and_bad_budgets_are_refused(daemon_factory) -> None:
    daemon = daemon_factory("budget_daily_usd = 0\n")
    with pytest.raises(ClientError) as refused:
        daemon.spawn("say hi")
    assert refused.value.code == "refused" and "the day spent $0.0000" in refused.value.message
    daemon = daemon_factory("")
    with pytest.raises(ClientError) as bad:
        daemon.spawn("say hi", budget_usd=-1)
    assert bad.value.code == "bad_args" and "budget in dollars" in bad.value.message
    job = daemon.spawn("say hi")
    with pytest.raises(ClientError) as empty:
        daemon.call("budget", job=job)
    assert empty.value.code == "bad_args" and "--usd or --tokens" in empty.value.message


@pytest.mark.pi
def test_the_cli_spawns_under_a_budget_and_shows_usage_in_ls_show_usage_and_budget(
        pi_bin, daemon_factory, tmp_path: Path) -> None:  # noqa: F811
    fake = FakeLLM().start()
    try:
        daemon = daemon_factory(pi_profile(pi_bin, fake, tmp_path))

        def roost(*args: str, code: int = 0) -> str:
            proc = subprocess.run([sys.executable, "-m", "roost.cli", *args], env=daemon.env, capture_output=True,
                                  text=True, timeout=60, cwd=str(daemon.home))
            assert proc.returncode == code, (args, proc.stdout, proc.stderr)
            return proc.stdout + proc.stderr

        job = roost("spawn", "--driver", "pi", "--budget-usd", "1", "--budget-tokens", "100000", "hello").strip()
        daemon.wait_row(job, lambda r: r["state"] == "idle" and r["usage"].get("output"), timeout=TURN,
                        what="the turn and its usage")
        [line] = [x for x in roost("ls").splitlines() if job in x]
        assert "128 tok · <$0.01" in line, line
        shown = json.loads(roost("show", job, "--json"))
        assert shown["subtree_usage"]["input"] == 120 and shown["budget"]["usd"] == 1.0
        said = roost("usage")
        assert said.startswith(f"today ({time.strftime('%Y-%m-%d')}): 128 tok (in 120, out 8") and job in said
        report = json.loads(roost("usage", "--json", "--days", "1"))
        assert report["today"]["calls"] == 1 and report["trees"][0]["job"] == job
        assert roost("budget", job, "--usd", "2").startswith(f"{job}: budget $2 and 100000 tokens; spent $0.0005")
        assert "give --usd N or --tokens N" in roost("budget", job, code=2)
    finally:
        fake.stop()


def test_a_job_cannot_detach_itself_out_of_its_trees_budget(daemon, tmp_path) -> None:
    """From the child's own shell, with its own identity: detaching itself is refused (auth), and it
    stays under its parent's budget; a person may detach it."""
    out = tmp_path / "detach-said"
    parent = daemon.spawn("say the tree's top", budget_usd=1.0)
    daemon.wait_state(parent, "idle")
    attack = shlex.join([sys.executable, str(ATTACK), str(out), "detach"]) + ' "{\\"job\\": \\"$ROOST_JOB_ID\\"}"'
    child = daemon.spawn(f"run sh -c {shlex.quote(attack)}\nsay tried", parent=parent, cwd=str(tmp_path))
    daemon.wait_state(child, "idle", timeout=30)
    said = out.read_text()
    assert said.startswith(f"auth: job {child} may not detach itself"), said
    assert daemon.show(child)["parent"] == parent
    assert daemon.call("detach", job=child)["parent"] is None, "a person may"


@pytest.mark.claude
def test_a_claude_code_turn_that_crosses_the_cap_ends_stopped_by_the_budget_and_a_raise_reaches_it(
        claude_bin, daemon_factory, tmp_path: Path) -> None:  # noqa: F811
    """Claude Code's first turn crosses its job's cap, its cost coming with the turn's end: the job
    ends stopped by the budget (it stayed idle, its next message failing), not failed; a raised
    budget restarts its worker between turns (its own --max-budget-usd follows), and the next
    message runs."""
    fake = FakeAnthropic().start()
    try:
        daemon = daemon_factory(claude_profile(claude_bin, fake, tmp_path / "claude-home"))
        job = daemon.spawn("hello one", driver="claude", budget_tokens=10)  # its first call crosses it
        row = daemon.wait_state(job, "stopped", "failed", timeout=TURN)
        states = [e["data"] for e in daemon.timeline(job) if e["kind"] == "state"]
        assert row["state"] == "stopped", (row["reason"], states)
        assert row["reason"] == f"stopped by the budget of job {job}"
        assert "failed" not in [s["state"] for s in states]
        pid = row["pid"]
        daemon.call("budget", job=job, tokens=10**9)
        daemon.wait_row(job, lambda r: r["pid"] != pid, timeout=TURN, what="its worker restarted for the new cap")
        daemon.call("send", job=job, text="hello two")
        daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == "echo: hello two", timeout=TURN,
                        what="the turn after the raise")
    finally:
        fake.stop()
