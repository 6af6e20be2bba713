"""The blocking client, one request at a time: what the CLI uses (the rules of the exchange are
wire.py's, shared with the asyncio client)."""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from roost.client.wire import DEFAULT_TIMEOUT, Requests, hello_args, next_page, result
from roost.protocol import ProtocolError, decode, err
from roost.socket_connect import ClientError, connect_socket


class Client:
    """A blocking connection, one request at a time; what the CLI uses.

    Events that arrive while a call waits for its answer are kept for ``read_event``."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""
        self._requests = Requests()
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
            self.greeting = self.call("hello", timeout=timeout, **hello_args(client, job, token))
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
        req_id = self._send(op, args, timeout, snapshot)
        try:
            return self._answer(req_id, op, timeout)
        finally:
            self._requests.done(req_id)

    def _send(self, op: str, args: dict[str, Any], timeout: float,
              snapshot: list[dict[str, Any]] | None = None) -> int:
        req_id, request = self._requests.new(op, args, snapshot)
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(request)
        except OSError as exc:
            self._said_before_closing(exc)
        return req_id

    def _answer(self, req_id: int, op: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                frame = self.read_frame(max(deadline - time.monotonic(), 0.001))
            except ClientError as exc:
                if exc.code == "timeout":
                    self.close()  # a late answer would be taken for the next call's
                    raise ClientError("timeout", f"{op}: no answer from the daemon within {timeout:g}s") from None
                raise
            routed = self._requests.route(frame)
            if routed is None:
                continue
            if "event" in routed:
                self._events.append(routed)
            elif routed.get("id") in (req_id, None):  # an id-less error answers the one request waiting
                return result(routed)

    def _said_before_closing(self, exc: OSError) -> NoReturn:
        """The daemon closed before taking our request: raise what it said first (``busy``,
        ``no_hello``), which is in our receive buffer, or else that it is gone."""
        try:
            frame = self.read_frame(0.5)
        except ClientError:
            frame = {}
        if frame.get("ok") is False:
            result(frame)
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
            frame = self._requests.route(self.read_frame(timeout))
            if frame is not None and "event" in frame:
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
        args: dict[str, Any] = {"approval": approval, "decision": decision, "reason": reason or None, "rule": rule}
        return self.call("answer_approval", **args)  # what was not given is left out of the frame

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

    def approval_text(self, approval: str) -> str:
        """A pending approval's whole request as a person reads it, every page of it."""
        pages, offset = [], 0
        while offset is not None:
            page = self.call("approval_text", approval=approval, offset=offset)
            pages.append(str(page["text"]))
            offset = page["next"]
        return "".join(pages)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
