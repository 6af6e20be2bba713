"""The worker protocol: JSON lines between the daemon and an agent process, modelled on pi's RPC mode.

Commands go to the worker's stdin, each with an ``id`` echoed in its response::

    {"type": "get_state", "id": "s1"}                       -> data: {"session": PATH, "busy": bool}
    {"type": "prompt", "id": "p1", "message": "...", "run": 3}   (refused while a turn runs)
    {"type": "steer", "id": "q1", "message": "..."}          (a note for the turn in flight)
    {"type": "abort", "id": "a1"}                            (idempotent: succeeds when idle)
    {"type": "approval_answer", "id": "r1", "approval": "W", "decision": "allow"|"deny", "reason": "..."}
                                                              (the answer to the agent's approval W;
                                                               success false for an id it does not know)

Responses: ``{"type": "response", "id", "command", "success", "data"?, "error"?}``.
Events (no id) come out on stdout as the turn goes::

    {"type": "turn_start", "run": 3}                         (or "own": true: a turn the agent began itself)
    {"type": "text", "text": "..."}                           (at most ENTRY_MAX bytes of text; with
                                                               "continues": true, it goes on from the last)
    {"type": "tool", "name": "spawn", "args": {...}, "result": "...", "error": bool}
    {"type": "usage", "usage": {"context_tokens": 15, "context_window": 32000}}
    {"type": "usage", "call": {"id": "msg_1", "model": "m", "input": 10, "output": 5, "cache_read": 0,
     "cache_write": 0, "cost_usd": 0.0001}}        (one model call's spend, or the spend since the
                                                   last such event; the daemon counts an id once)
    {"type": "note", "message": "..."}                        (for the job's timeline: what was left out)
    {"type": "approval", "approval": "W", "tool": "Bash", "what": {"command": "...", "cwd": "..."},
     "description"?: "...", "subagent"?: "..."}               (a permission request: the agent waits for
                                                               its approval_answer, in a turn or not)
    {"type": "approval_withdrawn", "approval": "W"}           (the agent no longer waits on it)
    {"type": "turn_end", "run": 3, "outcome": "ok"|"failed"|"aborted"|"waiting", "error"?, "question"?}
                                                              (run null and "own": true for the agent's own turn)
    {"type": "limited", "words": "...", "retrying": bool, "until"?: 1796172588.0, "attempt"?: 1}
                                                              (a model call bounced by a rate or usage limit:
                                                               the agent waits and retries by itself, or its
                                                               turn fails next; until: when the agent says it
                                                               resets or tries again, Unix seconds)
    {"type": "retrying", "words": "...", "attempt"?: 1, "of"?: 5, "delay"?: 2.0}
                                                              (the agent retries or reconnects a failed model
                                                               call by itself; its turn goes on)

Lines are encoded as on the control socket (``roost.protocol.encode``: compact UTF-8 JSON), and no
line is over ``MAX_FRAME`` either way: the worker side cuts big output into several ``text`` events,
and the reader of either side skips a longer line and says so.
docs/protocols.md is the reference; drivers translate other agents' streams into these events.
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass
from typing import Any

from roost.protocol import ENTRY_MAX, MAX_FRAME, encode

OUTCOMES = ("ok", "failed", "aborted", "waiting")
DECISIONS = ("allow", "deny")
#: How much of each end of an over-long line a reader keeps, so an adapter can tell what it was.
OVERSIZE_KEEP = 4096


def response(req_id: Any, cmd: str, success: bool, data: Any = None, error: str | None = None) -> dict[str, Any]:
    """A worker's answer to one command."""
    return _given({"type": "response", "id": req_id, "command": cmd, "success": success}, data=data, error=error)


def _given(event: dict[str, Any], **optional: Any) -> dict[str, Any]:
    """``event`` with each optional field that is not None."""
    event.update((k, v) for k, v in optional.items() if v is not None)
    return event


