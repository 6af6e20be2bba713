"""Codex's approval requests as roost approvals, end to end: the real ``codex app-server`` run by the real
daemon against tests/fake_openai.py, whose model asks to run a command that writes a file outside its
workspace (escalated out of the sandbox). The file is the proof: present only after a person's approval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from approval_checks import asked, nothing_runs_after, roost
from conftest import DaemonHarness
from test_codex_driver import START, codex_bin, codex_daemon, fake, timeline  # noqa: F401 (fixtures)


def places(daemon: DaemonHarness) -> tuple[Path, Path]:
    """The job's workspace, and the file outside it the command would write."""
    work, outside = daemon.home / "work", daemon.home / "outside"
    work.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    return work, outside / "pwned.txt"


def call(target: Path) -> str:
    # not a login shell: a login bash here waits on something of its profile past the call's yield time
    return "CALL exec_command " + json.dumps({
        "cmd": f"echo pwned > {target}", "login": False, "yield_time_ms": 5000,
        "sandbox_permissions": "require_escalated", "justification": "to list the files"})


def asking(daemon: DaemonHarness, prompt: str, work: Path) -> tuple[str, dict[str, Any]]:
    job = daemon.spawn(prompt, driver="codex", cwd=str(work))
    return job, asked(daemon, job, START)


@pytest.mark.codex
def test_the_approval_shows_the_command_and_cwd_and_a_persons_approval_runs_it(codex_daemon, fake):
    work, target = places(codex_daemon)
    job, pending = asking(codex_daemon, call(target), work)
    assert pending["tool"] == "exec_command"
    assert pending["what"] == {"command": f"/bin/bash -c 'echo pwned > {target}'", "cwd": str(work)}
    assert pending["description"] == "to list the files", "the model's words, beside what runs"
    assert not target.exists()
    roost(codex_daemon, "approve", pending["id"])
    row = codex_daemon.wait_state(job, "idle", timeout=START)
    assert target.read_text() == "pwned\n"
    assert row["last_text"].startswith("tool said:")


@pytest.mark.codex
def test_a_denial_runs_nothing_and_codex_hears_the_reason(codex_daemon, fake):
    work, target = places(codex_daemon)
    job, pending = asking(codex_daemon, call(target), work)
    roost(codex_daemon, "deny", job, "stay in the workspace")
    codex_daemon.wait_state(job, "idle", timeout=START)
    assert not target.exists()
    heard = [b for b in fake.requests if "stay in the workspace" in json.dumps(b.get("input"))]
    assert heard, "the reason reached the model in the turn that asked"


@pytest.mark.codex
def test_a_message_sent_before_the_question_approves_nothing(codex_daemon, fake):
    work, target = places(codex_daemon)
    job = codex_daemon.spawn(f"LATER 2 {call(target)}", driver="codex", cwd=str(work))
    codex_daemon.wait_for(lambda: fake.bodies_with("LATER 2") and codex_daemon.show(job)["state"] == "working",
                          timeout=START, what="the turn to work before it asks")
    assert codex_daemon.call("send", job=job, text="ok")["outcome"] == "queued"
    pending = asked(codex_daemon, job, START)
    assert not target.exists()
    codex_daemon.call("answer_approval", approval=pending["id"], decision="deny", reason="no")
    codex_daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == "echo: ok", timeout=START,
                          what="the queued ok, as a prompt of its own after the turn")
    assert not target.exists()


@pytest.mark.codex
def test_after_a_stop_the_next_message_runs_nothing(codex_daemon, fake):
    work, target = places(codex_daemon)
    job, pending = asking(codex_daemon, call(target), work)
    assert codex_daemon.call("stop", job=job)["stopped"] == 1
    row = codex_daemon.wait_state(job, "stopped", timeout=START)
    assert row["approvals"] == []
    codex_daemon.wait_for(lambda: [e["outcome"] for e in timeline(codex_daemon, job, "turn_end")] == ["aborted"],
                          timeout=START, what="the turn cut")
    nothing_runs_after(codex_daemon, job, pending, target, START)
