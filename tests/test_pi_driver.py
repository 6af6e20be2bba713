"""The pi driver end to end: the real pi from npm, run by the real daemon, against tests/fakellm.py.

pi comes from the repository's package.json (``npm ci`` puts it in node_modules/.bin). Where node
or pi is missing these tests skip, saying so, unless ``CI`` is set: in CI a missing pi fails them.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from roost.client import ClientError
from roost.drivers.pi import EXTENSION, PiAdapter
from roost.protocol import ENTRY_MAX, MAX_FRAME, PROTOCOL_VERSION
from roost.worker_protocol import OVERSIZE_KEEP, Oversize

from conftest import DaemonHarness, assert_token_in_no_argv, environ_of, pid_alive, require_agent
from fakellm import FakeLLM, message_text, models_json
from sshd import free_port

REPO = Path(__file__).resolve().parent.parent
PI = REPO / "node_modules" / ".bin" / "pi"
INSTALL = "npm ci --no-audit --no-fund"
#: pi takes about 2 s to start; a turn against the fake model takes well under one.
START = 30.0


def _missing() -> str | None:
    if shutil.which("node") is None:
        return "node is not installed (pi runs on Node.js 20.6 or newer)"
    if not PI.exists():
        return f"pi is not installed: run `{INSTALL}` in the repository"
    return None


@pytest.fixture(scope="module")
def pi_bin() -> Path:
    require_agent("pi", _missing())
    return PI


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    server = FakeLLM().start()
    yield server
    server.stop()


def _toml(value: Any) -> str:
    return json.dumps(str(value))


@pytest.fixture
def pi_daemon(pi_bin: Path, fake: FakeLLM, daemon_factory: Callable[[str], DaemonHarness],
              tmp_path: Path) -> Callable[..., DaemonHarness]:
    """A daemon whose pi drivers run the installed pi against the fake model, in a private agent dir
    (models.json for the fake provider; pi's own provider retries off, so pi's auto-retry is what runs)."""
    agent = tmp_path / "pi-agent"
    agent.mkdir()
    closed = models_json(f"http://127.0.0.1:{free_port()}/v1")["providers"]["fake"]  # a port nothing listens on
    (agent / "models.json").write_text(json.dumps({"providers": {**models_json(fake.url)["providers"], "down": closed}}))
    (agent / "settings.json").write_text(json.dumps(
        {"retry": {"enabled": True, "maxRetries": 2, "baseDelayMs": 50, "provider": {"maxRetries": 0}}}))
    home = tmp_path / "pi-home"
    home.mkdir()

    def make(args: tuple[str, ...] = (), top: str = "") -> DaemonHarness:
        """``args`` go to the ``pi`` profile's command line; ``pi-noretry`` has ``retry = false``;
        ``pi-down``'s provider is a closed port; ``top``: top-level config keys before the tables."""
        profile = (f'command = {_toml(pi_bin)}\nprovider = "fake"\nmodel = "fake-model"\n'
                   f'agent_dir = {_toml(agent)}\nenv = {{ HOME = {_toml(home)} }}\n')
        down = profile.replace('provider = "fake"', 'provider = "down"')
        return daemon_factory(f"{top}[drivers.pi]\n{profile}args = {json.dumps(list(args))}\n\n"
                              f'[drivers.pi-noretry]\nkind = "pi"\n{profile}retry = false\n\n'
                              f'[drivers.pi-down]\nkind = "pi"\n{down}')

    return make


def timeline(daemon: DaemonHarness, job: str, kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in daemon.timeline(job) if e["kind"] == kind]


def assistant_stops(session: Path) -> list[str]:
    """How each answer in a pi session file ended (pi appends one entry per message)."""
    if not session.exists():
        return []
    entries = [json.loads(line) for line in session.read_text().splitlines()]
    return [e["message"].get("stopReason") for e in entries
            if e.get("type") == "message" and e["message"].get("role") == "assistant"]


def user_texts(body: dict[str, Any]) -> list[str]:
    return [message_text(m) for m in body["messages"] if m.get("role") == "user"]


