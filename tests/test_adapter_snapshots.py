"""An adapter's snapshot (roost/drivers/base.py ``Adapter.snapshot``/``restore``): what pi's and Claude
Code's adapters know, written down after a line and taken back by a new adapter, goes on decoding the
rest of the stream exactly as the adapter that never stopped; and it stays within its bound."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any, Callable

import pytest

from roost.drivers.base import SNAPSHOT_ENTRIES, SNAPSHOT_MAX, SNAPSHOT_VALUE, Adapter
from roost.drivers.claude_stream import ClaudeAdapter
from roost.drivers.pi import PiAdapter
from roost.drivers.usage import ClaudeSpend

from test_pi_driver import pi_bin  # noqa: F401  (a fixture)


def line(frame: dict[str, Any]) -> bytes:
    return json.dumps(frame).encode()


PI_USAGE = {"input": 100, "output": 8, "cost": {"total": 0.001}}


def pi_message(text: str, n: int) -> dict[str, Any]:
    return {"type": "message_end", "message": {"role": "assistant", "content": [{"type": "text", "text": text}],
                                               "usage": PI_USAGE, "provider": "fake", "model": "fake-model",
                                               "timestamp": 1000 + n, "responseId": f"r{n}"}}


#: A pi turn: the prompt's answer, a model call that calls a tool, the tool, the answer, its end, the stats.
PI_LINES = [line(f) for f in (
    {"type": "response", "id": "p1", "command": "prompt", "success": True},
    {"type": "agent_start"},
    pi_message("I will look", 1),
    {"type": "tool_execution_start", "toolCallId": "c1", "toolName": "bash", "args": {"command": "ls"}},
    {"type": "message_update", "delta": "ignored"},
    {"type": "tool_execution_end", "toolCallId": "c1", "toolName": "bash", "isError": False,
     "result": {"content": [{"type": "text", "text": "a b c"}]}},
    pi_message("found a, b and c", 2),
    {"type": "agent_end", "messages": [{"role": "assistant", "stopReason": "stop"}]},
    {"type": "response", "id": "roost-stats", "command": "get_session_stats", "success": True,
     "data": {"contextUsage": {"tokens": 216, "contextWindow": 32000}}},
)]


def claude_usage(total: int) -> dict[str, Any]:
    return {"fake-model": {"inputTokens": total, "outputTokens": total // 10, "costUSD": total / 1e5,
                           "contextWindow": 200000}}


CLAUDE_LINES = [line(f) for f in (
    {"type": "system", "subtype": "init", "session_id": "s1"},
    {"type": "assistant", "message": {"content": [{"type": "text", "text": "looking"},
                                                  {"type": "tool_use", "id": "t1", "name": "Grep",
                                                   "input": {"pattern": "x"}}],
                                      "usage": {"input_tokens": 50, "output_tokens": 5}}},
    {"type": "system", "subtype": "task_started", "tool_use_id": "t2", "task_id": "k2", "description": "helper",
     "prompt": "help me"},
    {"type": "assistant", "parent_tool_use_id": "t2", "message": {"content": [{"type": "text", "text": "helping"}]}},
    {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": "3 hits"}]}},
    {"type": "system", "subtype": "task_notification", "tool_use_id": "t2", "status": "completed",
     "summary": "helped"},
    {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 3, "retry_delay_ms": 500,
     "error_status": 500, "error": "boom"},
    {"type": "assistant", "message": {"content": [{"type": "text", "text": "done: 3 hits"}]}},
    {"type": "result", "subtype": "success", "is_error": False, "result": "done: 3 hits", "session_id": "s1",
     "uuid": "u1", "modelUsage": claude_usage(300)},
)]


def new_pi() -> PiAdapter:
    return PiAdapter(provider="fake", model="fake-model", retry=True, settle=0.01)


def new_claude() -> ClaudeAdapter:
    return ClaudeAdapter(session="s1", spend=ClaudeSpend({}))


def started(make: Callable[[], Adapter], kind: str) -> tuple[Adapter, list[dict[str, Any]]]:
    """An adapter bound to a list of what it emits, its prompt (run 1) taken."""
    adapter, emitted = make(), []
    adapter.bind(emitted.append, lambda data: None)
    if kind == "claude":  # ready: its get_state answered
        adapter.encode({"type": "get_state", "id": "g1"})
        answer = {"subtype": "success", "request_id": "roost-init"}
        adapter.decode(line({"type": "control_response", "response": answer}))
    adapter.encode({"type": "prompt", "id": "p1", "run": 1, "message": "go"})
    return adapter, emitted


def decoded(adapter: Adapter, emitted: list[dict[str, Any]], lines: list[bytes]) -> list[list[dict[str, Any]]]:
    """What each line gave (with what the adapter emitted meanwhile), the limits' times left out."""
    out = []
    for data in lines:
        emitted.clear()
        events = [*emitted, *adapter.decode(data)]
        out.append([{k: v for k, v in e.items() if k not in ("until", "at")} for e in events])
    return out


