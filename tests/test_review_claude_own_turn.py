"""A prompt that reaches Claude Code while a turn of its own runs (the daemon handed it over before
it heard that turn began): Claude Code queues the message and answers it in a turn after (measured
with Claude Code 2.1: a second ``system/init`` and ``result``). The adapter must end the prompt's run
at that second result, not at the own turn's. The adapter alone, fed Claude Code's frames."""

from __future__ import annotations

import json
from typing import Any

from roost.drivers.claude import ClaudeAdapter


def frames(adapter: ClaudeAdapter, *lines: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line in lines:
        out += adapter.decode(json.dumps(line).encode())
    return out


def init() -> dict[str, Any]:
    return {"type": "system", "subtype": "init", "session_id": "s1"}


def said(text: str) -> dict[str, Any]:
    return {"type": "assistant", "message": {"content": [{"type": "text", "text": text}]}}


def result(text: str) -> dict[str, Any]:
    return {"type": "result", "subtype": "success", "is_error": False, "result": text, "usage": {}}


def ends(events: list[dict[str, Any]]) -> list[tuple[Any, Any, str]]:
    return [(e.get("run"), e.get("own"), e["outcome"]) for e in events if e["type"] == "turn_end"]


def test_a_prompt_during_claudes_own_turn_ends_at_its_own_result() -> None:
    adapter = ClaudeAdapter(session=None)
    emitted: list[dict[str, Any]] = []
    written: list[bytes] = []
    adapter.bind(emitted.append, written.append)
    own = frames(adapter, init(), said("taking in the subagent's result"))
    assert own[0] == {"type": "turn_start", "own": True}
    data = adapter.encode({"type": "prompt", "id": 1, "run": 7, "message": "and now this"})
    assert json.loads(data)["message"]["content"] == "and now this"  # Claude Code queues it
    first = frames(adapter, result("took it in"))
    assert ends(first) == [(None, True, "ok")], "the own turn ended as the agent's own, not as run 7"
    second = frames(adapter, init(), said("answering"), result("answered"))
    assert not [e for e in second if e["type"] == "turn_start"], "run 7's answer is not a turn of its own"
    assert ends(second) == [(7, None, "ok")]
    assert adapter.run is None


def test_an_own_turn_still_begins_when_no_prompt_waits() -> None:
    adapter = ClaudeAdapter(session=None)
    adapter.bind(lambda e: None, lambda d: None)
    adapter.encode({"type": "prompt", "id": 1, "run": 3, "message": "hi"})
    assert ends(frames(adapter, init(), result("hi"))) == [(3, None, "ok")]
    events = frames(adapter, init(), result("later"))
    assert events[0] == {"type": "turn_start", "own": True} and ends(events) == [(None, True, "ok")]
