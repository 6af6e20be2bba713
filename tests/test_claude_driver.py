"""The Claude Code driver end to end: the real ``claude`` from npm, run by the real daemon, against
tests/fake_anthropic.py. Like the pi tests, they skip where Claude Code is missing unless ``CI`` is set."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import pytest

from roost.client import ClientError

from conftest import DaemonHarness, assert_token_in_no_argv, environ_of, pid_alive, require_agent
from fake_anthropic import FakeAnthropic, prompt_blocks
from sshd import free_port

REPO = Path(__file__).resolve().parent.parent
CLAUDE = REPO / "node_modules" / ".bin" / "claude"
START = 30.0


@pytest.fixture(scope="module")
def claude_bin() -> Path:
    missing = None if CLAUDE.exists() else \
        "Claude Code is not installed: run `npm ci --no-audit --no-fund` in the repository"
    require_agent("Claude Code", missing)
    return CLAUDE


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic().start()
    yield server
    server.stop()


def claude_profile(claude: Path, fake: FakeAnthropic, home: Path) -> str:
    """The ``[drivers.claude]`` that runs the installed Claude Code against the fake model. Claude Code
    retries a failed model call once (by default 10 times, from 0.6 s apart doubling). Its HOME is
    ``home``: its Bash tool sources ``~/.bashrc`` in a login shell, and one killed with the test's
    daemon can leave a lock of the machine's shell setup behind (pyenv's rehash) that hangs the next."""
    home.mkdir(exist_ok=True)
    env = {"ANTHROPIC_BASE_URL": fake.base_url, "ANTHROPIC_API_KEY": "fake-key", "CLAUDE_CODE_MAX_RETRIES": "1",
           "HOME": str(home)}
    return (f'[drivers.claude]\nkind = "claude"\ncommand = {json.dumps(str(claude))}\nmodel = "fake-model"\n'
            f'env = {{ {", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())} }}\n')


@pytest.fixture
def claude_daemon(claude_bin: Path, fake: FakeAnthropic, daemon_factory: Callable[[str], DaemonHarness],
                  tmp_path: Path) -> Callable[..., DaemonHarness]:
    """A daemon with :func:`claude_profile` (and ``extra`` config after it)."""

    def make(extra: str = "") -> DaemonHarness:
        return daemon_factory(claude_profile(claude_bin, fake, tmp_path / "claude-home") + extra)

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


@pytest.mark.claude
def test_stop_mid_turn_interrupts_claude_and_keeps_its_worker(claude_daemon, fake):
    daemon = claude_daemon()
    job = daemon.spawn("SLOW", driver="claude")
    daemon.wait_for(lambda: fake.bodies_with("SLOW") and daemon.show(job)["state"] == "working", timeout=START,
                    what="Claude Code streaming the slow answer")
    assert daemon.call("stop", job=job)["stopped"] == 1
    row = daemon.wait_state(job, "stopped")
    daemon.wait_for(lambda: [e["outcome"] for e in timeline(daemon, job, "turn_end")] == ["aborted"],
                    what="the turn to end aborted")
    assert row["worker_up"] and pid_alive(row["pid"])
    daemon.call("send", job=job, text="after the stop")
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == "echo: after the stop", timeout=START)


@pytest.mark.claude
def test_sigkill_between_turns_fails_then_resume_sends_the_history_again(claude_daemon, fake):
    daemon = claude_daemon()
    job = daemon.spawn("remember the word heron", driver="claude")
    row = daemon.wait_state(job, "idle", timeout=START)
    session = row["session"]
    os.kill(row["pid"], signal.SIGKILL)
    killed = time.monotonic()
    daemon.wait_state(job, "failed", timeout=5)
    assert time.monotonic() - killed < 2.0
    assert any("killed by SIGKILL" in e["message"] for e in timeline(daemon, job, "error"))

    assert daemon.call("send", job=job, text="what was the word?")["outcome"] == "resumed"
    row = daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == "echo: what was the word?",
                          timeout=START)
    assert row["session"] == session
    [resumed] = [b for b in fake.bodies_with("what was the word?") if b.get("tools")]
    assert prompts(resumed) == ["remember the word heron", "what was the word?"]


@pytest.mark.claude
def test_a_crash_mid_turn_fails_the_job_with_its_exit(claude_daemon, fake):
    daemon = claude_daemon()
    job = daemon.spawn("SLOW", driver="claude")
    daemon.wait_for(lambda: fake.bodies_with("SLOW") and daemon.show(job)["state"] == "working", timeout=START,
                    what="Claude Code streaming the slow answer")
    os.kill(daemon.show(job)["pid"], signal.SIGKILL)
    row = daemon.wait_state(job, "failed", timeout=5)
    assert "killed by SIGKILL" in row["reason"]


@pytest.mark.claude
def test_roost_spawn_through_mcp_makes_a_child_whose_report_comes_back(claude_daemon, fake):
    daemon = claude_daemon()
    task = json.dumps({"task": "report done the child finished its part", "title": "kid"})
    job = daemon.spawn(f"CALL mcp__roost__roost_spawn {task}", driver="claude")
    kids = daemon.wait_for(lambda: daemon.children(job), timeout=START, what="a child of the Claude Code job")
    assert [(k["parent"], k["title"], k["driver"]) for k in kids] == [(job, "kid", "builtin")]
    # The tool server runs as the job, and its token is on no command line (not in --mcp-config).
    assert_token_in_no_argv(job, environ_of(daemon.show(job)["pid"])["ROOST_TOKEN"], tools="roost.programs.mcp_server")
    kid = kids[0]["id"]
    daemon.wait_state(kid, "done")
    daemon.wait_for(lambda: fake.bodies_with(f'<roost-report child="{kid}"'), timeout=START,
                    what="the child's report to reach the model as the Claude Code job's prompt")
    [tool] = [t for t in timeline(daemon, job, "tool") if t["name"] == "mcp__roost__roost_spawn"]
    assert tool["error"] is False and kid in tool["result"]
    assert tool["args"] == json.loads(task)
    daemon.wait_state(job, "idle", timeout=START)


@pytest.mark.claude
def test_a_refusal_of_the_daemon_reaches_the_model_as_a_tool_error(claude_daemon, fake):
    daemon = claude_daemon()
    job = daemon.spawn('CALL mcp__roost__roost_send {"job": "nosuchjob", "text": "hi"}', driver="claude")
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"].startswith("tool said:"), timeout=START)
    [refused] = timeline(daemon, job, "tool")
    assert refused["error"] is True and "no job with id 'nosuchjob'" in refused["result"]


@pytest.mark.claude
def test_a_task_subagent_appears_as_subagent_entries(claude_daemon, fake):
    daemon = claude_daemon()
    call = json.dumps({"description": "count the files", "prompt": "count them", "subagent_type": "general-purpose"})
    job = daemon.spawn(f"CALL Task {call}", driver="claude")
    daemon.wait_state(job, "idle", timeout=START)
    entries = timeline(daemon, job, "subagent")
    assert [(e["title"], e["state"]) for e in entries][0] == ("count the files", "working")
    assert entries[-1]["state"] == "done" and "echo: count them" in entries[-1]["text"]
    assert len({e["id"] for e in entries}) == 1


def test_a_missing_claude_is_refused_at_spawn_with_how_to_install_it(daemon_factory):
    daemon = daemon_factory('[drivers.claude]\nkind = "claude"\ncommand = "roost-no-such-claude"\n')
    with pytest.raises(ClientError) as info:
        daemon.spawn("hello", driver="claude")
    assert info.value.code == "driver"
    assert "npm install -g @anthropic-ai/claude-code" in info.value.message


@pytest.mark.claude
def test_a_background_subagent_ending_after_the_turn_gives_a_turn_of_claudes_own(claude_daemon, fake):
    daemon = claude_daemon()
    call = json.dumps({"description": "slow count", "prompt": "LATER 3 counted 7 files",
                       "subagent_type": "general-purpose"})
    charged = dict(fake.charged)
    job = daemon.spawn(f"CALL Task {call}", driver="claude")
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"].startswith("tool said: Async agent"),
                    timeout=START, what="the parent's turn to end while its subagent still works")
    own = "echo: subagent said: echo: LATER 3 counted 7 files"
    row = daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == own, timeout=START,
                          what="Claude Code's own turn taking in the subagent's result")
    entries = daemon.timeline(job)
    order = [(e["kind"], e["data"].get("state")) for e in entries if e["kind"] in ("state", "subagent")]
    assert order == [("state", "starting"), ("state", "working"), ("subagent", "working"), ("state", "idle"),
                     ("subagent", "working"), ("subagent", "done"), ("state", "working"), ("state", "idle")]
    [noted] = [e["data"] for e in entries if e["kind"] == "state" and e["data"].get("note")]
    assert noted == {"state": "working", "note": "a turn of the agent's own"}
    assert daemon.texts(job)[-1] == own
    assert [e["data"]["outcome"] for e in entries if e["kind"] == "turn_end"] == ["ok", "ok"]
    assert not [e for e in entries if e["kind"] == "note"], "no turn end was ignored"
    # the own turn's call is counted, and so is the subagent's: two calls of the parent, one of its
    # subagent, then the own turn's; each as the server charged it
    assert row["usage"]["output"] == fake.charged["output"] - charged["output"] == 4 * 8
    assert row["usage"]["input"] == fake.charged["input"] - charged["input"]


def main_bodies(fake: FakeAnthropic, prompt: str) -> list[dict[str, Any]]:
    return [b for b in fake.bodies_with(prompt) if b.get("tools")]


@pytest.mark.claude
def test_a_transient_error_is_retried_by_claude_and_the_turn_ends_ok(claude_daemon, fake):
    daemon = claude_daemon()
    job = daemon.spawn("FLAKY claude-once", driver="claude")
    row = daemon.wait_state(job, "idle", "failed", timeout=START)
    assert row["state"] == "idle" and row["last_text"] == "echo: FLAKY claude-once", row["reason"]
    assert len(main_bodies(fake, "FLAKY claude-once")) == 2, "one 503, then Claude Code's one retry"
    [retry] = [e["message"] for e in timeline(daemon, job, "note") if e["message"].startswith("Claude Code:")]
    assert retry.startswith("Claude Code: the model call failed (503 server_error); retry 1 of 1 in ")


@pytest.mark.claude
@pytest.mark.parametrize("prompt, reason", [
    ("DOWN", "Claude Code's turn failed after 1 retry: API Error: 500 fake server down. "),
    ("BAD400", "Claude Code's turn failed: API Error: 400 fake bad request"),
])
def test_a_persistent_error_fails_the_turn_saying_why_and_the_job_takes_the_next_message(
        claude_daemon, fake, prompt, reason):
    daemon = claude_daemon()
    job = daemon.spawn(prompt, driver="claude")
    row = daemon.wait_state(job, "failed", "idle", timeout=START)
    assert row["state"] == "failed" and row["reason"].startswith(reason), row["reason"]
    [end] = timeline(daemon, job, "turn_end")
    assert end == {"outcome": "failed", "error": row["reason"]}
    assert row["worker_up"], "the model failed, not Claude Code: its worker stays"
    assert daemon.call("send", job=job, text="and now?")["outcome"] == "delivered"
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == "echo: and now?", timeout=START)


@pytest.mark.claude
def test_stop_interrupts_a_turn_of_claudes_own_and_the_job_takes_a_message_after(claude_daemon, fake):
    daemon = claude_daemon()
    call = json.dumps({"description": "slow count", "prompt": "LATER 1 then SLOW", "subagent_type": "general-purpose"})
    job = daemon.spawn(f"CALL Task {call}", driver="claude")
    daemon.wait_for(lambda: [e["data"]["state"] for e in daemon.timeline(job) if e["kind"] == "state"][-2:]
                    == ["idle", "working"] and fake.bodies_with("SLOW subagent said"), timeout=START,
                    what="Claude Code's own turn streaming its slow answer")
    assert daemon.call("stop", job=job)["stopped"] == 1
    row = daemon.wait_state(job, "stopped")
    daemon.wait_for(lambda: [e["outcome"] for e in timeline(daemon, job, "turn_end")] == ["ok", "aborted"],
                    what="the own turn to end aborted")
    assert row["worker_up"] and pid_alive(row["pid"])
    daemon.call("send", job=job, text="after the stop")
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == "echo: after the stop", timeout=START)


@pytest.mark.claude
def test_a_fork_resumes_with_fork_session_into_a_session_of_its_own(claude_daemon, fake):
    daemon = claude_daemon()
    source = daemon.spawn("remember the word ibis", driver="claude")
    first = daemon.wait_state(source, "idle", timeout=START)
    forked = daemon.call("fork", job=source)["id"]
    assert daemon.show(forked)["fork_of"] == first["session"]
    daemon.call("send", job=forked, text="which bird?")
    row = daemon.wait_row(forked, lambda r: r["state"] == "idle" and r["last_text"] == "echo: which bird?",
                          timeout=START)
    argv = Path(f"/proc/{row['pid']}/cmdline").read_bytes().decode().split("\0")
    at = argv.index("--resume")
    assert argv[at:at + 5] == ["--resume", first["session"], "--fork-session", "--session-id", row["session"]]
    assert row["session"] != first["session"]
    [body] = [b for b in fake.bodies_with("which bird?") if b.get("tools")]
    assert prompts(body) == ["remember the word ibis", "which bird?"], "the fork has the conversation so far"
    config = daemon.paths.state_dir / "claude-config"
    assert list(config.glob(f"projects/*/{row['session']}.jsonl")), "the fork's session is a file of its own"
    source_file = next(config.glob(f"projects/*/{first['session']}.jsonl"))
    assert "which bird?" not in source_file.read_text(), "the source's session is untouched"
    daemon.call("close", job=forked)
    daemon.wait_row(forked, lambda r: r["reaped"] and not r["worker_up"])
    daemon.call("send", job=forked, text="and again?")
    again = daemon.wait_row(forked, lambda r: r["state"] == "idle" and r["last_text"] == "echo: and again?",
                            timeout=START)
    argv = Path(f"/proc/{again['pid']}/cmdline").read_bytes().decode().split("\0")
    assert "--fork-session" not in argv and argv[argv.index("--resume") + 1] == row["session"]


@pytest.mark.claude
def test_a_fork_with_a_worktree_of_its_own_resumes_the_source_session_from_there(claude_daemon, fake, tmp_path):
    from tests.gitrepo import make_repo

    repo = make_repo(tmp_path / "repo", {"README": "hello\n"})
    daemon = claude_daemon()
    source = daemon.spawn("remember the word stilt", driver="claude", cwd=str(repo), worktree=True)
    first = daemon.wait_state(source, "idle", timeout=START)
    forked = daemon.call("fork", job=source, worktree=True, prompt="which bird now?")["id"]
    row = daemon.wait_row(forked, lambda r: r["state"] in ("idle", "failed") and r["last_text"] != "", timeout=START)
    assert row["state"] == "idle" and row["cwd"] != first["cwd"], timeline(daemon, forked, "error")
    [body] = [b for b in fake.bodies_with("which bird now?") if b.get("tools")]
    assert prompts(body) == ["remember the word stilt", "which bird now?"]


# -- limits and an unreachable provider (docs/agents.md#limits-retries-and-an-unreachable-provider) --
def events_noted(daemon: DaemonHarness, job: str) -> list[str]:
    """Worker events the daemon did not take (it notes each by kind): none, limited and retrying included."""
    return [e["message"] for e in timeline(daemon, job, "note") if e["message"].startswith("unknown worker event")]


def limits_said(daemon: DaemonHarness, job: str) -> list[bool]:
    """The job's ``limited`` entries: whether the agent was retrying, each."""
    return [bool(e["retrying"]) for e in timeline(daemon, job, "limited")]