@pytest.mark.parametrize("kind", ["pi", "claude"])
def test_restore_of_a_snapshot_after_any_line_decodes_the_rest_as_if_nothing_happened(kind: str) -> None:
    make, lines = {"pi": (new_pi, PI_LINES), "claude": (new_claude, CLAUDE_LINES)}[kind]
    whole, emitted = started(make, kind)
    expected = decoded(whole, emitted, lines)
    assert any(e["type"] == "turn_end" and e["outcome"] == "ok" for step in expected for e in step)
    for cut in range(len(lines) + 1):
        before, emitted = started(make, kind)
        decoded(before, emitted, lines[:cut])
        state = json.loads(json.dumps(before.snapshot()))  # as the record keeps it
        after, emitted = make(), []
        ended = any(e["type"] == "turn_end" for step in expected[:cut] for e in step)
        after.restore(state, run=None if ended else 1)  # the record's turn: none once its end is committed
        after.bind(emitted.append, lambda data: None)
        assert decoded(after, emitted, lines[cut:]) == expected[cut:], f"restored after line {cut}"
        assert after.snapshot() == whole.snapshot()


@pytest.mark.parametrize("kind", ["pi", "claude"])
def test_a_prompt_sent_after_the_last_snapshot_is_the_turn_restored(kind: str) -> None:
    """The daemon committed the turn, wrote its prompt, and went before a line of it was committed:
    the snapshot knows no turn; the record's run is the turn the rest of the stream ends."""
    make, lines = {"pi": (new_pi, PI_LINES), "claude": (new_claude, CLAUDE_LINES)}[kind]
    idle = make()
    idle.bind(lambda event: None, lambda data: None)
    after, emitted = make(), []
    after.restore(json.loads(json.dumps(idle.snapshot())), run=1)
    after.bind(emitted.append, lambda data: None)
    ends = [e for step in decoded(after, emitted, lines) for e in step if e["type"] == "turn_end"]
    assert [(e["run"], e["outcome"]) for e in ends] == [(1, "ok")]


async def test_pis_error_waiting_to_settle_is_settled_by_the_restored_adapter() -> None:
    """pi's turn ended in an error that may still be retried (its settle timer ran in the old daemon):
    the restored adapter settles it on its own timer, once."""
    before, _ = started(new_pi, "pi")
    before.decode(line({"type": "agent_start"}))
    before.decode(line({"type": "agent_end", "messages": [{"role": "assistant", "stopReason": "error",
                                                           "errorMessage": "overloaded"}]}))
    state = json.loads(json.dumps(before.snapshot()))
    before.bind(lambda event: None, lambda data: None)
    before._cancel_timer()  # the old daemon is gone
    after = new_pi()
    after.restore(state)
    settled = asyncio.Event()
    emitted: list[dict[str, Any]] = []
    after.bind(lambda event: (emitted.append(event), settled.set()), lambda data: None)
    await asyncio.wait_for(settled.wait(), 5)
    assert [(e["type"], e["run"], e["outcome"], e["error"]) for e in emitted] == [
        ("turn_end", 1, "failed", "overloaded")]


def test_claudes_restored_adapter_answers_get_state_itself_with_its_turn() -> None:
    before, _ = started(new_claude, "claude")
    before.decode(CLAUDE_LINES[0])
    after, emitted = new_claude(), []
    after.restore(json.loads(json.dumps(before.snapshot())))
    after.bind(emitted.append, lambda data: None)
    assert after.encode({"type": "get_state", "id": "g1"}) == b""
    assert emitted == [{"type": "response", "id": "g1", "command": "get_state", "success": True,
                        "data": {"session": "s1", "busy": True}}]


