"""Usage you can trust (issue 21): Claude Code, Codex and pi, each against its fake model server,
through a stop mid-turn, a message after it, a close and resume, a kill -9 of the worker and a
restart of the daemon. After each, the job's figures equal what the server itself charged, and
``usage`` (today, by tree) says the same."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import DaemonHarness, processes_with
from fake_anthropic import FakeAnthropic
from fake_openai import FakeOpenAI
from fakellm import FakeLLM
from test_agents_alike import pi_profile
from test_claude_driver import claude_bin, claude_profile  # noqa: F401  (claude_bin is a fixture)
from test_codex_driver import codex_bin, codex_profile  # noqa: F401  (codex_bin is a fixture)
from test_pi_driver import pi_bin  # noqa: F401  (a fixture)

TURN = 60.0


def agrees(daemon: DaemonHarness, job: str, fake: FakeLLM, what: str) -> dict[str, Any]:
    """Wait until the job's figures are the server's count (each call's usage comes before its turn
    ends, but Claude Code's title call may come a moment later), and return the row."""
    def same(row: dict[str, Any]) -> bool:
        usage = row["usage"]
        return (usage.get("input"), usage.get("output")) == (fake.charged["input"], fake.charged["output"])
    try:
        return daemon.wait_row(job, lambda r: r["state"] in ("idle", "stopped") and same(r), timeout=TURN, what=what)
    except AssertionError:
        row = daemon.show(job)
        raise AssertionError(f"{what}: the job counts {row['usage']}, the server charged {fake.charged} "
                             f"in {fake.calls} calls") from None


def idle_after(daemon: DaemonHarness, job: str, text: str) -> None:
    daemon.call("send", job=job, text=text)
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == f"echo: {text}", timeout=TURN,
                    what=f"the answer to {text!r}")


#: What each agent is stopped in the middle of, and what says it got there. Claude Code counts a call's
#: input as soon as its stream starts, as a real API bills it, and a stop that denies an approval lets it
#: begin one more call; no fake can time either, so its turn is stopped in a Bash command it may run
#: (a wait with a token of its own in its command line; Claude Code refuses a plain long `sleep`),
#: after a whole call.
SLEEP = "time.sleep(30.0071)"
MID_TURN = {"claude": ('CALL Bash ' + json.dumps({"command": f"python3 -c 'import time; {SLEEP}'"}),
                       lambda: processes_with(SLEEP))}


def run_the_night(daemon: DaemonHarness, fake: FakeLLM, kind: str) -> None:
    job = daemon.spawn("hello one", driver=kind)
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == "echo: hello one", timeout=TURN,
                    what="the first turn")
    agrees(daemon, job, fake, "after the first turn")
    idle_after(daemon, job, "hello two")
    agrees(daemon, job, fake, "after a second turn in the same process")

    prompt, under_way = MID_TURN.get(kind, ("SLOW", lambda: fake.bodies_with("SLOW")))
    daemon.call("send", job=job, text=prompt)  # a stop mid-turn: Codex used to count its last call again
    daemon.wait_for(lambda: under_way() and daemon.show(job)["state"] == "working", timeout=TURN,
                    what="the turn under way")
    daemon.call("stop", job=job)
    daemon.wait_state(job, "stopped", timeout=TURN)
    idle_after(daemon, job, "hello three")
    agrees(daemon, job, fake, "after a stop and a message")

    daemon.call("close", job=job)  # a resume in a new process
    daemon.wait_row(job, lambda r: r["reaped"], timeout=TURN, what="the worker closed")
    idle_after(daemon, job, "hello four")
    agrees(daemon, job, fake, "after a close and a resume")

    pid = daemon.show(job)["pid"]
    os.killpg(os.getpgid(pid), signal.SIGKILL)  # kill -9 of the worker between turns
    daemon.wait_row(job, lambda r: r["pid"] is None, timeout=TURN, what="the killed worker noticed")
    idle_after(daemon, job, "hello five")
    agrees(daemon, job, fake, "after kill -9 and a resume")

    daemon.stop()
    daemon.start()
    idle_after(daemon, job, "hello six")
    row = agrees(daemon, job, fake, "after a daemon restart")

    report = daemon.call("usage")
    assert (report["today"]["input"], report["today"]["output"]) == (fake.charged["input"], fake.charged["output"])
    [tree] = report["trees"]
    assert tree["job"] == job and tree["calls"] == report["today"]["calls"] >= 6
    show = daemon.show(job)
    assert show["subtree_usage"]["input"] == row["usage"]["input"]


@pytest.mark.claude
def test_claude_codes_usage_equals_the_servers_count(claude_bin, daemon_factory, tmp_path: Path):  # noqa: F811
    fake = FakeAnthropic().start()
    try:
        daemon = daemon_factory(claude_profile(claude_bin, fake, tmp_path / "claude-home")
                                + 'allowed_tools = ["Bash"]\n')
        run_the_night(daemon, fake, "claude")
    finally:
        fake.stop()


@pytest.mark.codex
def test_codexs_usage_equals_the_servers_count(codex_bin, daemon_factory: Callable[[str], DaemonHarness]):  # noqa: F811
    fake = FakeOpenAI().start()
    try:
        daemon = daemon_factory(codex_profile(codex_bin, fake) + '[prices.fake-model]\ninput = 1.0\noutput = 2.0\n')
        run_the_night(daemon, fake, "codex")
        usage = daemon.call("usage")["today"]
        assert usage["estimate"] and usage["cost"] == pytest.approx(
            (fake.charged["input"] * 1.0 + fake.charged["output"] * 2.0) / 1e6), "Codex priced from [prices]"
    finally:
        fake.stop()


@pytest.mark.pi
def test_pis_usage_equals_the_servers_count(pi_bin, daemon_factory, tmp_path: Path):  # noqa: F811
    fake = FakeLLM().start()
    try:
        daemon = daemon_factory(pi_profile(pi_bin, fake, tmp_path))
        run_the_night(daemon, fake, "pi")
    finally:
        fake.stop()
