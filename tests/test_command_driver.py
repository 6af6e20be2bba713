"""The command driver with a real daemon and tests/agent_script.py as the command-line agent (its
output in bulk and as it comes: tests/test_command_output.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from roost.client import ClientError

from conftest import DaemonHarness, assert_token_in_no_argv, environ_of, pid_alive

SCRIPT = Path(__file__).resolve().parent / "agent_script.py"
CONFIG = f"""
[drivers.script]
kind = "command"
command = [{json.dumps(sys.executable)}, {json.dumps(str(SCRIPT))}, "--session", "{{session}}", "{{prompt}}"]
resume_args = ["--resume", "{{session}}"]

[drivers.script-stdin]
kind = "command"
command = [{json.dumps(sys.executable)}, {json.dumps(str(SCRIPT))}, "--session", "{{session}}"]
prompt_via = "stdin"
"""


@pytest.fixture
def daemon(daemon_factory: Callable[[str], DaemonHarness]) -> DaemonHarness:
    return daemon_factory(CONFIG)


def turn_ends(daemon: DaemonHarness, job: str) -> list[dict[str, Any]]:
    return [e["data"] for e in daemon.timeline(job) if e["kind"] == "turn_end"]


def session_id(text: str) -> str:
    return text.splitlines()[0].rsplit(" ", 1)[1]


def test_a_turn_streams_the_commands_output(daemon):
    job = daemon.spawn("hello world", driver="script")
    row = daemon.wait_state(job, "idle")
    [text] = daemon.texts(job)
    first, prompt = text.splitlines()
    assert first.startswith("fresh session ") and prompt == "prompt: hello world"
    assert row["last_text"] == text
    assert turn_ends(daemon, job) == [{"outcome": "ok", "report": None}]
    session = Path(row["session"])
    assert session.parent == daemon.paths.sessions_dir / "command"
    entries = [json.loads(line) for line in session.read_text().splitlines()]
    assert entries[0] == {"type": "session", "id": session_id(text)}
    assert {"role": "user", "text": "hello world"} in entries


def test_the_prompt_can_go_on_stdin(daemon):
    job = daemon.spawn("from stdin", driver="script-stdin")
    daemon.wait_state(job, "idle")
    assert "prompt: from stdin" in daemon.texts(job)[0]


def test_a_non_zero_exit_fails_the_turn_with_the_code_and_stderr(daemon):
    job = daemon.spawn("fail now", driver="script")
    daemon.wait_state(job, "failed")
    [ended] = turn_ends(daemon, job)
    assert ended["outcome"] == "failed"
    assert ended["error"] == f"{Path(sys.executable).name} exited with code 3: agent_script: failing as asked"
    assert daemon.show(job)["worker_up"], "a failed turn is not a dead worker"


def test_stop_mid_turn_kills_the_command(daemon):
    # Unsandboxed: the pid the command says is this machine's (in a sandbox it is its own namespace's).
    job = daemon.spawn("sleep 30", driver="script", isolation="none")
    text = daemon.wait_for(lambda: "sleeping as pid" in "\n".join(daemon.texts(job)), what="the command to sleep")
    pid = int(next(t for t in daemon.texts(job) if "sleeping as pid" in t).rsplit(" ", 1)[1])
    assert text and pid_alive(pid)
    assert_token_in_no_argv(job, environ_of(daemon.show(job)["pid"])["ROOST_TOKEN"])  # the worker's, its command's
    assert environ_of(pid)["ROOST_TOKEN"] == environ_of(daemon.show(job)["pid"])["ROOST_TOKEN"]
    daemon.call("stop", job=job)
    row = daemon.wait_state(job, "stopped")
    daemon.wait_for(lambda: not pid_alive(pid), what="the command to be killed")
    daemon.wait_for(lambda: [e["outcome"] for e in turn_ends(daemon, job)] == ["aborted"],
                    what="the worker's own end of the aborted turn")
    assert row["worker_up"] and pid_alive(row["pid"])
    assert "woke up" not in "\n".join(daemon.texts(job))


def test_later_turns_and_a_resumed_worker_pass_resume_args_with_the_same_session(daemon):
    job = daemon.spawn("first", driver="script")
    daemon.wait_state(job, "idle")
    sid = session_id(daemon.texts(job)[0])
    daemon.call("send", job=job, text="second")
    daemon.wait_row(job, lambda r: "prompt: second" in r["last_text"] and r["state"] == "idle")
    assert daemon.texts(job)[-1].splitlines()[0] == f"resumed session {sid}"
    daemon.call("close", job=job)
    daemon.wait_row(job, lambda r: r["reaped"] and not r["worker_up"])
    assert daemon.call("send", job=job, text="third")["outcome"] == "resumed"
    daemon.wait_row(job, lambda r: "prompt: third" in r["last_text"] and r["state"] == "idle")
    assert daemon.texts(job)[-1].splitlines()[0] == f"resumed session {sid}"


def test_the_agent_uses_the_roost_cli_as_its_job(daemon):
    job = daemon.spawn('roost spawn "say hi from the child"', driver="script")
    kids = daemon.wait_for(lambda: daemon.children(job), what="a child spawned through the CLI")
    assert [(k["parent"], k["title"]) for k in kids] == [(job, "say hi from the child")]
    daemon.wait_state(job, "idle")
    daemon.call("send", job=job, text='roost report done "all done via the cli"')
    daemon.wait_state(job, "done")
    assert [e["data"] for e in daemon.timeline(job) if e["kind"] == "report"] == \
        [{"status": "done", "text": "all done via the cli"}]


def test_a_missing_command_is_refused_at_spawn(daemon_factory):
    daemon = daemon_factory('[drivers.ghost]\nkind = "command"\ncommand = ["roost-no-such-agent", "{prompt}"]\n')
    with pytest.raises(ClientError) as info:
        daemon.spawn("hello", driver="ghost")
    assert info.value.code == "driver"
    assert "'roost-no-such-agent' was not found on PATH" in info.value.message
    assert daemon.call("list")["total"] == 0