@pytest.mark.pi
def test_a_prompt_turn_streams_text_usage_and_records_the_session(pi_daemon, fake, tmp_path):
    daemon = pi_daemon()
    job = daemon.spawn("hello pi", driver="pi")
    row = daemon.wait_state(job, "idle", timeout=START)
    assert row["last_text"] == "echo: hello pi"
    assert daemon.texts(job) == ["echo: hello pi"], "the answer is one text entry, not one per delta"
    assert len(fake.bodies_with("hello pi")) == 1
    assert row["session"] and Path(row["session"]).exists()
    assert Path(row["session"]).parent == daemon.paths.sessions_dir / "pi"
    row = daemon.wait_row(job, lambda r: r["usage"].get("context_window"), what="usage from pi")
    assert row["usage"]["context_window"] == 32000
    assert row["usage"]["input"] == 120 and row["usage"]["output"] == 8
    environ = dict(item.split("=", 1) for item in
                   Path(f"/proc/{row['pid']}/environ").read_text().split("\0") if "=" in item)
    assert environ["PI_OFFLINE"] == "1"
    assert environ["ROOST_JOB_ID"] == job and environ["ROOST_TOKEN"]
    assert environ["PI_CODING_AGENT_DIR"] == str(tmp_path / "pi-agent")
    assert environ["TMPDIR"] == str(daemon.paths.state_dir / "pi-tmp")


@pytest.mark.pi
def test_roost_spawn_makes_a_child_whose_report_comes_back_as_the_next_prompt(pi_daemon, fake):
    daemon = pi_daemon()
    task = json.dumps({"task": "report done the child finished its part", "title": "kid"})
    job = daemon.spawn(f"CALL roost_spawn {task}", driver="pi")
    kids = daemon.wait_for(lambda: daemon.children(job), timeout=START, what="a child of the pi job")
    assert [(k["parent"], k["title"], k["driver"]) for k in kids] == [(job, "kid", "builtin")]
    assert_token_in_no_argv(job, environ_of(daemon.show(job)["pid"])["ROOST_TOKEN"])  # pi's tools run inside pi
    kid = kids[0]["id"]
    daemon.wait_state(kid, "done")
    report = daemon.wait_for(lambda: fake.bodies_with(f'<roost-report child="{kid}"'), timeout=START,
                             what="the child's report to reach the model as the pi job's prompt")
    assert "the child finished its part" in user_texts(report[0])[-1]
    [tool] = [t for t in timeline(daemon, job, "tool") if t["name"] == "roost_spawn"]
    assert tool["error"] is False and kid in tool["result"]
    assert json.loads(task) == tool["args"]
    prompts = timeline(daemon, job, "reports")
    assert prompts and [r["child"] for r in prompts[0]["reports"]] == [kid]
    daemon.wait_for(lambda: any("echo: <roost-report" in t for t in daemon.texts(job)), timeout=START,
                    what="the pi job to take the report in")
    row = daemon.wait_state(job, "idle")
    assert "echo: <roost-report" not in row["last_text"], "a turn that only took in reports keeps the peek"


@pytest.mark.pi
def test_tools_report_list_and_refusals_reach_the_model(pi_daemon, fake):
    daemon = pi_daemon()
    job = daemon.spawn('CALL roost_send {"job": "nosuchjob", "text": "hi"}', driver="pi")
    daemon.wait_state(job, "idle", timeout=START)
    [refused] = timeline(daemon, job, "tool")
    assert refused["error"] is True and "no job with id 'nosuchjob'" in refused["result"]
    assert daemon.show(job)["last_text"].startswith("tool said: ") and "nosuchjob" in daemon.show(job)["last_text"]

    daemon.call("send", job=job, text="CALL roost_children {}")
    daemon.wait_row(job, lambda r: r["last_text"] == "tool said: no subagents", timeout=START)

    daemon.call("send", job=job, text='CALL roost_report {"status": "done", "text": "all finished"}')
    daemon.wait_state(job, "done", timeout=START)
    assert [e.get("report") for e in timeline(daemon, job, "turn_end")][-1] == "done"
    assert timeline(daemon, job, "report") == [{"status": "done", "text": "all finished"}]


