"""pi and Claude Code workers outlive the daemon too (docs/reliability.md, "Workers that outlive the
daemon"): their adapters write down what they know with each committed line and a re-adopting daemon
takes it back, so a turn in flight goes on across a SIGTERM or a SIGKILL of the daemon, its output
whole and nothing twice, its usage counted once. Built-in and command jobs ride along. Each agent's
turn is held mid-way by its fake model server (``HOLD``: the answer after its tool's result waits for
the test), so the restart provably comes in the middle of it. Real daemons, real agents."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import DaemonHarness
from fake_anthropic import FakeAnthropic
from fakellm import FakeLLM
from test_agents_alike import pi_profile
from test_claude_driver import claude_bin, claude_profile  # noqa: F401  (claude_bin is a fixture)
from test_pi_driver import pi_bin  # noqa: F401  (a fixture)
from test_shim import AGENT, kinds, texts

TURN = 60.0
LINES, HALF = 2000, 800
#: The roost tool each agent calls before its held answer (a send to no such job: quick, and allowed
#: without a person, as roost's own tools are).
SEND = json.dumps({"job": "nosuchjob", "text": "hi"})
TOOL = {"pi": f"CALL roost_send {SEND}", "claude": f"CALL mcp__roost__roost_send {SEND}"}
#: How many jobs of each kind each restart has: five of each kind over the two, twenty in all.
JOBS = {"SIGTERM": {"builtin": 3, "numbered": 2, "pi": 2, "claude": 3},
        "SIGKILL": {"builtin": 2, "numbered": 3, "pi": 3, "claude": 2}}


def counts(daemon: DaemonHarness, jobs: list[str]) -> tuple[int, int]:
    rows = [daemon.show(job)["usage"] for job in jobs]
    return sum(u.get("input", 0) for u in rows), sum(u.get("output", 0) for u in rows)


@pytest.mark.pi
@pytest.mark.claude
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_pi_claude_builtin_and_command_turns_go_on_across_a_restart_whole_and_nothing_twice(
        pi_bin, claude_bin, daemon_factory: Callable[[str], DaemonHarness], tmp_path: Path,  # noqa: F811
        how: str) -> None:
    pi_fake, claude_fake = FakeLLM().start(), FakeAnthropic().start()
    try:
        numbered = (f'[drivers.numbered]\nkind = "command"\n'
                    f'command = [{json.dumps(sys.executable)}, {json.dumps(str(AGENT))}, "{{prompt}}"]\n')
        daemon = daemon_factory("\n".join(["max_running_jobs = 0", pi_profile(pi_bin, pi_fake, tmp_path), numbered,
                                           claude_profile(claude_bin, claude_fake, tmp_path / "claude-home")]))
        gates = Path(daemon.env["ROOST_GATES"])
        many = JOBS[how]
        jobs: dict[str, list[str]] = {
            "builtin": [daemon.spawn(f"say before-{i}\nwait-for g{i}\nsay after-{i}") for i in range(many["builtin"])],
            "numbered": [daemon.spawn(f"{LINES} {HALF} {gates / f'n{i}'}", driver="numbered")
                         for i in range(many["numbered"])],
            "pi": [daemon.spawn(f"HOLD pi{i} {TOOL['pi']}", driver="pi") for i in range(many["pi"])],
            "claude": [daemon.spawn(f"HOLD claude{i} {TOOL['claude']}", driver="claude")
                       for i in range(many["claude"])]}
        fakes = {"pi": pi_fake, "claude": claude_fake}
        for i, job in enumerate(jobs["builtin"]):
            daemon.at_gate(job, f"g{i}")
        for i, job in enumerate(jobs["numbered"]):
            daemon.wait_for(lambda: f"line-{HALF:05d}\n" in texts(daemon, job), what="the first half of the lines")
        for kind in ("pi", "claude"):
            for i, job in enumerate(jobs[kind]):
                daemon.wait_for(lambda: fakes[kind].held(f"{kind}{i}") and kinds(daemon, job, "tool"), timeout=TURN,
                                what=f"{kind} job {i} held after its tool call")
        every = [job for group in jobs.values() for job in group]
        pids = {job: daemon.show(job)["pid"] for job in every}
        assert {job: daemon.show(job)["state"] for job in every} == dict.fromkeys(every, "working")
        if how == "SIGKILL":
            daemon.kill()
        else:
            daemon.stop(keep_workers=True)
        # Half of each kind goes on while no daemon listens (its shim keeps what it says), the rest after.
        releases: dict[str, list[Callable[[], Any]]] = {
            "builtin": [lambda i=i: daemon.release(f"g{i}") for i in range(many["builtin"])],
            "numbered": [lambda i=i: (gates / f"n{i}").touch() for i in range(many["numbered"])],
            **{kind: [lambda kind=kind, i=i: fakes[kind].release(f"{kind}{i}") for i in range(many[kind])]
               for kind in ("pi", "claude")}}
        for group in releases.values():
            for release in group[0::2]:
                release()
        daemon.start()
        for group in releases.values():
            for release in group[1::2]:
                release()
        for job in every:
            row = daemon.wait_state(job, "idle", "failed", timeout=TURN)
            assert row["state"] == "idle", (job, row["reason"], kinds(daemon, job, "error"))
            assert row["pid"] == pids[job], "the same worker, re-adopted"
            assert [e["outcome"] for e in kinds(daemon, job, "turn_end")] == ["ok"] and not kinds(daemon, job, "error")
            assert [w.get("adopted") for w in kinds(daemon, job, "worker")] == [None, True]
        for i, job in enumerate(jobs["builtin"]):
            said = texts(daemon, job)
            assert said.count(f"before-{i}") == 1 and said.count(f"after-{i}") == 1
        for job in jobs["numbered"]:
            assert texts(daemon, job) == "".join(f"line-{n:05d}\n" for n in range(1, LINES + 1))
        for kind in ("pi", "claude"):
            for job in jobs[kind]:
                [tool] = kinds(daemon, job, "tool")
                assert "roost_send" in str(tool["name"]) and tool["error"]
                [said] = daemon.texts(job)
                assert said.startswith("tool said: ") and "nosuchjob" in said, said
            # Every call the server charged counted once (Claude Code's title call may land a moment later).
            fake = fakes[kind]
            daemon.wait_for(lambda: counts(daemon, jobs[kind]) == (fake.charged["input"], fake.charged["output"]),
                            timeout=TURN, what=f"{kind}'s usage to equal what its server charged, "
                                               f"{fake.charged}, not {counts(daemon, jobs[kind])}")
    finally:
        pi_fake.stop()
        claude_fake.stop()
