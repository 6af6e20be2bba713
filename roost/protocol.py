"""The client protocol: JSON lines over the control socket, defined once for daemon and clients.

A frame is one JSON object on one line, at most ``MAX_FRAME`` bytes. A client first sends
``hello``; then requests ``{"id", "op", "args"}`` get responses ``{"id", "ok", "result"|"error"}``;
events ``{"event", ...}`` arrive for what a connection subscribed to. docs/protocols.md
describes every operation, paging, subscriptions and back-pressure.

One idea at about 410 lines: the wire format and the table of every operation's arguments, kept
together so that a frame and the checks of what it carries cannot drift apart.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roost import bounds
from roost.sandbox.walls import LEVELS as ISOLATION_LEVELS

try:
    import orjson
except ImportError:  # a host's python3 runs the worker side (roost/hosts/bundle.py) without roost's dependencies
    orjson = None  # type: ignore[assignment]

if TYPE_CHECKING:
    import asyncio

PROTOCOL_VERSION = 3
#: The largest frame either side may send, newline included.
MAX_FRAME = 1024 * 1024
#: How many bytes of rows or entries one page (a ``list`` or ``logs`` reply, a snapshot frame)
#: carries at most, so that a reply stays well under MAX_FRAME whatever the records hold.
PAGE_BYTES = 512 * 1024
#: How many bytes may wait to be written to one client; past it the client is told it lagged
#: and dropped, so the daemon's memory does not depend on how fast anyone reads.
QUEUE_BYTES = 4 * 1024 * 1024
#: Seconds a new connection has to say hello before the daemon closes it.
HELLO_TIMEOUT = 5.0
#: The most text one timeline entry carries; bigger output is split or cut with a note.
ENTRY_MAX = 64 * 1024
#: How many client connections the daemon serves at once; one more gets ``busy`` and is closed.
MAX_CONNECTIONS = 512
#: Of MAX_CONNECTIONS, how many only a person's connections may take (a peer the daemon did not
#: start): jobs together hold at most MAX_CONNECTIONS - PERSON_ROOM, so a job that opens all it can
#: never makes ``roost ls`` or ``roost daemon stop`` answer busy.
PERSON_ROOM = 64
#: Defaults of the paged reads (docs/protocols.md).
LIST_LIMIT = 500
LOGS_LIMIT = 200
#: The most results one page of ``search`` holds (each snippet at most 400 characters: a page stays
#: well inside PAGE_BYTES however its text escapes).
SEARCH_LIMIT_MAX = 100
#: The most digits an integer in a frame may have (any 64-bit integer fits; 5,000 digits would
#: cost Python a quadratic conversion and fit no argument).
INT_DIGITS = 20
#: How many bytes at the start of an oversize frame are searched for its request id.
ID_SCAN = 4096
#: What a client that stopped reading gets, best effort, before the daemon closes it.
LAGGED = {"event": "lagged", "dropped": True}
SUBSCRIPTIONS = ("agent_view", "subtree", "timeline")
#: A job's approval policy, and a person's answers to an approval (roost/rules/approvals.py).
APPROVAL_MODES = ("ask", "deny", "allow")
APPROVAL_ANSWERS = ("once", "job", "deny")


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
    BUSY = "busy"
    IDLE = "idle"
    STOPPED = "stopped"
    ARCHIVED = "archived"
    REFUSED = "refused"
    DEPTH = "depth_limit"
    #: A spawn past a tree's quota (max_tree_jobs, max_spawns_per_minute).
    QUOTA = "quota"
    DRIVER = "driver"
    INTERNAL = "internal"
    #: The store could not be written (the state directory is full): nothing of the request was kept.
    STORE = "store"


class ProtocolError(Exception):
    """An error that goes back to the peer as ``{"code", "message"}``; ``req_id`` is the request
    it answers when only the frame's bytes could tell (an oversize or broken frame)."""

    def __init__(self, code: str, message: str, req_id: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.req_id = req_id

    def to_wire(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class Arg:
    """One argument of an operation: its JSON types, whether it is required, and for lists the
    type of their items; ``bounds`` limit an integer, ``choices`` a string (or a list's items),
    ``cap`` a string's length (roost/bounds.py)."""

    types: tuple[type, ...]
    required: bool = False
    items: type | None = None
    bounds: tuple[int, int] | None = None
    choices: tuple[str, ...] | None = None
    cap: int | None = None

    def check(self, op: str, name: str, value: Any) -> None:
        """Raise BAD_ARGS saying what ``value`` should have been."""
        wrong_item = isinstance(value, list) and self.items is not None and not all(
            isinstance(item, self.items) for item in value)
        if wrong_item or not isinstance(value, self.types) or (isinstance(value, bool) and bool not in self.types):
            raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: argument {name!r} must be {self._expected()}")
        values = value if isinstance(value, list) else [value]
        if self.choices is not None and any(v not in self.choices for v in values if v is not None):
            raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: argument {name!r} must be one of {', '.join(self.choices)}")
        if self.cap is not None:
            for v in values:
                if isinstance(v, str) and (problem := bounds.too_long(f"argument {name!r}", v, self.cap)):
                    raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: {problem}")
        if self.bounds is not None and isinstance(value, int):
            low, high = self.bounds
            if not low <= value <= high:
                raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: argument {name!r} must be between {low} and {high}, "
                                                        f"got {bounds.quote(value)}")

    def _expected(self) -> str:
        names = ["null" if t is type(None) else t.__name__ for t in self.types]
        if self.items is not None:
            names = [f"a list of {self.items.__name__}" if n == "list" else n for n in names]
        return " or ".join(names)


#: What a job's report may say of its turn.
REPORT_STATUSES = ("done", "idle", "blocked")
#: The largest integer any argument may be (a timeline seq, an offset: SQLite's integers).
INT_MAX = 2 ** 63 - 1
_ID = Arg((str,), required=True, cap=bounds.ID_MAX)
_OPT_ID = Arg((str, type(None)), cap=bounds.ID_MAX)
_NAME = Arg((str, type(None)), cap=bounds.NAME_MAX)
_BRANCH = Arg((str, type(None)), cap=bounds.BRANCH_MAX)
_STR = Arg((str,))  # a text: a message or a report, bounded in bytes where it goes (one prompt frame)
_NEED_STR = Arg((str,), required=True)
_OPT_STR = Arg((str, type(None)))  # bounded where it is read (an approval's rule: rules/approvals.py)
_BOOL = Arg((bool,))
_SEQ = Arg((int, type(None)), bounds=(0, INT_MAX))
_JOB = {"job": _ID}
_DOLLARS = Arg((int, float, type(None)))  # >= 0 and finite: checked by the daemon (engine/spend.py)
_TOKENS = Arg((int, type(None)), bounds=(0, INT_MAX))
#: The most days ``usage`` looks back.
USAGE_DAYS_MAX = 366
#: A required job id: what an operation module (roost/daemon/ops/) names its target with.
JOB_ID = _ID
#: Each operation's arguments (docs/protocols.md says what they mean), but those of the operations
#: in modules of roost/daemon/ops/: each module holds its own.
OPS: dict[str, dict[str, Arg]] = {
    "hello": {"version": Arg((int,), required=True, bounds=(0, INT_MAX)), "client": Arg((str,), cap=bounds.NAME_MAX),
              "job": _OPT_ID, "token": _OPT_ID},
    "spawn": {"prompt": _NEED_STR, "parent": _OPT_ID, "driver": _NAME,
              "cwd": Arg((str, type(None)), cap=bounds.PATH_MAX),
              "title": Arg((str, type(None)), cap=bounds.TITLE_MAX),
              "lifetime": _NAME, "labels": Arg((dict,)),
              "worktree": Arg((bool, type(None))), "branch": _BRANCH, "base": _BRANCH,
              "host": _NAME, "approvals": Arg((str, type(None)), choices=APPROVAL_MODES),
              "approval_rules": Arg((list,), items=str),  # each rule bounded by rules/approvals.py
              "budget_usd": _DOLLARS, "budget_tokens": _TOKENS,
              "isolation": Arg((str, type(None)), choices=ISOLATION_LEVELS),
              # on a Ray host (docs/hosts.md#ray); names and amounts checked by roost/hosts/placement.py
              "num_cpus": Arg((int, float, type(None))), "resources": Arg((dict, type(None)))},
    "send": {"job": _ID, "text": _NEED_STR},
    "stop": {"job": _ID, "tree": _BOOL},
    "close": _JOB,
    "pin": _JOB,
    "unpin": _JOB,
    "show": _JOB,
    "list": {"limit": Arg((int,), bounds=(1, 1000)), "cursor": _OPT_ID, "roots": _BOOL,
             "states": Arg((list,), items=str, cap=bounds.NAME_MAX), "under": _OPT_ID, "archived": _BOOL,
             "full": _BOOL, "newest_first": _BOOL, "archived_only": _BOOL,
             "match": Arg((str,), cap=bounds.TITLE_MAX), "lines": _BOOL},
    "children": {"job": _OPT_ID, "limit": Arg((int,), bounds=(1, 1000)), "cursor": _OPT_ID},
    "report": {"status": Arg((str,), required=True, choices=REPORT_STATUSES), "text": _STR},
    "logs": {"job": _ID, "limit": Arg((int,), bounds=(1, 2000)), "before": _SEQ, "after": _SEQ},
    "subscribe": {"what": Arg((str,), required=True, choices=SUBSCRIPTIONS), "job": _OPT_ID, "after": _SEQ,
                  "limit": Arg((int,), bounds=(0, 5000)), "inline": _BOOL},
    "unsubscribe": {"sub": Arg((int,), required=True, bounds=(0, INT_MAX))},
    "attach": {"job": _ID, "resume": _BOOL},
    "release": _JOB,
    "archive": _JOB,
    "detach": _JOB,
    "unarchive": _JOB,
    "label": {"job": _ID, "key": Arg((str,), required=True, cap=bounds.LABEL_KEY_MAX),
              "value": Arg((str, type(None)), required=True, cap=bounds.LABEL_VALUE_MAX)},
    "status": {},
    "worktrees": {},
    "worktrees_prune": {},
    "diff": {"job": _ID, "offset": Arg((int,), bounds=(0, INT_MAX)), "snapshot": _OPT_ID},
    "merge": _JOB,
    "search": {"text": _NEED_STR, "under": _OPT_ID, "archived": _BOOL,  # text: search.QUERY_MAX, said there
               "limit": Arg((int,), bounds=(1, SEARCH_LIMIT_MAX)), "before": _SEQ},
    "fork": {"job": _ID, "worktree": _BOOL, "title": Arg((str, type(None)), cap=bounds.TITLE_MAX),
             "prompt": _OPT_STR},  # a prompt is bounded as one (supervisor.check_prompt)
    "answer_approval": {"approval": _ID, "decision": Arg((str,), required=True, choices=APPROVAL_ANSWERS),
                        "reason": _STR, "rule": _OPT_STR},
    "approval_text": {"approval": _ID, "offset": Arg((int,), bounds=(0, INT_MAX))},
    "acknowledge": {},
    "usage": {"job": _OPT_ID, "days": Arg((int,), bounds=(1, USAGE_DAYS_MAX))},
    "budget": {"job": _ID, "usd": _DOLLARS, "tokens": _TOKENS},
    "reload": {},
    "shutdown": {"all": _BOOL},
}

_ID_IN_FRAME = re.compile(rb'"id"\s*:\s*(-?\d{1,18})(?![\d.eE])')


def request_id(head: bytes) -> int | None:
    """The request id in the first bytes of a frame that cannot be parsed (too large or broken),
    so its error still answers the right request; None when there is none to find."""
    found = _ID_IN_FRAME.search(head[:ID_SCAN])
    return int(found.group(1)) if found else None


def dumps(obj: Any) -> str:
    """Compact JSON, non-ASCII kept: how every frame is written."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def encode(obj: dict[str, Any]) -> bytes:
    """One frame: compact JSON and a newline, UTF-8 kept as ``dumps`` writes it. orjson writes it in
    a third of json's time (a page of ``roost ls --json`` lines is 512 KiB of escaped quotes);
    json where orjson refuses (a key that is not a string, an integer past 64 bits, a lone
    surrogate, which json refuses too once encoded) and where orjson is not installed."""
    if orjson is not None:
        try:
            return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:  # orjson.JSONEncodeError
            pass
    return (dumps(obj) + "\n").encode()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _integer(text: str) -> int:
    if len(text) > INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits is out of range (at most {INT_DIGITS})")
    return int(text)


def _real(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {bounds.cut(text, 40)} is out of range")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object, refused when a key comes twice: built by dict() in C, the pairs walked only when
    the sizes differ (a page of 2,000 records: 1.12x plain json's time, 1.17x with a walk each)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {bounds.quote(key)} appears twice in one object")
            seen.add(key)
    return obj


def loads(data: bytes | str) -> Any:
    """Strict JSON, what both protocols read: ValueError for anything JSON does not define or roost
    could not send on as JSON — NaN and Infinity, a number that is infinite as a float or an
    integer over INT_DIGITS digits, a key twice in one object, nesting too deep to parse — and for
    bytes that are not UTF-8."""
    try:
        return json.loads(data, parse_constant=_no_constant, parse_int=_integer, parse_float=_real,
                          object_pairs_hook=_object)
    except RecursionError:
        raise ValueError("nested too deep to parse") from None


def decode(line: bytes) -> dict[str, Any]:
    """Parse one frame, or raise ProtocolError saying what is wrong with it (with the request id
    when the bytes show one)."""
    if len(line) > MAX_FRAME:
        raise ProtocolError(ErrorCode.TOO_LARGE, f"frame of {len(line)} bytes is over the {MAX_FRAME}-byte limit",
                            request_id(line))
    try:
        obj = loads(line)
    except ValueError as exc:
        raise ProtocolError(ErrorCode.BAD_JSON, f"frame is not valid JSON: {exc}", request_id(line)) from None
    if not isinstance(obj, dict):
        raise ProtocolError(ErrorCode.BAD_FRAME, f"frame must be a JSON object, got {type(obj).__name__}")
    if _SURROGATE_ESCAPE.search(line) is not None and has_lone_surrogate(obj):
        raise ProtocolError(ErrorCode.BAD_JSON, "frame holds a lone surrogate (a \\udXXX escape that is half a "
                                                "character): that is not text", request_id(line))
    return obj


_SURROGATE = re.compile("[\ud800-\udfff]")
#: A ``\\udXXX`` escape, which may be half a character: one search, 2.7x two ``in`` tests of a page
#: dense with backslashes (a page of ``roost ls --json`` lines is its escaped quotes).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD]")


def has_lone_surrogate(obj: Any) -> bool:
    """Whether JSON-decoded data holds a string no UTF-8 can carry (JSON allows ``\\ud800``
    alone; stored or sent on, it would break every reply that includes it).

    A walk, not an encoding: it runs on every worker event (a command's 64 KiB of output a
    piece), and an ASCII string is known ASCII without reading it (``str.isascii`` reads a flag).
    Iterative, so data nested as deep as JSON could parse it is walked too."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def without_lone_surrogates(obj: Any) -> Any:
    """``obj`` with each lone surrogate in its strings replaced by U+FFFD (what a worker says is
    kept, minus what cannot be text)."""
    if not has_lone_surrogate(obj):
        return obj
    if isinstance(obj, str):
        return _SURROGATE.sub("\ufffd", obj)
    if isinstance(obj, dict):
        return {without_lone_surrogates(k): without_lone_surrogates(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [without_lone_surrogates(v) for v in obj]
    return obj


def parse_request(obj: dict[str, Any], ops: dict[str, dict[str, Arg]] = OPS) -> tuple[Any, str, dict[str, Any]]:
    """Check a request frame against ``ops`` (the daemon's: OPS and its operation modules'); return
    (id, op, args)."""
    req_id = obj.get("id")
    op = obj.get("op")
    if not isinstance(op, str):
        raise ProtocolError(ErrorCode.BAD_FRAME, "request needs an \"op\" string")
    spec = ops.get(op)
    if spec is None:
        raise ProtocolError(ErrorCode.UNKNOWN_OP, f"unknown operation {bounds.quote(op)} (known: {', '.join(sorted(ops))})")
    args = obj.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: \"args\" must be an object")
    for name, value in args.items():
        if name not in spec:
            raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: unknown argument {bounds.quote(name)}")
        spec[name].check(op, name, value)
    for name, arg in spec.items():
        if arg.required and name not in args:
            raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: missing argument {name!r}")
    return req_id, op, args


def ok(req_id: Any, result: Any = None) -> dict[str, Any]:
    return {"id": req_id, "ok": True, "result": result}


def err(req_id: Any, error: ProtocolError) -> dict[str, Any]:
    return {"id": req_id, "ok": False, "error": error.to_wire()}


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next line from a stream made with ``limit=MAX_FRAME``; None at end of stream.

    An over-long line is read to its end and thrown away, then reported as TOO_LARGE with the
    request id found in its first bytes, so the connection stays usable for the frames after it
    and the error answers the request that caused it.
    """
    import asyncio  # here, not at the top: the blocking CLI never pays for loading asyncio

    try:
        return await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial or None
    except asyncio.LimitOverrunError as exc:
        head = await reader.read(exc.consumed)
        discarded = len(head)
        while True:
            try:
                discarded += len(await reader.readuntil(b"\n"))
                break
            except asyncio.LimitOverrunError as more:
                discarded += len(await reader.read(more.consumed))
            except asyncio.IncompleteReadError as end:
                discarded += len(end.partial)
                break
        raise ProtocolError(ErrorCode.TOO_LARGE, f"frame of over {discarded} bytes is over the {MAX_FRAME}-byte limit",
                            request_id(head)) from None
