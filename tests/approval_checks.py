"""Checks the Claude Code and Codex approval tests share: the one approval a job waits on, and that
nothing released it later (tests/test_claude_approvals.py, tests/test_codex_approvals.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from roost.client import ClientError

from conftest import DaemonHarness


def roost(daemon: DaemonHarness, *args: str) -> str:
    """What the ``roost`` CLI, run as a person against the daemon, says (it must succeed)."""
    done = subprocess.run([sys.executable, "-m", "roost.cli", *args], env=daemon.env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout.strip()


def asked(daemon: DaemonHarness, job: str, timeout: float,
          ended: tuple[str, ...] = ("idle", "failed")) -> dict[str, Any]:
    """The one approval the job waits on, once it is asked (a job that is in a state of ``ended`` first
    fails the test, saying how: its turn ended without asking)."""
    row = daemon.wait_row(job, lambda r: r["approvals"] or r["state"] in ended, timeout=timeout,
                          what="an approval asked")
    assert row["state"] == "waiting", (row["state"], row["last_text"])
    [pending] = row["approvals"]
    return pending


def nothing_runs_after(daemon: DaemonHarness, job: str, pending: dict[str, Any], target: Path,
                       timeout: float) -> None:
    """The approval was settled without running (a stop, a denial): the next message is a turn of its
    own, a late answer to the approval is refused, and the file its command would write stays absent."""
    notes = [e["data"]["message"] for e in daemon.timeline(job) if e["kind"] == "note"]
    assert not [n for n in notes if "did not take" in n], "the agent took the denial: it was still pending there"
    daemon.call("send", job=job, text="ok")
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == "echo: ok", timeout=timeout,
                    what="the next message, a turn of its own")
    assert not target.exists()
    with pytest.raises(ClientError):
        daemon.call("answer_approval", approval=pending["id"], decision="once")
    assert not target.exists()
