"""Clients of the control socket: a blocking one for the CLI, an asyncio one for the app and agents.

Both say hello first, as a person (no job) or as a job (``ROOST_JOB_ID`` and ``ROOST_TOKEN``
from the environment the daemon gave its worker), so the daemon knows who is calling. Every
call has a timeout: nothing waits forever on a daemon that never answers. An error frame with
no id (a frame the daemon could not read) answers the oldest request still waiting.

One file on purpose: the two clients keep the same protocol rules (hello, timeouts, id-less
errors, paging, subscription snapshots) through helpers they share; apart, one would copy the other.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from roost import paths as paths_mod
from roost.protocol import MAX_FRAME, PROTOCOL_VERSION, QUEUE_BYTES, ErrorCode, ProtocolError, decode, encode, err
from roost.socket_connect import UNREACHABLE, ClientError, connect_socket, connect_socket_async

if TYPE_CHECKING:
    import asyncio

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


def approval_args(approval: str, decision: str, reason: str = "", rule: str | None = None) -> dict[str, Any]:
    """The arguments of ``answer_approval``, leaving out what was not given."""
    args: dict[str, Any] = {"approval": approval, "decision": decision}
    if reason:
        args["reason"] = reason
    if rule is not None:
        args["rule"] = rule
    return args


def _hello_args(client: str, job: str | None, token: str | None) -> dict[str, Any]:
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


def _result(frame: dict[str, Any]) -> Any:
    if frame.get("ok"):
        return frame.get("result")
    error = frame.get("error") or {}
    raise ClientError(error.get("code", ErrorCode.INTERNAL), error.get("message", "request failed"))


def _request(req_id: int, op: str, args: dict[str, Any]) -> bytes:
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


def _snapshot_items(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows or timeline entry one snapshot event carries."""
    return event.get("rows") or ([event["entry"]] if "entry" in event else [])


def _lagged() -> ClientError:
    return ClientError(LAGGED, "the daemon dropped this connection: it fell behind reading events")


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