@pytest.mark.claude
def test_a_429_is_retried_by_claude_after_its_retry_after_and_said_as_a_limit(claude_daemon, fake):
    daemon = claude_daemon()
    job = daemon.spawn("LIMITED_ONCE 2 claude-429", driver="claude")
    row = daemon.wait_state(job, "idle", "failed", timeout=START)
    assert row["state"] == "idle" and row["last_text"] == "echo: LIMITED_ONCE 2 claude-429", row["reason"]
    bodies = main_bodies(fake, "claude-429")
    assert len(bodies) == 2, "one 429, then Claude Code's retry"
    assert events_noted(daemon, job) == []
    assert limits_said(daemon, job) == [True], "a limit Claude Code retries: the job stayed working"
    [retry] = [e["message"] for e in timeline(daemon, job, "note") if e["message"].startswith("Claude Code:")]
    delay = float(retry.rsplit(" in ", 1)[1].removesuffix(" s"))
    assert retry.startswith("Claude Code: the model call failed (429 rate_limit)") and delay >= 2.0, \
        "Claude Code waited the server's retry-after"


@pytest.mark.claude
def test_a_usage_limit_ends_the_turn_at_once_and_the_job_is_rate_limited_with_claudes_words(claude_daemon, fake):
    daemon = claude_daemon()
    job = daemon.spawn("USAGE_LIMIT 3600", driver="claude")
    row = daemon.wait_state(job, "rate_limited", "failed", "idle", timeout=START)
    assert row["state"] == "rate_limited", row["reason"]
    assert "API Error: Request rejected (429) · Claude AI usage limit reached" in row["limited_words"]
    assert row["limited_until"] is not None  # no reset in its words: the daemon's back-off
    assert len(main_bodies(fake, "USAGE_LIMIT 3600")) == 1, "a plan's limit is not retried"
    assert events_noted(daemon, job) == [] and False in limits_said(daemon, job)