def test_snapshots_stay_within_their_bound_keeping_values_at_it_and_noting_those_past_it() -> None:
    """Tool calls in flight with huge arguments: each value is kept up to SNAPSHOT_VALUE bytes of JSON
    and named by its size past it; only the newest SNAPSHOT_ENTRIES are kept."""
    at = "x" * (SNAPSHOT_VALUE - 2)  # its JSON, with the quotes, is exactly SNAPSHOT_VALUE bytes
    pi, _ = started(new_pi, "pi")
    claude, _ = started(new_claude, "claude")
    for n in range(200):
        args = at if n % 2 == 0 else at + "y"
        pi.decode(line({"type": "tool_execution_start", "toolCallId": f"c{n}", "args": args}))
        claude.decode(line({"type": "assistant", "message": {"content": [
            {"type": "tool_use", "id": f"t{n}", "name": "Write", "input": args}]}}))
        claude.decode(line({"type": "system", "subtype": "task_started", "tool_use_id": f"s{n}", "task_id": f"k{n}",
                            "description": "d" * 500, "is_backgrounded": True}))
    for state in (pi.snapshot(), claude.snapshot()):
        assert len(json.dumps(state)) <= SNAPSHOT_MAX
    kept_args = pi.snapshot()["tool_args"]
    assert list(kept_args) == [f"c{n}" for n in range(200 - SNAPSHOT_ENTRIES, 200)]
    assert kept_args["c198"] == at, "a value exactly at the bound is kept whole"
    assert kept_args["c199"] == f"({SNAPSHOT_VALUE + 1} bytes, too big to keep across the daemon's restart)"
    tools = claude.snapshot()["tools"]
    assert len(tools) == SNAPSHOT_ENTRIES and tools["t198"] == ["Write", at]
    assert "too big" in tools["t199"][1]
    # A restored tool whose arguments were too big still ends as a tool event, its arguments noted.
    after = new_claude()
    after.restore(json.loads(json.dumps(claude.snapshot())))
    after.bind(lambda event: None, lambda data: None)
    [tool] = after.decode(line({"type": "user", "message": {"content": [
        {"type": "tool_result", "tool_use_id": "t199", "content": "written"}]}}))
    assert tool["name"] == "Write" and "too big" in tool["args"] and tool["result"] == "written"


@pytest.mark.pi
def test_a_snapshot_that_cannot_be_read_back_fails_the_adoption_saying_so(tmp_path, pi_bin) -> None:  # noqa: F811
    """A record changed by hand: the adoption is refused with a DriverError that says why (the engine
    then kills the old worker and fails the job, roost/daemon/engine/adopt.py), not a handler's crash."""
    from roost.config.parse import parse_config
    from roost.daemon.processes.launch import adopt_factory
    from roost.drivers.base import DriverError
    from roost.models import Job
    from roost.paths import resolve

    config = parse_config(f'[drivers.pi]\ncommand = {json.dumps(str(pi_bin))}\n', tmp_path / "roost.toml")
    adopt = adopt_factory(resolve({"ROOST_HOME": str(tmp_path / "home")}), lambda: config)
    job = Job(id="j1", title="t", driver="pi", cwd=str(tmp_path),
              live={"seq": 3, "phase": "ready", "turn": None, "adapter": ["not", "an", "object"]})
    with pytest.raises(DriverError, match="what its adapter knew cannot be read back from the job's record"):
        adopt(job, SimpleNamespace(token="t"), 3, lambda events: None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("took", ["nothing", "its answer", "its start"])
def test_a_restored_pi_turn_pi_never_took_is_not_busy_so_the_daemon_sends_it_again(took: str) -> None:
    """The daemon committed the turn and went before writing its prompt: the record names the run,
    the snapshot none. pi answers in the order it reads, so by its get_state after the replay the
    prompt's answer (or its start) has come if pi took it: busy; if nothing came, it never reached
    pi, and ``busy`` is false (the engine's ``Resynced`` sends it again). pi's own word, streaming,
    is busy either way."""
    idle = new_pi()
    idle.bind(lambda event: None, lambda data: None)
    after, emitted = new_pi(), []
    after.restore(json.loads(json.dumps(idle.snapshot())), run=1)
    after.bind(emitted.append, lambda data: None)
    replayed = {"nothing": [], "its answer": [line({"type": "response", "id": "p9", "command": "prompt",
                                                     "success": True})],
                "its start": [line({"type": "agent_start"})]}[took]
    decoded(after, emitted, replayed)
    after.encode({"type": "get_state", "id": "g2"})
    for streaming in (False, True):
        [answer] = after.decode(line({"type": "response", "id": "g2", "command": "get_state", "success": True,
                                      "data": {"isStreaming": streaming, "sessionFile": "s.jsonl",
                                               "model": {"provider": "fake", "id": "fake-model"}}}))
        assert answer["data"]["busy"] is (streaming or took != "nothing"), (took, streaming)
        after.encode({"type": "get_state", "id": "g2"})
