"""Claude Code lines over the frame limit, which the worker's reader skips unread: the two a turn
hangs on are rebuilt from the line's ends, as pi's are. A ``result`` (a model answer of megabytes)
still ends the turn; a permission request (a Write of a big file) is denied with why, so Claude Code
goes on instead of waiting for an answer nobody can give. The adapter alone, fed the shapes Claude
Code 2.1 writes (key order measured: the result's text comes late, ``type`` after it)."""

from __future__ import annotations

import json
from typing import Any

from roost.drivers.claude_stream import ClaudeAdapter
from roost.protocol import MAX_FRAME
from roost.worker_protocol import OVERSIZE_KEEP, Oversize


def oversize(frame: dict[str, Any]) -> Oversize:
    line = json.dumps(frame, separators=(",", ":")).encode()
    assert len(line) > MAX_FRAME
    return Oversize(size=len(line), head=line[:OVERSIZE_KEEP], tail=line[-OVERSIZE_KEEP:])


def result(text: str, error: bool = False) -> dict[str, Any]:
    return {"duration_api_ms": 112, "stop_reason": "end_turn", "session_id": "s1", "total_cost_usd": 0.001,
            "usage": {"input_tokens": 240, "output_tokens": 16}, "modelUsage": {}, "permission_denials": [],
            "terminal_reason": "completed", "is_error": error, "num_turns": 1,
            "subtype": "error_during_execution" if error else "success", "api_error_status": None, "result": text,
            "ttft_ms": 5, "type": "result", "duration_ms": 120, "uuid": "u1"}


def adapter_in_a_turn() -> tuple[ClaudeAdapter, list[bytes]]:
    adapter = ClaudeAdapter(session=None)
    written: list[bytes] = []
    adapter.bind(lambda event: None, written.append)
    adapter.encode({"type": "prompt", "id": 1, "run": 5, "message": "write a lot"})
    return adapter, written


def ends(events: list[dict[str, Any]]) -> list[tuple[Any, str]]:
    return [(e["run"], e["outcome"]) for e in events if e["type"] == "turn_end"]


def test_a_result_over_the_frame_limit_still_ends_the_turn() -> None:
    adapter, _ = adapter_in_a_turn()
    events = adapter.oversize(oversize(result("word " * (MAX_FRAME // 4))))
    assert ends(events) == [(5, "ok")]
    assert any(e["type"] == "note" and "result" in e["message"] for e in events)
    assert adapter.run is None
    adapter, _ = adapter_in_a_turn()
    assert ends(adapter.oversize(oversize(result("x" * (MAX_FRAME + 1), error=True)))) == [(5, "failed")]


def test_a_permission_request_over_the_frame_limit_is_denied_saying_why() -> None:
    adapter, written = adapter_in_a_turn()
    request = {"type": "control_request", "request_id": "r-42", "request": {
        "subtype": "can_use_tool", "tool_name": "Write", "display_name": "Write",
        "input": {"file_path": "/tmp/big.txt", "content": "line\n" * (MAX_FRAME // 4)},
        "description": "big.txt", "tool_use_id": "toolu_1"}}
    events = adapter.oversize(oversize(request))
    assert not ends(events), "the turn goes on: Claude Code hears no and carries on"
    [answer] = [json.loads(w) for w in written]
    assert answer["response"]["request_id"] == "r-42"
    verdict = answer["response"]["response"]
    assert verdict["behavior"] == "deny" and "too big" in verdict["message"]
    assert any(e["type"] == "note" and "Write" in e["message"] for e in events)


def test_other_lines_over_the_limit_are_only_a_note() -> None:
    adapter, written = adapter_in_a_turn()
    big = {"type": "assistant", "message": {"content": [{"type": "text", "text": "y" * (MAX_FRAME + 1)}]}}
    events = adapter.oversize(oversize(big))
    assert [e["type"] for e in events] == ["note"] and adapter.run == 5 and not written
