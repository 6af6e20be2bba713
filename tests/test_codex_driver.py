"""The Codex driver end to end: the real ``codex`` from npm (``codex app-server``), run by the real daemon,
against tests/fake_openai.py. Like the pi tests, they skip where Codex is missing unless ``CI`` is set."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import pytest

from roost.client import ClientError

from conftest import DaemonHarness, assert_token_in_no_argv, environ_of, pid_alive, require_agent
from fake_openai import FakeOpenAI, prompts
from sshd import free_port

REPO = Path(__file__).resolve().parent.parent
CODEX = REPO / "node_modules" / ".bin" / "codex"
START = 30.0


@pytest.fixture(scope="module")
def codex_bin() -> Path:
    missing = None if CODEX.exists() else \
        "Codex is not installed: run `npm ci --no-audit --no-fund` in the repository"
    require_agent("Codex", missing)
    return CODEX


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    yield server
    server.stop()


#: The provider settings of the test profile: Codex retries a failed model call once, at once.
FAST_RETRIES = ", request_max_retries = 0, stream_max_retries = 1"


def codex_profile(codex: Path, fake: FakeOpenAI, retries: str = FAST_RETRIES) -> str:
    """The ``[drivers.codex]`` that runs the installed Codex against the fake model, in roost's own
    CODEX_HOME (the provider comes in as ``-c`` overrides, so nothing is written there by the test).
    Codex retries a failed model call once, at once (by default 4 quiet retries of the request, then
    5 of the stream, with backoff: 24 s and 30 requests for a server that always answers 500)."""
    provider = (f'{{ name = "fake", base_url = {json.dumps(fake.url)}, wire_api = "responses", '
                f'env_key = "FAKE_OPENAI_KEY"{retries} }}')
    args = ["-c", f"model_providers.fake={provider}", "-c", 'model_provider="fake"']
    return (f'[drivers.codex]\nkind = "codex"\ncommand = {json.dumps(str(codex))}\nmodel = "fake-model"\n'
            f'args = {json.dumps(args)}\nenv = {{ FAKE_OPENAI_KEY = "x" }}\n')


@pytest.fixture
def codex_daemon(codex_bin: Path, fake: FakeOpenAI,
                 daemon_factory: Callable[[str], DaemonHarness]) -> DaemonHarness:
    """A daemon with :func:`codex_profile`."""
    return daemon_factory(codex_profile(codex_bin, fake))


def timeline(daemon: DaemonHarness, job: str, kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in daemon.timeline(job) if e["kind"] == kind]


def streaming(daemon: DaemonHarness, fake: FakeOpenAI, job: str) -> None:
    daemon.wait_for(lambda: fake.bodies_with("SLOW") and daemon.show(job)["state"] == "working", timeout=START,
                    what="Codex streaming the slow answer")


@pytest.mark.codex
def test_a_prompt_turn_streams_text_usage_and_records_the_thread(codex_daemon, fake):
    job = codex_daemon.spawn("hello codex", driver="codex")
    row = codex_daemon.wait_state(job, "idle", "failed", timeout=START)
    assert row["state"] == "idle", timeline(codex_daemon, job, "turn_end")
    assert codex_daemon.texts(job) == ["echo: hello codex"]
    assert row["usage"]["input"] == 120 and row["usage"]["output"] == 8
    assert row["session"]
    home = codex_daemon.paths.state_dir / "codex-home"
    assert list(home.glob(f"sessions/**/*{row['session']}.jsonl")), "the thread is in roost's own CODEX_HOME"


@pytest.mark.codex
def test_stop_mid_turn_interrupts_codex_and_keeps_its_worker(codex_daemon, fake):
    job = codex_daemon.spawn("SLOW", driver="codex")
    streaming(codex_daemon, fake, job)
    assert codex_daemon.call("stop", job=job)["stopped"] == 1
    row = codex_daemon.wait_state(job, "stopped")
    codex_daemon.wait_for(lambda: [e["outcome"] for e in timeline(codex_daemon, job, "turn_end")] == ["aborted"],
                          what="the turn to end aborted")
    assert row["worker_up"] and pid_alive(row["pid"])
    codex_daemon.call("send", job=job, text="after the stop")
    codex_daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == "echo: after the stop",
                          timeout=START)


@pytest.mark.codex
def test_a_crash_mid_turn_fails_the_job_with_its_exit(codex_daemon, fake):
    job = codex_daemon.spawn("SLOW", driver="codex")
    streaming(codex_daemon, fake, job)
    os.kill(codex_daemon.show(job)["pid"], signal.SIGKILL)
    row = codex_daemon.wait_state(job, "failed", timeout=5)
    assert "killed by SIGKILL" in row["reason"]


@pytest.mark.codex
def test_resume_after_close_continues_the_thread_with_its_history(codex_daemon, fake):
    job = codex_daemon.spawn("remember the word heron", driver="codex")
    session = codex_daemon.wait_state(job, "idle", timeout=START)["session"]
    codex_daemon.call("close", job=job)
    codex_daemon.wait_row(job, lambda r: not r["worker_up"], what="the worker to go")
    assert codex_daemon.call("send", job=job, text="what was the word?")["outcome"] == "resumed"
    row = codex_daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == "echo: what was the word?",
                                timeout=START)
    assert row["session"] == session
    [resumed] = fake.bodies_with("what was the word?")
    assert prompts(resumed) == ["remember the word heron", "what was the word?"]


@pytest.mark.codex
def test_roost_spawn_through_mcp_makes_a_child_whose_report_comes_back(codex_daemon, fake):
    task = json.dumps({"task": "report done the child finished its part", "title": "kid"})
    job = codex_daemon.spawn(f"CALL mcp__roost__roost_spawn {task}", driver="codex")
    kids = codex_daemon.wait_for(lambda: codex_daemon.children(job), timeout=START, what="a child of the Codex job")
    assert [(k["parent"], k["title"], k["driver"]) for k in kids] == [(job, "kid", "builtin")]
    token = environ_of(codex_daemon.show(job)["pid"])["ROOST_TOKEN"]
    assert_token_in_no_argv(job, token, tools="roost.programs.mcp_server")  # the tool server is the job's
    kid = kids[0]["id"]
    codex_daemon.wait_state(kid, "done")
    codex_daemon.wait_for(lambda: fake.bodies_with(f'<roost-report child="{kid}"'), timeout=START,
                          what="the child's report to reach the model as the Codex job's prompt")
    [tool] = [t for t in timeline(codex_daemon, job, "tool") if t["name"] == "mcp__roost__roost_spawn"]
    assert tool["error"] is False and kid in tool["result"]
    assert tool["args"] == json.loads(task)
    codex_daemon.wait_state(job, "idle", timeout=START)


def test_a_missing_codex_is_refused_at_spawn_with_how_to_install_it(daemon_factory):
    daemon = daemon_factory('[drivers.codex]\nkind = "codex"\ncommand = "roost-no-such-codex"\n')
    with pytest.raises(ClientError) as info:
        daemon.spawn("hello", driver="codex")
    assert info.value.code == "driver"
    assert "npm install -g @openai/codex" in info.value.message


@pytest.mark.codex
def test_a_transient_error_is_retried_by_codex_and_the_turn_ends_ok(codex_daemon, fake):
    job = codex_daemon.spawn("FLAKY codex-once", driver="codex")
    row = codex_daemon.wait_state(job, "idle", "failed", timeout=START)
    assert row["state"] == "idle" and row["last_text"] == "echo: FLAKY codex-once", row["reason"]
    assert len(fake.bodies_with("FLAKY codex-once")) == 2, "one 503, then Codex's one retry"
    [retry] = [e["message"] for e in timeline(codex_daemon, job, "note") if e["message"].startswith("Codex:")]
    assert retry.startswith("Codex: Reconnecting... 1/1 (retrying: unexpected status 503")
    assert "fake overloaded, try again" in retry


@pytest.mark.codex
@pytest.mark.parametrize("prompt, requests, reason", [
    ("DOWN", 2, "Codex's turn failed after 1 retry: We’re currently experiencing high demand, which may cause "
                "temporary errors. (internalServerError)"),
    ("FAILED the fake model broke", 2, "Codex's turn failed after 1 retry: stream disconnected before completion: "
                                       "the fake model broke"),
    ("BAD400", 1, "Codex's turn failed: fake bad request"),
])
def test_a_persistent_error_fails_the_turn_saying_why_and_the_job_takes_the_next_message(
        codex_daemon, fake, prompt, requests, reason):
    job = codex_daemon.spawn(prompt, driver="codex")
    row = codex_daemon.wait_state(job, "failed", "idle", timeout=START)
    assert row["state"] == "failed" and row["reason"] == reason
    assert len(fake.bodies_with(prompt)) == requests
    [end] = timeline(codex_daemon, job, "turn_end")
    assert end == {"outcome": "failed", "error": reason}
    assert row["worker_up"], "the model failed, not Codex: its worker stays"
    assert codex_daemon.call("send", job=job, text="and now?")["outcome"] == "delivered"
    codex_daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == "echo: and now?", timeout=START)


@pytest.mark.codex
def test_an_approval_too_big_to_show_is_declined_saying_why_and_the_turn_goes_on(codex_daemon, fake):
    work = codex_daemon.home / "work"
    work.mkdir(parents=True)
    call = json.dumps({"cmd": "echo <<x*1200000>> > big.txt", "login": False, "yield_time_ms": 5000,
                       "sandbox_permissions": "require_escalated", "justification": "to write big.txt"})
    job = codex_daemon.spawn(f"CALL exec_command {call}", driver="codex", cwd=str(work))
    row = codex_daemon.wait_state(job, "idle", "waiting", "failed", timeout=START)
    assert row["state"] == "idle", row
    notes = [n["message"] for n in timeline(codex_daemon, job, "note")]
    assert any("item/commandExecution/requestApproval in a request of" in n and "roost declined it" in n
               for n in notes), notes
    assert not (work / "big.txt").exists()
    assert row["last_text"].startswith("tool said:")


@pytest.mark.codex
def test_a_fork_opens_with_thread_fork_into_a_thread_of_its_own(codex_daemon, fake):
    source = codex_daemon.spawn("remember the word ibis", driver="codex")
    first = codex_daemon.wait_state(source, "idle", timeout=START)
    forked = codex_daemon.call("fork", job=source)["id"]
    codex_daemon.call("send", job=forked, text="which bird?")
    row = codex_daemon.wait_row(forked, lambda r: r["state"] == "idle" and r["last_text"] == "echo: which bird?",
                                timeout=START)
    assert row["session"] and row["session"] != first["session"], "Codex made a thread of the fork's own"
    [body] = fake.bodies_with("which bird?")
    assert prompts(body) == ["remember the word ibis", "which bird?"], "the fork has the conversation so far"
    codex_daemon.call("send", job=source, text="still here?")
    codex_daemon.wait_row(source, lambda r: r["last_text"] == "echo: still here?", timeout=START)
    [later] = fake.bodies_with("still here?")
    assert prompts(later) == ["remember the word ibis", "still here?"], "the source never saw the fork's turn"


# -- limits and an unreachable provider (docs/agents.md#limits-retries-and-an-unreachable-provider) --
def events_noted(daemon: DaemonHarness, job: str) -> list[str]:
    """Worker events the daemon did not take (it notes each by kind): none, limited and retrying included."""
    return [e["message"] for e in timeline(daemon, job, "note") if e["message"].startswith("unknown worker event")]


def limits_said(daemon: DaemonHarness, job: str) -> list[bool]:
    """The job's ``limited`` entries: whether the agent was retrying, each."""
    return [bool(e["retrying"]) for e in timeline(daemon, job, "limited")]


