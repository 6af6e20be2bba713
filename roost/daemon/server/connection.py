"""One client connection: who it is, what it may still send us, and a bounded outgoing queue.

Everything the daemon sends a client goes through ``send``, ``reply`` or ``fail``: frames wait in
a queue counted in bytes, and one writer task per connection writes them in order, so a slow
client never blocks anyone else. A frame over MAX_FRAME is never written: a reply becomes a
``too_large`` error with its id, an event is dropped and logged. A client that stops reading
lets its queue pass QUEUE_BYTES; it is then sent ``lagged`` (best effort) and closed, so the
daemon's memory does not depend on how fast anyone reads.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from typing import Any, Awaitable, Callable

from roost.socket_connect import peer_credentials
from roost.protocol import (HELLO_TIMEOUT, LAGGED, MAX_FRAME, QUEUE_BYTES, ErrorCode, ProtocolError, encode, err, ok,
                            read_frame)

log = logging.getLogger("roost.daemon")

#: At most this many bytes are handed to the socket in one write (and sit in its buffer).
WRITE_CHUNK = 256 * 1024
#: Seconds a closing connection has to take its last frames before it is cut off.
CLOSE_GRACE = 2.0
#: Requests of one connection running at once; past it the daemon stops reading from it, so a
#: client that floods requests waits for its answers instead of growing the daemon.
MAX_IN_FLIGHT = 64

Handle = Callable[["Connection", bytes], Awaitable[None]]


class Connection:
    """One client: a person, or a job (``job``: below its worker's shim, or proven by its token where
    that cannot be seen), once its hello succeeded.
    ``not_person`` says why its peer cannot be a person (a process the daemon started); ``host``
    names the host whose socket it came through: then only that host's jobs may say hello."""

    _ids = itertools.count(1)

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, not_person: str | None = None,
                 host: str | None = None) -> None:
        self.conn_id = next(self._ids)
        self.reader = reader
        self.writer = writer
        self.hello = False
        self.not_person = not_person
        self.host = host
        self.job: str | None = None
        self.client = "?"
        self.queued_bytes = 0
        #: When the last request came in (the loop's clock), and the requests running now: what
        #: tells an idle connection (``idle_for``).
        self.last_request = asyncio.get_running_loop().time()
        self._running: set[asyncio.Task[None]] = set()
        self._queue: deque[bytes] = deque()
        self._wake = asyncio.Event()
        self._closing = False
        #: The cut-off of a closing connection's writer; cancelled once it is done, so a closed
        #: connection leaves no timer to wake the daemon.
        self._cutoff: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self._writer_task = asyncio.create_task(self._write_loop())

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def peer_pid(self) -> int:
        """The pid of the process that connected (SO_PEERCRED); 0 when the kernel does not say."""
        sock = self.writer.get_extra_info("socket")
        try:
            return peer_credentials(sock)[0] if sock is not None else 0
        except (OSError, AttributeError):
            return 0

    def idle_for(self, now: float) -> float:
        """Seconds since its last request, 0 while one runs (a subscription is the publisher's to say)."""
        return 0.0 if self._running else now - self.last_request

    def __repr__(self) -> str:
        return f"connection {self.conn_id} ({self.client}{', job ' + self.job if self.job else ''})"

    # -- what goes out -------------------------------------------------------------------------------
    def send(self, frame: dict[str, Any] | bytes) -> None:
        """Queue an event (a dict, or a frame already encoded). One over MAX_FRAME is dropped and
        logged: the client could not read it anyway."""
        data = frame if isinstance(frame, bytes) else encode(frame)
        if len(data) > MAX_FRAME:
            log.warning("%r: dropped an event of %d bytes, over the %d-byte frame limit: %s", self, len(data),
                        MAX_FRAME, data[:100].decode(errors="replace"))
            return
        self._enqueue(data)

    def reply(self, req_id: Any, result: Any) -> None:
        """Queue a request's result; one that would not fit in a frame becomes ``too_large``."""
        data = encode(ok(req_id, result))
        if len(data) > MAX_FRAME:
            data = encode(err(req_id, ProtocolError(
                ErrorCode.TOO_LARGE, f"reply of {len(data)} bytes is over the {MAX_FRAME}-byte limit; page it")))
        self._enqueue(data)

    def fail(self, req_id: Any, error: ProtocolError) -> None:
        """Queue an error; its message is cut should it not fit a frame (errors quote capped
        values, roost/bounds.py, so this is the last guard, not the rule)."""
        data = encode(err(req_id, error))
        if len(data) > MAX_FRAME:
            data = encode(err(req_id, ProtocolError(error.code, error.message[:4096] + "…")))
        self._enqueue(data)

    def _enqueue(self, data: bytes) -> None:
        if self._closing:
            return
        self._queue.append(data)
        self.queued_bytes += len(data)
        if self.queued_bytes > QUEUE_BYTES:
            log.warning("%r lagged: %d bytes waited to be written; told so and dropped", self, self.queued_bytes)
            self._queue.clear()
            self.queued_bytes = 0
            self._queue.append(encode(LAGGED))
            self.close()
        self._wake.set()

    def _take(self) -> bytes:
        """The next frames to write, WRITE_CHUNK bytes or one frame, whichever is more."""
        parts = [self._queue.popleft()]
        size = len(parts[0])
        while self._queue and size + len(self._queue[0]) <= WRITE_CHUNK:
            parts.append(self._queue.popleft())
            size += len(parts[-1])
        self.queued_bytes -= size
        return b"".join(parts)

    async def _write_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._queue:
                    self.writer.write(self._take())
                    await self.writer.drain()
                if self._closing:
                    break
        except (ConnectionError, OSError):
            pass
        finally:
            self._queue.clear()
            self.queued_bytes = 0
            self.writer.close()
            if self._cutoff is not None:
                self._cutoff.cancel()

    def close(self, grace: float = CLOSE_GRACE) -> None:
        """Take no more frames, write what is queued, then close; a peer that does not read them
        within ``grace`` seconds is cut off."""
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        self._cutoff = self._loop.call_later(grace, self.abort)

    def abort(self) -> None:
        """Drop the connection now, whatever is still queued."""
        self._closing = True
        self._writer_task.cancel()
        self.writer.transport.abort()

    async def closed(self) -> None:
        """Wait until the writer has finished (everything written, or the connection cut)."""
        await asyncio.wait({self._writer_task})

    # -- what comes in ------------------------------------------------------------------------------
    async def serve(self, handle: Handle) -> None:
        """Read frames until the peer hangs up or the connection closes. Each request runs as its
        own task, at most MAX_IN_FLIGHT at once; until a hello succeeds they run one at a time,
        since the hello decides who this is. No hello within HELLO_TIMEOUT closes the connection."""
        overdue = self._loop.call_later(HELLO_TIMEOUT, self._hello_overdue)
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        tasks = self._running

        def done(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            slots.release()

        try:
            while not self._closing:
                try:
                    line = await read_frame(self.reader)
                except ProtocolError as exc:
                    self.fail(exc.req_id, exc)
                    continue
                if line is None:
                    break
                if not line.strip():
                    continue
                self.last_request = self._loop.time()
                await slots.acquire()
                task = asyncio.create_task(handle(self, line))
                tasks.add(task)
                task.add_done_callback(done)
                if not self.hello:
                    await task
        except (ConnectionError, OSError):
            pass
        finally:
            overdue.cancel()
            for task in list(tasks):
                task.cancel()
            self.close()

    def _hello_overdue(self) -> None:
        if not self.hello and not self._closing:
            log.info("%r said no hello within %.0fs; closed", self, HELLO_TIMEOUT)
            self.fail(None, ProtocolError(ErrorCode.NO_HELLO, f"no hello within {HELLO_TIMEOUT:.0f}s; closing"))
            self.close()  # the writer closes the socket, which ends the read loop
