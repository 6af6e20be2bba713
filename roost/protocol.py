"""The client protocol: JSON lines over the control socket, defined once for daemon and clients.

A frame is one JSON object on one line, at most ``MAX_FRAME`` bytes. A client first sends
``hello``; then requests ``{"id", "op", "args"}`` get responses ``{"id", "ok", "result"|"error"}``;
events ``{"event", ...}`` arrive on connections that asked to ``watch``. docs/protocols.md
describes every operation.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

PROTOCOL_VERSION = 1
MAX_FRAME = 1024 * 1024
#: How many bytes of rows or entries one page of ``list`` or ``logs`` carries, at most about:
#: half a frame, so escaping never pushes a page over MAX_FRAME.
PAGE_BYTES = 512 * 1024


class ErrorCode:
    """Codes carried in error responses; the message says what was wrong and where."""

    BAD_JSON = "bad_json"
    TOO_LARGE = "too_large"
    BAD_FRAME = "bad_frame"
    BAD_ARGS = "bad_args"
    UNKNOWN_OP = "unknown_op"
    UNKNOWN_JOB = "unknown_job"
    VERSION = "version"
    NO_HELLO = "no_hello"
    AUTH = "auth"
    STOPPED = "stopped"
    ARCHIVED = "archived"
    REFUSED = "refused"
    DEPTH = "depth_limit"
    DRIVER = "driver"
    INTERNAL = "internal"


class ProtocolError(Exception):
    """An error that goes back to the peer as ``{"code", "message"}``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def to_wire(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


# Each operation's arguments: name -> (accepted types, required). ``None`` allows null.
_STR = (str,)
_OPT_STR = (str, type(None))
_BOOL = (bool,)
_NUM = (int, float)
OPS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "hello": {"version": ((int,), True), "client": (_STR, False), "job": (_OPT_STR, False),
              "token": (_OPT_STR, False)},
    "spawn": {"prompt": (_STR, True), "parent": (_OPT_STR, False), "driver": (_OPT_STR, False),
              "cwd": (_OPT_STR, False), "title": (_OPT_STR, False), "lifetime": (_OPT_STR, False),
              "labels": ((dict,), False)},
    "send": {"job": (_STR, True), "text": (_STR, True)},
    "stop": {"job": (_STR, True), "tree": (_BOOL, False)},
    "close": {"job": (_STR, True)},
    "pin": {"job": (_STR, True)},
    "unpin": {"job": (_STR, True)},
    "show": {"job": (_STR, True)},
    "list": {"archived": (_BOOL, False)},
    "children": {"job": (_OPT_STR, False)},
    "report": {"status": (_STR, True), "text": (_STR, False)},
    "logs": {"job": (_STR, True), "after": ((int,), False)},
    "watch": {},
    "attach": {"job": (_STR, True), "resume": (_BOOL, False)},
    "release": {"job": (_STR, True)},
    "archive": {"job": (_STR, True)},
    "detach": {"job": (_STR, True)},
    "label": {"job": (_STR, True), "key": (_STR, True), "value": (_OPT_STR, True)},
    "status": {},
    "shutdown": {},
}

#: Operations a job may call about itself only (the daemon takes the job from the hello).
JOB_ONLY_OPS = frozenset({"report"})
REPORT_STATUSES = ("done", "idle", "blocked")


def encode(obj: dict[str, Any]) -> bytes:
    """One frame: compact JSON and a newline."""
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


def decode(line: bytes) -> dict[str, Any]:
    """Parse one frame, or raise ProtocolError saying what is wrong with it."""
    if len(line) > MAX_FRAME:
        raise ProtocolError(ErrorCode.TOO_LARGE, f"frame of {len(line)} bytes is over the {MAX_FRAME}-byte limit")
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(ErrorCode.BAD_JSON, f"frame is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(ErrorCode.BAD_FRAME, f"frame must be a JSON object, got {type(obj).__name__}")
    return obj


def parse_request(obj: dict[str, Any]) -> tuple[Any, str, dict[str, Any]]:
    """Check a request frame against OPS; return (id, op, args)."""
    req_id = obj.get("id")
    op = obj.get("op")
    if not isinstance(op, str):
        raise ProtocolError(ErrorCode.BAD_FRAME, "request needs an \"op\" string")
    spec = OPS.get(op)
    if spec is None:
        raise ProtocolError(ErrorCode.UNKNOWN_OP, f"unknown operation {op!r} (known: {', '.join(sorted(OPS))})")
    args = obj.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: \"args\" must be an object")
    for name, value in args.items():
        if name not in spec:
            raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: unknown argument {name!r}")
        types, _ = spec[name]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            expected = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: argument {name!r} must be {expected}")
    for name, (_, required) in spec.items():
        if required and name not in args:
            raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: missing argument {name!r}")
    return req_id, op, args


def ok(req_id: Any, result: Any = None) -> dict[str, Any]:
    return {"id": req_id, "ok": True, "result": result}


def err(req_id: Any, error: ProtocolError) -> dict[str, Any]:
    return {"id": req_id, "ok": False, "error": error.to_wire()}


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next line from a stream made with ``limit=MAX_FRAME``; None at end of stream.

    An over-long line is read to its end and thrown away, then reported as TOO_LARGE, so the
    connection stays usable for the frames after it.
    """
    import asyncio  # here, not at the top: the blocking CLI never pays for loading asyncio

    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial or None
    except asyncio.LimitOverrunError as exc:
        discarded = exc.consumed
        await reader.read(exc.consumed)
        while True:
            try:
                discarded += len(await reader.readuntil(b"\n"))
                break
            except asyncio.LimitOverrunError as more:
                discarded += len(await reader.read(more.consumed))
            except asyncio.IncompleteReadError as end:
                discarded += len(end.partial)
                break
        raise ProtocolError(ErrorCode.TOO_LARGE, f"frame of over {discarded} bytes is over the {MAX_FRAME}-byte limit") from None
