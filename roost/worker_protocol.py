"""The worker protocol: JSON lines between the daemon and an agent process, modelled on pi's RPC mode.

Commands go to the worker's stdin, each with an ``id`` echoed in its response::

    {"type": "get_state", "id": "s1"}                       -> data: {"session": PATH, "busy": bool}
    {"type": "prompt", "id": "p1", "message": "...", "run": 3}   (refused while a turn runs)
    {"type": "steer", "id": "q1", "message": "..."}          (a note for the turn in flight)
    {"type": "abort", "id": "a1"}                            (idempotent: succeeds when idle)

Responses: ``{"type": "response", "id", "command", "success", "data"?, "error"?}``.
Events (no id) come out on stdout as the turn goes::

    {"type": "turn_start", "run": 3}
    {"type": "text", "text": "..."}
    {"type": "tool", "name": "spawn", "args": {...}, "result": "...", "error": bool}
    {"type": "usage", "usage": {"input": 10, "output": 5, "context_tokens": 15, "context_window": 32000}}
    {"type": "turn_end", "run": 3, "outcome": "ok"|"failed"|"aborted"|"waiting", "error"?, "question"?}

docs/protocols.md is the reference; drivers translate other agents' streams into these events.
"""

from __future__ import annotations

from typing import Any

OUTCOMES = ("ok", "failed", "aborted", "waiting")


def response(req_id: Any, cmd: str, success: bool, data: Any = None, error: str | None = None) -> dict[str, Any]:
    """A worker's answer to one command."""
    out: dict[str, Any] = {"type": "response", "id": req_id, "command": cmd, "success": success}
    if data is not None:
        out["data"] = data
    if error is not None:
        out["error"] = error
    return out


def turn_end(run: Any, outcome: str, **fields: Any) -> dict[str, Any]:
    """The event that settles a turn; ``run`` is the token the prompt carried."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown turn outcome {outcome!r}")
    return {"type": "turn_end", "run": run, "outcome": outcome, **fields}