@pytest.mark.pi
def test_stop_mid_turn_aborts_pi_and_keeps_its_worker(pi_daemon, fake):
    daemon = pi_daemon()
    job = daemon.spawn("SLOW", driver="pi")
    daemon.wait_for(lambda: fake.bodies_with("SLOW") and daemon.show(job)["state"] == "working", timeout=START,
                    what="pi streaming the slow answer")
    assert daemon.call("stop", job=job)["stopped"] == 1
    row = daemon.wait_state(job, "stopped")
    daemon.wait_for(lambda: assistant_stops(Path(row["session"]))[-1:] == ["aborted"],
                    what="pi to record its answer as aborted")
    assert row["worker_up"] and pid_alive(row["pid"])
    assert not any(e.get("outcome") in ("ok", "failed") for e in timeline(daemon, job, "turn_end"))


def _an_idle_pi_and_a_busy_one(daemon, fake) -> tuple[str, dict, str, int]:
    """An idle pi job (its row) and one streaming the fake server's slow answer (its pid)."""
    idle = daemon.spawn("remember the word egret", driver="pi")
    idle_row = daemon.wait_state(idle, "idle", timeout=START)
    busy = daemon.spawn("SLOW", driver="pi")
    daemon.wait_for(lambda: fake.bodies_with("SLOW") and daemon.show(busy)["state"] == "working", timeout=START,
                    what="pi streaming the slow answer")
    return idle, idle_row, busy, daemon.show(busy)["pid"]


@pytest.mark.pi
def test_pis_whose_shims_went_with_a_sigkilled_daemon_are_killed_and_their_jobs_failed_and_resumable(pi_daemon, fake):
    """pi is re-adopted across a restart like any worker (tests/test_readopt_agents.py); one whose shim
    is gone cannot be: its pi is killed, its turn failed, and a message resumes it from its session."""
    daemon = pi_daemon()
    idle, idle_row, busy, busy_pid = _an_idle_pi_and_a_busy_one(daemon, fake)
    shims = [json.loads((daemon.paths.state_dir / "workers" / f"{job}.json").read_text())["shim"]["pid"]
             for job in (idle, busy)]
    daemon.kill()
    for shim in shims:
        os.kill(shim, signal.SIGKILL)
    daemon.start()
    daemon.wait_for(lambda: not pid_alive(busy_pid) and not pid_alive(idle_row["pid"]), what="the old pis to be gone")
    rows = {r["id"]: r for r in daemon.rows()}
    assert rows[busy]["state"] == "failed" and "daemon restarted" in rows[busy]["reason"]
    assert rows[idle]["state"] == "idle" and not rows[idle]["worker_up"], "nothing resumes by itself"
    assert daemon.call("send", job=idle, text="which bird was it?")["outcome"] == "resumed"
    daemon.wait_row(idle, lambda r: r["state"] == "idle" and r["last_text"] == "echo: which bird was it?",
                    timeout=START)


@pytest.mark.pi
def test_a_full_stop_of_the_daemon_closes_pi_and_a_message_resumes_it_from_its_session(pi_daemon, fake):
    """``roost daemon stop --all`` closes pi, mid-turn or idle (a plain stop leaves it running for the
    next daemon: tests/test_readopt_agents.py): its turn failed "the daemon shut down during its turn",
    the idle one reaped and resumed from its session."""
    daemon = pi_daemon()
    idle, idle_row, busy, busy_pid = _an_idle_pi_and_a_busy_one(daemon, fake)
    daemon.stop()
    assert not pid_alive(busy_pid) and not pid_alive(idle_row["pid"])
    daemon.start()
    rows = {r["id"]: r for r in daemon.rows()}
    assert rows[busy]["state"] == "failed" and "daemon shut down" in rows[busy]["reason"]
    assert rows[idle]["state"] == "idle" and not rows[idle]["worker_up"] and rows[idle]["reaped"]
    assert daemon.call("send", job=idle, text="which bird was it?")["outcome"] == "resumed"
    daemon.wait_row(idle, lambda r: r["state"] == "idle" and r["last_text"] == "echo: which bird was it?",
                    timeout=START)