@pytest.mark.codex
def test_a_429_is_retried_by_codex_after_its_retry_after_and_said_as_a_limit(codex_daemon, fake):
    job = codex_daemon.spawn("LIMITED_ONCE 2 codex-429", driver="codex")
    row = codex_daemon.wait_state(job, "idle", "failed", timeout=START)
    assert row["state"] == "idle" and row["last_text"] == "echo: LIMITED_ONCE 2 codex-429", row["reason"]
    answered = time.monotonic()
    [bounced] = [sent for sent, seconds in fake.limits[-1:] if seconds == 2]
    assert len(fake.bodies_with("codex-429")) == 2, "one 429, then Codex's retry"
    assert events_noted(codex_daemon, job) == []
    assert limits_said(codex_daemon, job) == [True], "a limit Codex retries: the job stayed working"
    [retry] = [e["message"] for e in timeline(codex_daemon, job, "note") if e["message"].startswith("Codex:")]
    assert "429 Too Many Requests" in retry
    assert answered - bounced >= 2.0, "Codex waited the server's retry-after before it called again"


@pytest.mark.codex
def test_a_usage_limit_leaves_codexs_job_rate_limited_until_the_time_it_says(codex_daemon, fake):
    job = codex_daemon.spawn("USAGE_LIMIT 3600", driver="codex")
    row = codex_daemon.wait_state(job, "rate_limited", "failed", "idle", timeout=START)
    assert row["state"] == "rate_limited", row["reason"]
    assert "usage limit" in row["limited_words"] and "try again at" in row["limited_words"], row["limited_words"]
    assert 3500 <= row["limited_until"] - time.time() <= 3660, "the reset Codex said (to the minute)"
    assert len(fake.bodies_with("USAGE_LIMIT 3600")) == 1, "a plan's limit is not retried"
    assert events_noted(codex_daemon, job) == [] and limits_said(codex_daemon, job) == [False]


