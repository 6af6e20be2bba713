"""roost's tools as an MCP server on stdio, for agents that take tools that way (Claude Code, Codex).

The agent starts it (``python -m roost.programs.mcp_server``) from the MCP config roost hands it. Each
tool call is one request to the daemon over its control socket as the calling job (ROOST_SOCKET,
ROOST_JOB_ID and ROOST_TOKEN from the environment the worker got), exactly as pi's extension
(roost/drivers/pi_extension/roost-tools.ts) does it: same tools, same arguments, and a refusal comes
back as a tool error in the daemon's own words, so the model can act on it.

MCP here is JSON-RPC 2.0, one message a line; only what the tools need: ``initialize``,
``tools/list``, ``tools/call`` and ``ping``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from roost.client import Client
from roost.client.daemon_wait import call_waiting
from roost.socket_connect import ClientError

#: The MCP revision this server speaks; it answers with the client's own when the client asks another.
MCP_VERSION = "2025-06-18"
NAME = "roost"
#: How many children one ``roost_children`` result lists (pi's extension uses the same): a model
#: reads a page, then asks for the next with its cursor.
CHILDREN_PAGE = 200


def _schema(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


def _string(description: str, choices: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "string", "description": description, **({"enum": list(choices)} if choices else {})}


TOOLS: list[dict[str, Any]] = [
    {"name": "roost_spawn",
     "description": "Start a subagent on a task. It runs on its own, in your working directory, and reports back "
                    "to you: when it finishes or asks something, its report arrives as your next message (a "
                    "<roost-report> block). Give the task everything the subagent needs: it does not see your "
                    "conversation. Returns the new job's id.",
     "inputSchema": _schema({
         "task": _string("What the subagent should do: its first prompt"),
         "title": _string("A short title (default: the task's first line)"),
         "lifetime": _string("task (default): closed once it reports done; workflow/session: kept until you "
                             "close it", ("task", "workflow", "session")),
         "driver": _string("Which configured agent runs it (default: roost's default driver)"),
         "approvals": _string("What it does with a permission request no rule allows (never looser than "
                              "your own policy: the stricter wins)", ("ask", "deny", "allow")),
         "approval_rules": {"type": "array", "items": {"type": "string"},
                            "description": "Requests it may make without asking, within your own policy: "
                                           "TOOL or TOOL:PATTERN, e.g. 'Bash:npm test*'"}}, ("task",))},
    {"name": "roost_send",
     "description": "Send a message to another roost job (a subagent of yours, say, to answer its question). "
                    "A finished or idle job resumes to take it.",
     "inputSchema": _schema({"job": _string("The job id"), "text": _string("The message")}, ("job", "text"))},
    {"name": "roost_report",
     "description": "Report to the job that started you: done (the task is finished), blocked (you need something "
                    "you cannot get yourself) or idle (a progress note). It takes effect when your turn ends.",
     "inputSchema": _schema({"status": _string("done, idle or blocked", ("done", "idle", "blocked")),
                             "text": _string("What to tell the parent: the result, or what you need")},
                            ("status", "text"))},
    {"name": "roost_children",
     "description": "List the subagents you spawned, with their ids, states and titles, a page at a time: when "
                    "there are more, the last line gives the cursor to pass for the next page.",
     "inputSchema": _schema({"cursor": _string("Where the previous page ended (leave out for the first page)")})},
]


def _spawn(call: Callable[..., Any], args: dict[str, Any]) -> str:
    row = call("spawn", prompt=args.get("task", ""), title=args.get("title"), lifetime=args.get("lifetime"),
               driver=args.get("driver"), approvals=args.get("approvals"), approval_rules=args.get("approval_rules"))
    return (f'spawned job {row["id"]} ("{row["title"]}", driver {row["driver"]}, lifetime {row["lifetime"]}); '
            f"its report will arrive as a message")


def _send(call: Callable[..., Any], args: dict[str, Any]) -> str:
    result = call("send", job=args.get("job", ""), text=args.get("text", ""))
    return f"{result['outcome']}: {result['job']}"


def _report(call: Callable[..., Any], args: dict[str, Any]) -> str:
    result = call("report", status=args.get("status", ""), text=args.get("text", ""))
    return f"reported {args.get('status')} (applies {result['applies']})"


def _children(call: Callable[..., Any], args: dict[str, Any]) -> str:
    page = call("children", cursor=args.get("cursor"), limit=CHILDREN_PAGE)
    lines = [f"{r['id']}  {r['state']:<8} {r['title']}" for r in page["rows"]]
    if page.get("next"):
        lines.append(f"more: call roost_children with cursor {page['next']}")
    return "\n".join(lines) if lines else "no subagents"


RUNS: dict[str, Callable[[Callable[..., Any], dict[str, Any]], str]] = {
    "roost_spawn": _spawn, "roost_send": _send, "roost_report": _report, "roost_children": _children}


def call_roost(op: str, **args: Any) -> Any:
    """One request to the daemon as the job this agent runs for (None values left out)."""
    socket, job, token = (os.environ.get(k) for k in ("ROOST_SOCKET", "ROOST_JOB_ID", "ROOST_TOKEN"))
    if not (socket and job and token):
        raise ClientError("env", "roost tools need ROOST_SOCKET, ROOST_JOB_ID and ROOST_TOKEN: this agent was "
                                 "not started by roost")

    def attempt() -> Any:
        with Client.connect(Path(socket), client="mcp-tools", job=job, token=token) as client:
            return client.call(op, **{k: v for k, v in args.items() if v is not None})

    return call_waiting(attempt)  # while the daemon restarts, wait for the next one (DAEMON_WAIT)


def run_tool(name: str, args: dict[str, Any], call: Callable[..., Any] = call_roost) -> dict[str, Any]:
    """An MCP tool result: the tool's text, or the daemon's refusal as an error the model reads."""
    run = RUNS.get(name)
    if run is None:
        return {"content": [{"type": "text", "text": f"no roost tool named {name!r}"}], "isError": True}
    try:
        return {"content": [{"type": "text", "text": run(call, args)}], "isError": False}
    except ClientError as exc:
        return {"content": [{"type": "text", "text": exc.message}], "isError": True}


def answer(message: dict[str, Any]) -> dict[str, Any] | None:
    """The reply to one JSON-RPC message, or None for a notification."""
    method, params, req_id = message.get("method"), message.get("params") or {}, message.get("id")
    if req_id is None:
        return None
    if method == "initialize":
        result: Any = {"protocolVersion": params.get("protocolVersion") or MCP_VERSION,
                       "capabilities": {"tools": {}}, "serverInfo": {"name": NAME, "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        result = run_tool(str(params.get("name")), params.get("arguments") or {})
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": req_id, "error": {"code": -32601, "message": f"unknown method {method}"}}
    return {"jsonrpc": "2.0", "id": req_id, "result": result}


def main() -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        reply = answer(message) if isinstance(message, dict) else None
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
