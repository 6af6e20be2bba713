"""The asyncio client: concurrent requests matched by id, and a stream of pushed events; what the
app and the agents' tools use (the rules of the exchange are wire.py's, shared with the blocking
client). asyncio is imported inside its methods so that the blocking CLI, which imports this
package but never this class's code, does not pay ~50 ms to load it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roost.client.wire import DEFAULT_TIMEOUT, LAGGED, Requests, hello_args, next_page, result
from roost.protocol import MAX_FRAME, QUEUE_BYTES, ProtocolError, decode, err
from roost.socket_connect import ClientError, connect_socket_async

if TYPE_CHECKING:
    import asyncio


class AsyncClient:
    """An asyncio connection: concurrent requests matched by id, and a stream of pushed events."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import asyncio

        self._reader = reader
        self._writer = writer
        self._requests = Requests()
        #: Requests waiting for their answer, oldest first (an id-less error answers the first).
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
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
            self.greeting = await self.call("hello", timeout=timeout, **hello_args(client, job, token))
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
                if not self._dispatch(frame, len(line)):
                    code, reason = LAGGED, (f"this client fell behind taking the daemon's events (over {QUEUE_BYTES} "
                                            "bytes waiting): it lets the connection go, as the daemon would")
                    break
        except ClientError as exc:  # the daemon dropped this reader (Requests.route)
            code, reason = exc.code, exc.message
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
        routed = self._requests.route(frame)
        if routed is None:
            return True
        if "event" in routed:
            if self._queued + size > QUEUE_BYTES:
                return False
            self._queued += size
            self._events.put_nowait((routed, size))
            return True
        req_id = routed.get("id")
        if req_id is None:
            req_id = next(iter(self._pending), None)
        fut = self._pending.pop(req_id, None) if req_id is not None else None
        if fut is not None and not fut.done():
            fut.set_result(routed)
        return True

    async def _exchange(self, op: str, args: dict[str, Any], timeout: float,
                        snapshot: list[dict[str, Any]] | None = None) -> Any:
        import asyncio

        if self.end_reason is not None:
            raise ClientError(self.end_code or "disconnected", self.end_reason)
        req_id, request = self._requests.new(op, args, snapshot)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        try:
            self._writer.write(request)
            async with asyncio.timeout(timeout):
                await self._writer.drain()
                frame = await fut
        except TimeoutError:
            raise ClientError("timeout", f"{op}: no answer from the daemon within {timeout:g}s") from None
        except (ConnectionError, OSError) as exc:
            raise ClientError("disconnected", f"lost the daemon: {exc}") from None
        finally:
            self._pending.pop(req_id, None)
            self._requests.done(req_id)
        return result(frame)

    async def call(self, op: str, timeout: float = DEFAULT_TIMEOUT, **args: Any) -> Any:
        """One request; raises ClientError with the daemon's code and words when refused, or
        ``timeout`` when no answer came within ``timeout`` seconds."""
        return await self._exchange(op, args, timeout)

    async def subscribe(self, what: str, timeout: float = DEFAULT_TIMEOUT,
                        **args: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Subscribe; returns the reply (``sub``, ``count``, ``more``) and the snapshot's rows or
        entries, collected from the events tagged with this request. Live events follow in
        ``events()``."""
        snapshot: list[dict[str, Any]] = []
        result = await self._exchange("subscribe", {"what": what, **args}, timeout, snapshot)
        return result, snapshot

    async def pages(self, op: str, timeout: float = DEFAULT_TIMEOUT, **args: Any) -> AsyncIterator[dict[str, Any]]:
        """Every page of ``list``, ``children`` or ``logs`` (see ``next_page``), one request per page,
        the next asked for as soon as a page arrives (as ``Client.pages`` does)."""
        import asyncio

        next_args: dict[str, Any] | None = args
        asked: asyncio.Future[Any] | None = asyncio.ensure_future(self.call(op, timeout=timeout, **args))
        try:
            while asked is not None:
                page = await asked
                next_args = next_page(op, next_args, page)  # type: ignore[arg-type]
                asked = None if next_args is None else asyncio.ensure_future(self.call(op, timeout=timeout, **next_args))
                yield page
        finally:
            if asked is not None:  # the caller stopped early: the page asked ahead is not wanted
                asked.cancel()

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
