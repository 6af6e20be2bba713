"""What the two clients share, with no I/O: the hello, a request's frame, an answer's result, where
each frame that comes back goes (``Requests``: answers, events, subscription snapshots, the daemon
dropping a reader), and which page of a paged read comes next (``next_page``). The blocking client
(blocking.py) and the asyncio one (aio.py) only move bytes; so they cannot drift apart.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from roost.protocol import MAX_FRAME, PROTOCOL_VERSION, ErrorCode, encode
from roost.socket_connect import ClientError

#: Seconds a call waits for its answer unless told otherwise.
DEFAULT_TIMEOUT = 30.0
#: What ends an events stream: the daemon dropped a reader that fell behind.
LAGGED = "lagged"


def job_identity(environ: dict[str, str] | None = None) -> tuple[str | None, str | None]:
    """The (job id, token) a worker's environment carries, or (None, None) for a person. A job id
    with no token (a hook's environment names its job) is a person too: only the token proves a job."""
    env = os.environ if environ is None else environ
    job, token = env.get("ROOST_JOB_ID") or None, env.get("ROOST_TOKEN") or None
    return (job, token) if job and token else (None, None)


def hello_args(client: str, job: str | None, token: str | None) -> dict[str, Any]:
    """The arguments of ``hello``: as a person, or as the job ``job`` proven by its ``token``."""
    args: dict[str, Any] = {"version": PROTOCOL_VERSION, "client": client}
    if job:
        args.update(job=job, token=token)
    return args


#: What stops the store's notice (``store_notice`` of a person's hello) from being said.
ACKNOWLEDGE = "roost daemon status --acknowledge"


def notice_line(notice: str) -> str:
    """The store's repair notice as one line: what the CLI says on stderr of every command until
    it is acknowledged."""
    return f"{' | '.join(notice.splitlines())}; run `{ACKNOWLEDGE}` once you have read this"


def result(frame: dict[str, Any]) -> Any:
    """An answer's result, or ClientError with the daemon's code and words."""
    if frame.get("ok"):
        return frame.get("result")
    error = frame.get("error") or {}
    raise ClientError(error.get("code", ErrorCode.INTERNAL), error.get("message", "request failed"))


def request(req_id: int, op: str, args: dict[str, Any]) -> bytes:
    """The request's frame; one over MAX_FRAME is refused here, with nothing sent, since the
    daemon could only read and discard it. So is text that is not Unicode (a lone surrogate, as
    Python makes of invalid UTF-8 in a command line): no frame can carry it."""
    try:
        frame = encode({"id": req_id, "op": op, "args": {k: v for k, v in args.items() if v is not None}})
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start:exc.end]
        raise ClientError(ErrorCode.BAD_ARGS, f"{op}: the text is not valid UTF-8 (it holds {bad!r}, a byte "
                                              f"that is not UTF-8); nothing was sent") from None
    if len(frame) > MAX_FRAME:
        raise ClientError(ErrorCode.TOO_LARGE, f"{op}: a request of {len(frame):,} bytes is over the "
                                               f"{MAX_FRAME:,}-byte frame limit; nothing was sent")
    return frame


def lagged() -> ClientError:
    """What a client raises once the daemon dropped it for falling behind."""
    return ClientError(LAGGED, "the daemon dropped this connection: it fell behind reading events")


class Requests:
    """The requests of one connection: their ids and frames, and where each frame that comes back
    goes. A subscription's snapshot events (tagged with its request's id) are kept with it until
    its answer comes; the daemon's ``lagged`` event raises; anything else is handed back."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        #: Snapshot events collected for subscribe requests still waiting, by request id.
        self._snapshots: dict[int, list[dict[str, Any]]] = {}

    def new(self, op: str, args: dict[str, Any], snapshot: list[dict[str, Any]] | None = None) -> tuple[int, bytes]:
        """A request's id and frame (ClientError, with nothing kept, when it cannot be sent);
        ``snapshot`` collects the rows or entries of a subscription's snapshot."""
        req_id = next(self._ids)
        frame = request(req_id, op, args)
        if snapshot is not None:
            self._snapshots[req_id] = snapshot
        return req_id, frame

    def done(self, req_id: int) -> None:
        """The request was answered or given up: its snapshot is complete."""
        self._snapshots.pop(req_id, None)

    def route(self, frame: dict[str, Any]) -> dict[str, Any] | None:
        """``frame`` when it is an answer or a pushed event for the caller; None when it was a
        snapshot event, kept with its request; ClientError ``lagged`` when the daemon dropped us."""
        if "event" in frame:
            if frame["event"] == "lagged":
                raise lagged()
            collected = self._snapshots.get(frame.get("req"))  # type: ignore[arg-type]
            if collected is not None:
                collected.extend(frame.get("rows") or ([frame["entry"]] if "entry" in frame else []))
                return None
        return frame


def next_page(op: str, args: dict[str, Any], page: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments of the page after ``page`` of a paged read, or None after the last one.

    ``list`` and ``children`` follow their cursor; ``logs`` pages forward when it was asked
    ``after`` a seq, and back (older) otherwise, the way tail-first reading goes."""
    if op in ("list", "children"):
        return {**args, "cursor": page["next"]} if page.get("next") else None
    if not page.get("more"):
        return None
    if args.get("after") is not None:
        return {**args, "after": page["newest"]} if page.get("newest") is not None else None
    return {**args, "before": page["oldest"]} if page.get("oldest") is not None else None