@pytest.mark.pi
def test_sigkill_between_turns_fails_then_resume_sends_the_history_again(pi_daemon, fake):
    daemon = pi_daemon()
    job = daemon.spawn("remember the word heron", driver="pi")
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
    [resumed] = fake.bodies_with("what was the word?")
    assert user_texts(resumed) == ["remember the word heron", "what was the word?"]
    assert any(m.get("role") == "assistant" and "echo: remember the word heron" in message_text(m)
               for m in resumed["messages"])


@pytest.mark.pi
def test_a_retried_request_does_not_end_the_turn_early(pi_daemon, fake):
    daemon = pi_daemon()
    job = daemon.spawn("FLAKY retry-on", driver="pi")
    row = daemon.wait_state(job, "idle", "failed", timeout=START)
    assert row["state"] == "idle" and row["last_text"] == "echo: FLAKY retry-on"
    assert len(fake.bodies_with("FLAKY retry-on")) == 2, "one 503, then pi's retry"
    ends = timeline(daemon, job, "turn_end")
    assert [e["outcome"] for e in ends] == ["ok"]
    assert [s["state"] for s in timeline(daemon, job, "state") if s["state"] != "starting"] == ["working", "idle"]


@pytest.mark.pi
def test_retry_false_and_a_request_pi_cannot_retry_fail_the_turn_with_pis_error(pi_daemon, fake):
    daemon = pi_daemon()
    noretry = daemon.spawn("FLAKY retry-off", driver="pi-noretry")
    bad = daemon.spawn("BAD400", driver="pi")
    assert daemon.wait_state(noretry, "idle", "failed", timeout=START)["state"] == "failed"
    assert daemon.wait_state(bad, "idle", "failed", timeout=START)["state"] == "failed"
    [ended] = timeline(daemon, noretry, "turn_end")
    assert ended["outcome"] == "failed" and "503 fake overloaded" in ended["error"]
    assert len(fake.bodies_with("FLAKY retry-off")) == 1, "retry = false: pi's retry was cut short"
    [ended] = timeline(daemon, bad, "turn_end")
    assert ended == {"outcome": "failed", "error": "400 fake bad request"}


@pytest.mark.pi
def test_a_model_other_than_the_configured_one_fails_the_turn_clearly(pi_daemon, fake):
    daemon = pi_daemon(args=("--model", "other-model"))
    job = daemon.spawn("never reaches the model", driver="pi")
    daemon.wait_state(job, "failed", timeout=START)
    [ended] = timeline(daemon, job, "turn_end")
    assert "pi runs the model fake/other-model, but the config asks for fake/fake-model" in ended["error"]
    assert not fake.bodies_with("never reaches the model")


@pytest.mark.pi
def test_a_pi_that_exits_at_start_fails_the_job_with_pis_words(pi_daemon):
    daemon = pi_daemon(args=("--provider", "nosuchprovider"))
    job = daemon.spawn("hello", driver="pi")
    daemon.wait_state(job, "failed", timeout=START)
    [error] = [e["message"] for e in timeline(daemon, job, "error")]
    assert error.startswith("worker exited with code 1") and 'Unknown provider "nosuchprovider"' in error


@pytest.mark.pi
def test_resume_fails_clearly_when_the_working_directory_is_gone(pi_daemon, tmp_path):
    daemon = pi_daemon()
    work = tmp_path / "work"
    work.mkdir()
    job = daemon.spawn("hello from a doomed dir", driver="pi", cwd=str(work))
    daemon.wait_state(job, "idle", timeout=START)
    assert daemon.call("close", job=job)["closed"]
    daemon.wait_row(job, lambda r: r["reaped"] and not r["worker_up"])
    work.rmdir()
    with pytest.raises(ClientError) as info:
        daemon.call("send", job=job, text="are you there?")
    assert f"working directory {work} no longer exists" in info.value.message
    assert daemon.show(job)["state"] == "failed"