def turn_end(run: Any, outcome: str, **fields: Any) -> dict[str, Any]:
    """The event that settles a turn; ``run`` is the token the prompt carried."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown turn outcome {outcome!r}")
    return {"type": "turn_end", "run": run, "outcome": outcome, **fields}


def approval(approval_id: str, tool: str, what: dict[str, Any], description: str | None = None,
             subagent: str | None = None) -> dict[str, Any]:
    """A permission request: exactly what will run (``what``: a command and its cwd, a path and its
    diff, a URL, or the tool's input), the model's own words for it and the subagent that asks, if any."""
    return _given({"type": "approval", "approval": approval_id, "tool": tool, "what": what},
                  description=description, subagent=subagent)


def approval_withdrawn(approval_id: str) -> dict[str, Any]:
    """The agent no longer waits on an approval it asked (its turn was cancelled, say)."""
    return {"type": "approval_withdrawn", "approval": approval_id}


#: The token kinds of a ``usage`` call, in the order docs/protocols.md lists them; ``input`` holds
#: the cached part too (``cache_read`` and ``cache_write`` say how much of it was).
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")


def call_usage(call_id: str, model: str, tokens: dict[str, int], cost_usd: float | None = None) -> dict[str, Any]:
    """The spend of one model call (or of the calls since the last event, where the agent reports
    only a running total): ``call_id`` names it for good, so the daemon counts a replayed one once."""
    call: dict[str, Any] = {"id": call_id, "model": model, **{k: int(tokens.get(k) or 0) for k in TOKEN_KINDS}}
    if cost_usd is not None:
        call["cost_usd"] = float(cost_usd)
    return {"type": "usage", "call": call}


def limited(words: str, retrying: bool, until: float | None = None, attempt: int | None = None) -> dict[str, Any]:
    """A model call the provider bounced with a rate or usage limit, in the agent's own words: so a
    job can be said to wait for a limit (until when, if the agent says) instead of looking busy or
    broken. ``retrying``: the agent waits and tries again by itself; else its turn fails next."""
    return _given({"type": "limited", "words": words, "retrying": retrying}, until=until, attempt=attempt)


def retrying(words: str, attempt: int | None = None, of: int | None = None,
             delay: float | None = None) -> dict[str, Any]:
    """The agent retries or reconnects a failed model call by itself (its words, which try of how
    many, seconds until it): a row can show why a turn takes long while it still goes on."""
    return _given({"type": "retrying", "words": words}, attempt=attempt, of=of, delay=delay)


def note(message: str) -> dict[str, Any]:
    """An event the daemon writes to the job's timeline as a note: how roost says it left something out."""
    return {"type": "note", "message": message}


def describe_exit(returncode: int) -> str:
    """'exited with code 3' or 'killed by SIGKILL', for the timeline."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with code {returncode}"


# -- sizes -------------------------------------------------------------------------------------------
def split_bytes(data: bytes, limit: int = ENTRY_MAX) -> list[bytes]:
    """``data`` in pieces of at most ``limit`` bytes that join back to it: each cut just after the
    last newline of its window, or, inside a longer line, at the start of a UTF-8 character."""
    pieces: list[bytes] = []
    start = 0
    while len(data) - start > limit:
        cut = data.rfind(b"\n", start, start + limit) + 1
        if cut <= start:
            cut = start + limit
            while cut > start + 1 and data[cut] & 0xC0 == 0x80:  # a continuation byte: back off
                cut -= 1
        pieces.append(data[start:cut])
        start = cut
    if start < len(data):
        pieces.append(data[start:])
    return pieces


def text_events(text: str) -> list[dict[str, Any]]:
    """One ``text`` event, or several of at most ENTRY_MAX (roost.protocol's bound of a timeline entry)
    bytes when the text is longer; even escaped as JSON (6 bytes a byte at most) one stays far below
    MAX_FRAME."""
    data = text.encode()
    if len(data) <= ENTRY_MAX:
        return [{"type": "text", "text": text}]
    return [{"type": "text", "text": piece.decode(errors="replace")} for piece in split_bytes(data)]


def encode_event(event: dict[str, Any]) -> bytes:
    """A worker's line for one event or response; a note in its place when it would be over MAX_FRAME
    (text never is: it goes through ``text_events`` first)."""
    line = encode(event)
    if len(line) > MAX_FRAME:
        line = encode(note(f"left out a {event.get('type')} event of {len(line)} bytes: "
                           f"over the {MAX_FRAME}-byte frame limit"))
    return line


@dataclass(frozen=True)
class Oversize:
    """A line a reader skipped: its size (without the newline) and its first and last bytes."""

    size: int
    head: bytes
    tail: bytes

    def describe(self) -> str:
        return f"a line of {self.size} bytes, over the {MAX_FRAME}-byte frame limit"


async def read_line(reader: asyncio.StreamReader) -> bytes | Oversize | None:
    """The next line from a stream made with ``limit=MAX_FRAME`` (newline stripped), an Oversize for a
    longer one — read to its end in pieces, so memory stays bounded — or None at end of stream."""
    try:
        return (await reader.readuntil(b"\n")).rstrip(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial or None
    except asyncio.LimitOverrunError as exc:
        first = await reader.read(exc.consumed)
    size, last = len(first), first[-OVERSIZE_KEEP:]
    ended = False
    while not ended:
        ended = True
        try:
            rest = (await reader.readuntil(b"\n")).rstrip(b"\n")
        except asyncio.LimitOverrunError as more:
            rest, ended = await reader.read(more.consumed), False
        except asyncio.IncompleteReadError as end:
            rest = end.partial
        size, last = size + len(rest), (last + rest)[-OVERSIZE_KEEP:]
    return Oversize(size, first[:OVERSIZE_KEEP], last)