@pytest.mark.codex
@pytest.mark.parametrize("retries, bound, reconnects", [
    (FAST_RETRIES, 15.0, 1),  # measured: 0.4 s
    ("", 60.0, 5),  # Codex's own provider defaults: measured 25 s (5 reconnects, backoff)
])
def test_an_unreachable_provider_fails_codexs_turn_within_its_bound(codex_bin, daemon_factory, retries, bound,
                                                                    reconnects):
    """Without roost's ``features.unbounded_connection_retries=false`` Codex 0.169 reconnects for ever
    ("Reconnecting... waiting for network", 5 s doubling to 60 s), whatever its retry settings."""
    closed = SimpleNamespace(url=f"http://127.0.0.1:{free_port()}/v1")  # a port nothing listens on
    daemon = daemon_factory(codex_profile(codex_bin, closed, retries))  # type: ignore[arg-type]
    job = daemon.spawn("hello nobody", driver="codex")
    daemon.wait_state(job, "working", timeout=START)
    started = time.monotonic()
    row = daemon.wait_state(job, "failed", "idle", timeout=bound + 30)
    assert row["state"] == "failed" and time.monotonic() - started < bound, row
    assert row["reason"] == (f"Codex's turn failed after {reconnects} retr{'y' if reconnects == 1 else 'ies'}: "
                             "Connection failed: error sending request (httpConnectionFailed)"), row["reason"]
    assert events_noted(daemon, job) == [] and len(timeline(daemon, job, "retrying")) == reconnects