@pytest.mark.parametrize("command", ["/nonexistent/bin/pi", "roost-no-such-pi-program"])
def test_a_missing_pi_is_refused_at_spawn_with_how_to_install_it(daemon_factory, command):
    daemon = daemon_factory(f"[drivers.pi]\ncommand = {_toml(command)}\n")
    with pytest.raises(ClientError) as info:
        daemon.spawn("hello", driver="pi")
    assert info.value.code == "driver"
    assert "pi is not installed" in info.value.message
    assert "npm install -g @mariozechner/pi-coding-agent" in info.value.message
    assert daemon.call("list")["total"] == 0


def test_the_extension_speaks_this_protocol_version():
    assert f"const PROTOCOL_VERSION = {PROTOCOL_VERSION};" in EXTENSION.read_text()


# -- the adapter alone: what no well-behaved pi run shows -------------------------------------------------------
def bound_adapter() -> tuple[PiAdapter, list[dict[str, Any]], list[bytes]]:
    adapter = PiAdapter(provider="fake", model="fake-model", retry=True)
    emitted: list[dict[str, Any]] = []
    written: list[bytes] = []
    adapter.bind(emitted.append, written.append)
    return adapter, emitted, written


def test_a_steer_is_refused_without_reaching_pi():
    adapter, emitted, _ = bound_adapter()
    assert adapter.encode({"type": "steer", "id": "q1", "message": "a report"}) == b""
    assert [(e["id"], e["success"]) for e in emitted] == [("q1", False)]


def test_an_answer_without_an_id_is_reported_not_waited_for():
    adapter, _, _ = bound_adapter()
    adapter.encode({"type": "get_state", "id": "s1"})
    [event] = adapter.decode(b'{"type":"response","command":"parse","success":false,"error":"Failed to parse command"}')
    assert event["type"] == "malformed" and "Failed to parse command" in event["line"]
    [answer] = adapter.decode(b'{"id":"s1","type":"response","command":"get_state","success":true,'
                              b'"data":{"model":{"provider":"fake","id":"fake-model"},"sessionFile":"/s.jsonl"}}')
    assert answer["id"] == "s1" and answer["data"]["session"] == "/s.jsonl"


def test_a_dialog_from_an_extension_is_cancelled_so_pi_never_blocks():
    adapter, _, written = bound_adapter()
    adapter.decode(b'{"type":"extension_ui_request","id":"u1","method":"confirm","title":"Sure?"}')
    adapter.decode(b'{"type":"extension_ui_request","id":"u2","method":"notify","message":"fyi"}')
    assert [json.loads(w) for w in written] == [{"type": "extension_ui_response", "id": "u1", "cancelled": True}]


def oversize(event: dict[str, Any]) -> Oversize:
    """What the daemon's reader hands the adapter for a pi line over the frame limit."""
    line = json.dumps(event, separators=(",", ":")).encode()  # as pi's JSON.stringify writes it
    assert len(line) > MAX_FRAME
    return Oversize(len(line), line[:OVERSIZE_KEEP], line[-OVERSIZE_KEEP:])


BIG = "z" * (MAX_FRAME + 10)


@pytest.mark.parametrize("stop, ended", [("stop", {"outcome": "ok"}), ("aborted", {"outcome": "aborted"})])
def test_an_agent_end_over_the_limit_still_ends_the_turn(stop, ended):
    adapter, _, _ = bound_adapter()
    adapter.encode({"type": "prompt", "id": "p1", "message": "read the big file", "run": 4})
    adapter.decode(b'{"type":"agent_start"}')
    line = oversize({"type": "agent_end", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "read the big file"}]},
        {"role": "toolResult", "content": [{"type": "text", "text": BIG}]},
        {"role": "assistant", "content": [{"type": "text", "text": "done"}], "stopReason": stop, "timestamp": 1}]})
    note, end = adapter.oversize(line)
    assert note == {"type": "note", "message": f"skipped pi's agent_end event, a line of {line.size} bytes, "
                                               f"over the {MAX_FRAME}-byte frame limit"}
    assert end == {"type": "turn_end", "run": 4, **ended}


