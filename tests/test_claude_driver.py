"""The Claude Code driver end to end: the real ``claude`` from npm, run by the real daemon, against
tests/fake_anthropic.py. Like the pi tests, they skip where Claude Code is missing unless ``CI`` is set."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from roost.client import ClientError

from conftest import DaemonHarness, pid_alive
from fake_anthropic import FakeAnthropic, prompt_blocks

REPO = Path(__file__).resolve().parent.parent
CLAUDE = REPO / "node_modules" / ".bin" / "claude"
START = 30.0


@pytest.fixture(scope="module")
def claude_bin() -> Path:
    if not CLAUDE.exists():
        reason = "Claude Code is not installed: run `npm ci --no-audit --no-fund` in the repository"
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set, so the Claude Code tests must run)")
        pytest.skip(reason)
    return CLAUDE


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


@pytest.fixture
def claude_daemon(claude_bin: Path, fake: FakeAnthropic,
                  daemon_factory: Callable[[str], DaemonHarness]) -> Callable[..., DaemonHarness]:
    """A daemon whose ``claude`` driver runs the installed Claude Code against the fake model."""

    def make(extra: str = "") -> DaemonHarness:
        env = {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": "fake-key"}
        return daemon_factory(f'[drivers.claude]\nkind = "claude"\ncommand = {json.dumps(str(claude_bin))}\n'
                              f'model = "fake-model"\nenv = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())} }}\n'
                              f"{extra}")

    return make


def timeline(daemon: DaemonHarness, job: str, kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in daemon.timeline(job) if e["kind"] == kind]


def prompts(body: dict[str, Any]) -> list[str]:
    return [t for m in body["messages"] if m.get("role") == "user" for t in prompt_blocks(m)]


@pytest.mark.claude
def test_a_prompt_turn_streams_text_usage_and_records_the_session(claude_daemon, fake):
    daemon = claude_daemon()
    job = daemon.spawn("hello claude", driver="claude")
    row = daemon.wait_state(job, "idle", "failed", timeout=START)
    assert row["state"] == "idle", timeline(daemon, job, "turn_end")
    assert row["last_text"] == "echo: hello claude"
    assert daemon.texts(job) == ["echo: hello claude"]
    assert row["session"]
    assert row["usage"]["input"] == 120 and row["usage"]["output"] == 8
    assert row["usage"]["context_window"] > 0
    config = daemon.paths.state_dir / "claude-config"
    assert list(config.glob(f"projects/*/{row['session']}.jsonl")), "the session is in roost's own config dir"
