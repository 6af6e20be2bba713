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


Fakes = dict[str, "FakeLLM | FakeAnthropic"]


def spawn_held(daemon: DaemonHarness, many: dict[str, int], gates: Path, **where: Any) -> dict[str, list[str]]:
    """``many`` jobs of each kind, each to be held mid-turn: a built-in agent at ``wait-for g<i>`` (the
    file in ``gates``: its ROOST_GATES here, its cwd on a host), a command agent after the first half of
    its lines till ``gates/n<i>``, pi and Claude Code by their fake server's ``HOLD`` after a tool call.
    ``where``: the spawn's own arguments (host, cwd)."""
    gates.mkdir(parents=True, exist_ok=True)
    return {"builtin": [daemon.spawn(f"say before-{i}\nwait-for g{i}\nsay after-{i}", **where)
                        for i in range(many["builtin"])],
            "numbered": [daemon.spawn(f"{LINES} {HALF} {gates / f'n{i}'}", driver="numbered", **where)
                         for i in range(many["numbered"])],
            **{kind: [daemon.spawn(f"HOLD {kind}{i} {TOOL[kind]}", driver=kind, **where) for i in range(many[kind])]
               for kind in ("pi", "claude")}}


def wait_held(daemon: DaemonHarness, jobs: dict[str, list[str]], fakes: Fakes) -> dict[str, int]:
    """Wait until every job is held mid-turn; each one's worker pid."""
    for i, job in enumerate(jobs["builtin"]):
        daemon.at_gate(job, f"g{i}", timeout=TURN)
    for job in jobs["numbered"]:
        daemon.wait_for(lambda: f"line-{HALF:05d}\n" in texts(daemon, job), timeout=TURN,
                        what="the first half of the lines")
    for kind in ("pi", "claude"):
        for i, job in enumerate(jobs[kind]):
            daemon.wait_for(lambda: fakes[kind].held(f"{kind}{i}") and kinds(daemon, job, "tool"), timeout=TURN,
                            what=f"{kind} job {i} held after its tool call")
    every = [job for group in jobs.values() for job in group]
    assert {job: daemon.show(job)["state"] for job in every} == dict.fromkeys(every, "working")
    return {job: daemon.show(job)["pid"] for job in every}


def release_around(jobs: dict[str, list[str]], gates: Path, fakes: Fakes, between: Callable[[], Any]) -> None:
    """Let half of each kind's turns go on, then ``between`` (the daemon started again, the link
    back), then the rest."""
    releases: dict[str, list[Callable[[], Any]]] = {
        "builtin": [lambda i=i: (gates / f"g{i}").touch() for i in range(len(jobs["builtin"]))],
        "numbered": [lambda i=i: (gates / f"n{i}").touch() for i in range(len(jobs["numbered"]))],
        **{kind: [lambda kind=kind, i=i: fakes[kind].release(f"{kind}{i}") for i in range(len(jobs[kind]))]
           for kind in ("pi", "claude")}}
    for group in releases.values():
        for release in group[0::2]:
            release()
    between()
    for group in releases.values():
        for release in group[1::2]:
            release()


def assert_whole(daemon: DaemonHarness, jobs: dict[str, list[str]], fakes: Fakes, pids: dict[str, int],
                 workers: list[bool | None]) -> None:
    """Every turn ended once, ok, on the same worker (its ``worker`` entries' ``adopted``: ``workers``),
    its output whole and in order, nothing twice, no error; each agent kind's usage what its server
    charged (so each fake serves only these jobs)."""
    for job in pids:
        row = daemon.wait_state(job, "idle", "failed", timeout=TURN)
        assert row["state"] == "idle", (job, row["reason"], kinds(daemon, job, "error"))
        assert row["pid"] == pids[job], "the same worker"
        assert [e["outcome"] for e in kinds(daemon, job, "turn_end")] == ["ok"] and not kinds(daemon, job, "error")
        assert [w.get("adopted") for w in kinds(daemon, job, "worker")] == workers
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
        fakes: Fakes = {"pi": pi_fake, "claude": claude_fake}
        jobs = spawn_held(daemon, JOBS[how], gates)
        pids = wait_held(daemon, jobs, fakes)
        if how == "SIGKILL":
            daemon.kill()
        else:
            daemon.stop(keep_workers=True)
        # Half of each kind goes on while no daemon listens (its shim keeps what it says), the rest after.
        release_around(jobs, gates, fakes, daemon.start)
        assert_whole(daemon, jobs, fakes, pids, [None, True])
    finally:
        pi_fake.stop()
        claude_fake.stop()