async def test_an_agent_end_over_the_limit_with_an_error_waits_for_pis_retry_as_any_other():
    adapter, emitted, _ = bound_adapter()
    adapter.settle = 0.01
    adapter.encode({"type": "prompt", "id": "p1", "message": "hi", "run": 1})
    adapter.decode(b'{"type":"agent_start"}')
    [note] = adapter.oversize(oversize({"type": "agent_end", "messages": [
        {"role": "assistant", "content": [{"type": "text", "text": BIG}], "stopReason": "error",
         "errorMessage": "503 \"overloaded\"", "timestamp": 1}]}))
    assert note["type"] == "note"
    await asyncio.sleep(0.05)
    assert emitted == [{"type": "turn_end", "run": 1, "outcome": "failed", "error": '503 "overloaded"'}]


def test_a_tool_result_over_the_limit_is_a_tool_event_that_says_so():
    adapter, _, _ = bound_adapter()
    adapter.decode(b'{"type":"tool_execution_start","toolCallId":"c1","toolName":"read","args":{"path":"big.log"}}')
    line = oversize({"type": "tool_execution_end", "toolCallId": "c1", "toolName": "read",
                     "result": {"content": [{"type": "text", "text": BIG}]}, "isError": True})
    _, tool = adapter.oversize(line)
    assert tool == {"type": "tool", "name": "read", "args": {"path": "big.log"}, "error": True,
                    "result": f"(a result too big to show: the event was {line.size} bytes)"}


def test_a_line_roost_ignores_is_skipped_without_a_word():
    adapter, _, _ = bound_adapter()
    assert adapter.oversize(oversize({"type": "message_update", "message": {"content": BIG}})) == []


def test_a_long_answer_is_several_text_events():
    adapter, _, _ = bound_adapter()
    answer = "w" * (3 * ENTRY_MAX)
    events = adapter.decode(json.dumps({"type": "message_end", "message": {
        "role": "assistant", "content": [{"type": "text", "text": answer}]}}).encode())
    assert [len(e["text"]) for e in events] == [ENTRY_MAX] * 3


@pytest.mark.pi
def test_a_turn_whose_pi_lines_are_over_the_limit_still_ends(pi_daemon, fake):
    daemon = pi_daemon()
    word = "w" * 600_000  # echoed: pi's agent_end carries the prompt and the answer, over 1 MiB
    job = daemon.spawn(word, driver="pi")
    row = daemon.wait_state(job, "idle", "failed", timeout=START)
    assert row["state"] == "idle" and row["last_text"] == ("echo: " + word)[-4000:]


# -- limits and an unreachable provider (docs/agents.md#limits-retries-and-an-unreachable-provider) --
def events_noted(daemon: DaemonHarness, job: str) -> list[str]:
    """Worker events the daemon did not take (it notes each by kind): none, limited and retrying included."""
    return [e["message"] for e in timeline(daemon, job, "note") if e["message"].startswith("unknown worker event")]


def limits_said(daemon: DaemonHarness, job: str) -> list[bool]:
    """The job's ``limited`` entries: whether the agent was retrying, each."""
    return [bool(e["retrying"]) for e in timeline(daemon, job, "limited")]


@pytest.mark.pi
def test_a_429_is_retried_by_pi_and_said_as_a_limit(pi_daemon, fake):
    daemon = pi_daemon()
    job = daemon.spawn("LIMITED_ONCE 2 pi-429", driver="pi")
    row = daemon.wait_state(job, "idle", "failed", timeout=START)
    assert row["state"] == "idle" and row["last_text"] == "echo: LIMITED_ONCE 2 pi-429", row["reason"]
    assert len(fake.bodies_with("pi-429")) == 2, "one 429, then pi's retry"
    assert events_noted(daemon, job) == []
    assert limits_said(daemon, job) == [True], "said as a limit pi retries: the job stayed working"