@pytest.mark.claude
def test_an_unreachable_provider_fails_claudes_turn_within_its_bound(claude_bin, daemon_factory, tmp_path):
    """With ``CLAUDE_CODE_MAX_RETRIES = 1``: one retry 0.6 s later, then the turn fails (measured:
    about 1 s; the 10 retries of the default take about 185 s). 20 s leaves room for a loaded machine."""
    closed = SimpleNamespace(base_url=f"http://127.0.0.1:{free_port()}")  # a port nothing listens on
    daemon = daemon_factory(claude_profile(claude_bin, closed, tmp_path / "claude-home"))  # type: ignore[arg-type]
    job = daemon.spawn("hello nobody", driver="claude")
    daemon.wait_state(job, "working", timeout=START)
    started = time.monotonic()
    row = daemon.wait_state(job, "failed", "idle", timeout=60)
    assert row["state"] == "failed" and time.monotonic() - started < 20.0, row
    assert row["reason"].startswith("Claude Code's turn failed after 1 retry: API Error: Connection refused"), \
        row["reason"]
    assert events_noted(daemon, job) == [] and len(timeline(daemon, job, "retrying")) == 1


def _running(pattern: str) -> bool:
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0


@pytest.mark.claude
def test_a_bash_command_in_the_background_is_said_as_one_not_a_subagent_and_a_stop_ends_it(claude_daemon, fake):
    daemon = claude_daemon()
    command = "sleep 987652"
    call = json.dumps({"command": command, "run_in_background": True, "description": "wait a long while"})
    job = daemon.spawn(f"CALL Bash {call}", driver="claude")
    row = daemon.wait_state(job, "idle", timeout=START)
    assert daemon.wait_for(lambda: _running(command), what="the command running in the background")
    assert timeline(daemon, job, "subagent") == []  # not one of the agent's subagents
    assert not row.get("provider_subagents") and not row.get("provider_running")
    said = [n["message"] for n in timeline(daemon, job, "note")]
    assert f"a command runs in the background of this job: {command}" in said
    daemon.call("stop", job=job)
    daemon.wait_state(job, "stopped", timeout=START)
    daemon.wait_for(lambda: not _running(command), timeout=START, what="the stop to end the background command")
    ended = f"the command in the background of this job was stopped: {command}"
    daemon.wait_for(lambda: any(n["message"].startswith(ended) for n in timeline(daemon, job, "note")),
                    timeout=START, what="the note that it was stopped")