class Client:
    """A blocking connection, one request at a time; what the CLI uses.

    Events that arrive while a call waits for its answer are kept for ``read_event``."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""
        self._ids = itertools.count(1)
        self._events: deque[dict[str, Any]] = deque()
        #: What the daemon said to our hello (a person's carries ``store_notice``).
        self.greeting: dict[str, Any] = {}

    @classmethod
    def connect(cls, socket_path: Path, client: str = "cli", job: str | None = None,
                token: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> "Client":
        """Connect and say hello; ``timeout`` bounds the connect and the hello."""
        sock = connect_socket(socket_path, timeout)
        sock.settimeout(timeout)
        self = cls(sock)
        try:
            self.greeting = self.call("hello", timeout=timeout, **_hello_args(client, job, token))
        except ClientError:
            sock.close()
            raise
        return self

    def read_frame(self, timeout: float | None = None) -> dict[str, Any]:
        """The next frame off the socket (a response or an event); None ``timeout`` waits as long
        as the connection lives."""
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks = [self._buf]
        while b"\n" not in chunks[-1]:  # only new bytes are searched: a page comes in many chunks
            self._sock.settimeout(None if deadline is None else max(deadline - time.monotonic(), 0.001))
            try:
                chunk = self._sock.recv(262144)
            except TimeoutError:
                raise ClientError("timeout", f"no answer from the daemon within {timeout:g}s") from None
            except OSError as exc:
                raise ClientError("disconnected", f"lost the daemon: {exc.strerror or exc}") from None
            if not chunk:
                self._buf = b"".join(chunks)
                raise ClientError("disconnected", "the daemon closed the connection")
            chunks.append(chunk)
        line, _, self._buf = b"".join(chunks).partition(b"\n")
        try:
            return decode(line)
        except ProtocolError as exc:  # unreadable: it answers whatever waits, like an id-less error
            return err(exc.req_id, exc)

    def _exchange(self, op: str, args: dict[str, Any], timeout: float,
                  snapshot: list[dict[str, Any]] | None = None) -> Any:
        return self._answer(self._send(op, args, timeout), op, timeout, snapshot)

    def _send(self, op: str, args: dict[str, Any], timeout: float) -> int:
        req_id = next(self._ids)
        request = _request(req_id, op, args)
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(request)
        except OSError as exc:
            self._said_before_closing(exc)
        return req_id

    def _answer(self, req_id: int, op: str, timeout: float, snapshot: list[dict[str, Any]] | None = None) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                frame = self.read_frame(max(deadline - time.monotonic(), 0.001))
            except ClientError as exc:
                if exc.code == "timeout":
                    self.close()  # a late answer would be taken for the next call's
                    raise ClientError("timeout", f"{op}: no answer from the daemon within {timeout:g}s") from None
                raise
            if "event" in frame:
                if frame["event"] == "lagged":
                    raise _lagged()
                if snapshot is not None and frame.get("req") == req_id:
                    snapshot.extend(_snapshot_items(frame))
                else:
                    self._events.append(frame)
            elif frame.get("id") in (req_id, None):
                return _result(frame)

    def _said_before_closing(self, exc: OSError) -> NoReturn:
        """The daemon closed before taking our request: raise what it said first (``busy``,
        ``no_hello``), which is in our receive buffer, or else that it is gone."""
        try:
            frame = self.read_frame(0.5)
        except ClientError:
            frame = {}
        if frame.get("ok") is False:
            _result(frame)
        raise ClientError("disconnected", f"lost the daemon: {exc.strerror or exc}") from None

    def call(self, op: str, timeout: float = DEFAULT_TIMEOUT, **args: Any) -> Any:
        """Send one request and return its result, or raise ClientError with the daemon's words
        (code ``timeout`` when no answer came within ``timeout`` seconds)."""
        return self._exchange(op, args, timeout)

    def subscribe(self, what: str, timeout: float = DEFAULT_TIMEOUT,
                  **args: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Subscribe; returns the reply (``sub``, ``count``, ``more``) and the snapshot's rows or
        entries. Live events follow through ``read_event``."""
        snapshot: list[dict[str, Any]] = []
        result = self._exchange("subscribe", {"what": what, **args}, timeout, snapshot)
        return result, snapshot

    def read_event(self, timeout: float | None = None) -> dict[str, Any]:
        """The next pushed event; raises ClientError ``lagged`` when the daemon dropped this
        reader, ``disconnected`` when the connection ended."""
        while not self._events:
            frame = self.read_frame(timeout)
            if frame.get("event") == "lagged":
                raise _lagged()
            if "event" in frame:
                return frame
        return self._events.popleft()

    def pages(self, op: str, timeout: float = DEFAULT_TIMEOUT, **args: Any) -> Iterator[dict[str, Any]]:
        """Every page of ``list``, ``children`` or ``logs`` (see ``next_page``), one request per page. The next
        page is asked for as soon as a page arrives, so the daemon builds it while the caller
        works on this one (the two take turns otherwise)."""
        next_args: dict[str, Any] | None = args
        req_id = self._send(op, args, timeout)
        while next_args is not None:
            page = self._answer(req_id, op, timeout)
            next_args = next_page(op, next_args, page)
            if next_args is not None:
                req_id = self._send(op, next_args, timeout)
            yield page

    def rows(self, **filters: Any) -> Iterator[dict[str, Any]]:
        """Every row ``list`` has for ``filters``, page by page (memory holds one page)."""
        for page in self.pages("list", **filters):
            yield from page["rows"]

    def children(self, job: str | None = None) -> Iterator[dict[str, Any]]:
        """Every child of ``job`` (None: the calling job's), page by page."""
        for page in self.pages("children", **({"job": job} if job else {})):
            yield from page["rows"]

    def answer_approval(self, approval: str, decision: str, reason: str = "", rule: str | None = None) -> Any:
        """A person's answer to one approval: ``once``, ``job`` (with ``rule``, or the same tool with
        the same command prefix) or ``deny`` (``reason`` is what the agent hears)."""
        return self.call("answer_approval", **approval_args(approval, decision, reason, rule))

    def search(self, text: str, **args: Any) -> dict[str, Any]:
        """One page of timeline entries matching ``text``, newest first (``before``: the page's
        ``next``; ``under``, ``archived``, ``limit``: docs/protocols.md#search)."""
        return dict(self.call("search", text=text, **args))

    def fork(self, job: str, **args: Any) -> dict[str, Any]:
        """A new job going on from ``job``'s conversation so far (``worktree``, ``title``, ``prompt``); its row."""
        return dict(self.call("fork", job=job, **args))

    def pending_approvals(self) -> Iterator[dict[str, Any]]:
        """Every pending approval, each with its ``job``: read from the rows of waiting jobs."""
        for row in self.rows(states=["waiting"]):
            for entry in row.get("approvals") or ():
                yield {**entry, "job": row["id"], "title": row.get("title", "")}

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """An asyncio connection: concurrent requests matched by id, and a stream of pushed events.

    asyncio is imported inside its methods so that the blocking CLI, which never uses this
    class, does not pay ~50 ms to load it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import asyncio

        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        #: Requests waiting for their answer, oldest first (an id-less error answers the first).
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        #: Snapshot events collected for subscribe requests still waiting, by request id.
        self._snapshots: dict[int, list[dict[str, Any]]] = {}
        #: Pushed events not yet taken by ``events``, each with its size; ``_queued`` bytes in all.
        self._events: asyncio.Queue[tuple[dict[str, Any], int] | None] = asyncio.Queue()
        self._queued = 0
        self._reader_task: asyncio.Task[None] | None = None
        #: Why the connection ended (None while it lives); ``end_code`` is ``lagged`` or ``disconnected``.
        self.end_reason: str | None = None
        self.end_code: str | None = None
        #: What the daemon said to our hello (a person's carries ``store_notice``).
        self.greeting: dict[str, Any] = {}

    @classmethod
    async def connect(cls, socket_path: Path, client: str = "app", job: str | None = None,
                      token: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> "AsyncClient":
        """Connect and say hello, within ``timeout`` seconds."""
        import asyncio

        sock = await connect_socket_async(socket_path, timeout)
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=MAX_FRAME)
        self = cls(reader, writer)
        self._reader_task = asyncio.create_task(self._read_loop())
        try:
            self.greeting = await self.call("hello", timeout=timeout, **_hello_args(client, job, token))
        except ClientError:
            await self.close()
            raise
        return self

    async def _read_loop(self) -> None:
        import asyncio

        from roost.protocol import read_frame

        code, reason = "disconnected", "the daemon closed the connection"
        try:
            while True:
                try:
                    line = await read_frame(self._reader)
                    if line is None:
                        break
                    frame = decode(line)
                except ProtocolError as exc:  # a frame too big or broken still answers someone
                    frame, line = err(exc.req_id, exc), b""
                if frame.get("event") == "lagged":
                    code, reason = LAGGED, _lagged().message
                    break
                if not self._dispatch(frame, len(line)):
                    code, reason = LAGGED, (f"this client fell behind taking the daemon's events (over {QUEUE_BYTES} "
                                            "bytes waiting): it lets the connection go, as the daemon would")
                    break
        except (ConnectionError, OSError) as exc:
            reason = f"lost the daemon: {exc}"
        except asyncio.CancelledError:
            reason = "the connection was closed"
        finally:
            self.end_code, self.end_reason = code, reason
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ClientError(code, reason))
            self._pending.clear()
            self._events.put_nowait(None)

    def _dispatch(self, frame: dict[str, Any], size: int) -> bool:
        """Hand a frame to whoever waits for it; False when events waiting for ``events`` would pass
        QUEUE_BYTES (a consumer that stopped keeping up: like the daemon, let the connection go
        rather than hold without bound; the caller reconnects and subscribes again)."""
        if "event" in frame:
            collected = self._snapshots.get(frame.get("req"))  # type: ignore[arg-type]
            if collected is not None:
                collected.extend(_snapshot_items(frame))
                return True
            if self._queued + size > QUEUE_BYTES:
                return False
            self._queued += size
            self._events.put_nowait((frame, size))
            return True
        req_id = frame.get("id")
        if req_id is None:
            req_id = next(iter(self._pending), None)
        fut = self._pending.pop(req_id, None) if req_id is not None else None
        if fut is not None and not fut.done():
            fut.set_result(frame)
        return True

    async def _exchange(self, op: str, args: dict[str, Any], timeout: float,
                        snapshot: list[dict[str, Any]] | None = None) -> Any:
        import asyncio

        if self.end_reason is not None:
            raise ClientError(self.end_code or "disconnected", self.end_reason)
        req_id = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        if snapshot is not None:
            self._snapshots[req_id] = snapshot
        try:
            self._writer.write(_request(req_id, op, args))
            async with asyncio.timeout(timeout):
                await self._writer.drain()
                frame = await fut
        except TimeoutError:
            raise ClientError("timeout", f"{op}: no answer from the daemon within {timeout:g}s") from None
        except (ConnectionError, OSError) as exc:
            raise ClientError("disconnected", f"lost the daemon: {exc}") from None
        finally:
            self._pending.pop(req_id, None)
            self._snapshots.pop(req_id, None)
        return _result(frame)

    async def call(self, op: str, timeout: float = DEFAULT_TIMEOUT, **args: Any) -> Any:
        """One request; raises ClientError with the daemon's code and words when refused, or
        ``timeout`` when no answer came within ``timeout`` seconds."""
        return await self._exchange(op, args, timeout)

    async def answer_approval(self, approval: str, decision: str, reason: str = "", rule: str | None = None) -> Any:
        """A person's answer to one approval (``Client.answer_approval``)."""
        return await self.call("answer_approval", **approval_args(approval, decision, reason, rule))

    async def search(self, text: str, **args: Any) -> dict[str, Any]:
        """One page of timeline entries matching ``text`` (``Client.search``)."""
        return dict(await self.call("search", text=text, **args))

    async def fork(self, job: str, **args: Any) -> dict[str, Any]:
        """Fork ``job`` (``Client.fork``); the new job's row."""
        return dict(await self.call("fork", job=job, **args))

    async def subscribe(self, what: str, timeout: float = DEFAULT_TIMEOUT,
                        **args: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Subscribe; returns the reply (``sub``, ``count``, ``more``) and the snapshot's rows or
        entries, collected from the events tagged with this request. Live events follow in
        ``events()``."""
        snapshot: list[dict[str, Any]] = []
        result = await self._exchange("subscribe", {"what": what, **args}, timeout, snapshot)
        return result, snapshot

    async def pages(self, op: str, timeout: float = DEFAULT_TIMEOUT, **args: Any) -> AsyncIterator[dict[str, Any]]:
        """Every page of ``list``, ``children`` or ``logs`` (see ``next_page``), one request per page."""
        next_args: dict[str, Any] | None = args
        while next_args is not None:
            page = await self.call(op, timeout=timeout, **next_args)
            yield page
            next_args = next_page(op, next_args, page)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Pushed events until the connection ends; then ``end_code`` and ``end_reason`` say why
        (``lagged``: the daemon dropped this reader for falling behind; subscribe again)."""
        while True:
            item = await self._events.get()
            if item is None:
                self._events.put_nowait(None)  # a second reader ends too
                return
            event, size = item
            self._queued -= size
            yield event

    async def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass


def probe(socket_path: Path, timeout: float = 2.0) -> ClientError | None:
    """None when a daemon answers hello on the socket, else the error that says why not."""
    try:
        Client.connect(socket_path, client="probe", timeout=timeout).close()
        return None
    except ClientError as exc:
        return exc


def daemon_running(socket_path: Path) -> bool:
    """Whether a daemon is there: it answered, even if only to say it is busy, or it holds the
    socket without answering in time. Only an unreachable socket means none runs."""
    error = probe(socket_path)
    return error is None or error.code != UNREACHABLE


def start_daemon(paths: paths_mod.Paths, config: str | None = None, timeout: float = 15.0) -> None:
    """Start a daemon in the background and wait until it answers; raise ClientError saying why not."""
    import subprocess  # only when a daemon must be started: most CLI runs find one
    import sys

    paths.ensure()
    cmd = [sys.executable, "-m", "roost.daemon"]
    if config:
        cmd += ["--config", str(config)]
    log = os.fdopen(paths_mod.open_private(paths.daemon_log), "ab")  # 0600 from creation, whatever the umask
    start = log.tell()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                            close_fds=True)
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon_running(paths.socket):
            return
        rc = proc.poll()
        if rc is not None:
            if daemon_running(paths.socket):  # another one won the race: that is fine
                return
            raise ClientError("daemon", f"the daemon exited with code {rc}: {_log_tail(paths.daemon_log, start)}")
        time.sleep(0.05)
    raise ClientError("daemon", f"the daemon did not answer within {timeout:.0f}s: {_log_tail(paths.daemon_log, start)}")


def _log_tail(path: Path, start: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            text = fh.read().decode(errors="replace").strip()
    except OSError:
        return "(no log)"
    lines = text.splitlines()[-5:]
    return " | ".join(lines) if lines else f"(nothing in {path})"


def connect(client: str = "cli", autostart: bool = True, config: str | None = None,
            environ: dict[str, str] | None = None) -> Client:
    """A blocking client for this environment, starting the daemon only when none is there: a
    daemon that answered with an error (busy, a timeout) is reported, never doubled."""
    paths = paths_mod.resolve(environ)
    job, token = job_identity(environ)
    try:
        return Client.connect(paths.socket, client=client, job=job, token=token)
    except ClientError as exc:
        if not autostart or exc.code != UNREACHABLE:
            raise
    start_daemon(paths, config=config)
    return Client.connect(paths.socket, client=client, job=job, token=token)