@pytest.mark.pi
def test_a_429_pi_does_not_retry_leaves_the_job_rate_limited_and_it_goes_again_at_the_reset(pi_daemon, fake):
    """pi with ``retry = false`` ends its turn at the 429 ("Please try again in 2s."): the job is
    ``rate_limited`` until then, not failed, and the daemon sends the bounced message again at the reset."""
    daemon = pi_daemon()
    job = daemon.spawn("LIMITED_ONCE 2 pi-reset", driver="pi-noretry")
    limited = daemon.wait_state(job, "rate_limited", "idle", "failed", timeout=START)
    assert limited["state"] == "rate_limited", limited["reason"]
    [(bounced, seconds)] = fake.limits[-1:]
    assert seconds == 2 and "429" in limited["limited_words"], limited["limited_words"]
    assert limited["limited_until"] is not None and 0 < limited["limited_until"] - time.time() <= 2.5
    assert limits_said(daemon, job) == [False]
    row = daemon.wait_state(job, "idle", "failed", timeout=START)
    resumed = time.monotonic()
    assert row["state"] == "idle" and row["last_text"] == "echo: LIMITED_ONCE 2 pi-reset", row["reason"]
    assert resumed - bounced >= 2.0, "it went again at the reset, not before"
    assert len(fake.bodies_with("pi-reset")) == 2 and row["limited_until"] is None
    assert [e["state"] for e in timeline(daemon, job, "state")][-3:] == ["rate_limited", "working", "idle"]


@pytest.mark.pi
def test_a_silent_server_flags_pis_job_stalled_and_max_turn_time_fails_its_turn(pi_daemon, fake):
    """The fake model answers only after 30 s (``LATER``): pi says nothing meanwhile. With
    ``stall_after = 2`` the row is flagged ``stalled`` (still ``working``), and ``max_turn_time = 6``
    fails the turn saying so, the daemon's abort cutting it (docs/agents.md#stalls)."""
    daemon = pi_daemon(top="stall_after = 2\nmax_turn_time = 6\n")
    job = daemon.spawn("LATER 30 silent", driver="pi")
    started = time.monotonic()
    stalled = daemon.wait_row(job, lambda r: r["stall"] == "stalled" or r["state"] in ("failed", "idle"), timeout=START)
    assert stalled["state"] == "working" and stalled["stall"] == "stalled", stalled
    assert stalled["stall_words"].startswith("stalled: nothing from the agent for 2s"), stalled["stall_words"]
    row = daemon.wait_state(job, "failed", "idle", timeout=START)
    took = time.monotonic() - started
    assert row["reason"].startswith("the turn has run 6s, over max_turn_time = 6s: roost aborted it"), row["reason"]
    assert 6 <= took < 25, f"failed {took:.1f}s in, not at max_turn_time"
    assert row["stall"] == "" and "the worker aborted its turn by itself" not in str(daemon.timeline(job))
    # The state is the deadline's; the turn's end is written when pi answers the abort, which may come after.
    [end] = daemon.wait_for(lambda: timeline(daemon, job, "turn_end")[-1:], timeout=START, what="the turn's end")
    assert end["note"] == "over max_turn_time" and end["by"] == "daemon"


@pytest.mark.pi
def test_an_unreachable_provider_fails_pis_turn_within_its_bound(pi_daemon, fake):
    """With the test settings (2 retries 50 ms apart, the provider's own retries off): measured about
    1 s; pi's defaults (3 retries 2, 4, 8 s apart, the SDK's own 2 quiet ones each) take about 20 s."""
    daemon = pi_daemon()
    job = daemon.spawn("hello nobody", driver="pi-down")
    daemon.wait_state(job, "working", timeout=START)
    started = time.monotonic()
    row = daemon.wait_state(job, "failed", "idle", timeout=60)
    assert row["state"] == "failed" and time.monotonic() - started < 15.0, row
    assert row["reason"] == "Connection error.", row["reason"]
    assert events_noted(daemon, job) == [] and len(timeline(daemon, job, "retrying")) == 2  # each retry said
