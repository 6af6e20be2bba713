"""The egress proxy: the only way out of a job whose network is ``allow``.

The job's network namespace has loopback only; its forwarder (roost/programs/egress_forwarder.py,
inside the walls) relays each connection to this job's own unix socket, bind-mounted into the
sandbox, served by roost/programs/egress_proxy.py under the job's shim (so it outlives the daemon as
the worker does). Which socket a connection came in on says which job it is: no token, nothing the job sends.
The proxy reads one request head (HTTP CONNECT, or a plain-HTTP absolute URL), checks the exact host
and port the job named against its policy before any name is resolved (the proxy resolves; the job
has no DNS), and then only streams bytes both ways. A refusal is answered 403 and handed to
``on_refused``, which has it written on the job's timeline; the person is never asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path
from typing import Callable

from roost.egress.request_head import HEAD_MAX, BadRequest, Request, SecretKey, parse_request, read_head
from roost.rules.egress import Policy

#: The most connections one job may hold open through its proxy at once; the bytes read per step
#: (a relay streams, it never holds more than this per direction); how long a server may take to answer
#: the connect.
JOB_CONNECTIONS = 64
CHUNK = 64 * 1024
CONNECT_TIMEOUT = 30.0
#: The most refused targets one proxy names on its job's timeline; the rest are counted, not named.
NAMED_REFUSALS = 32

#: (job id, the target as the job named it, why) -> None: says it on the job's timeline.
Refused = Callable[[str, str, str], None]


class JobProxy:
    """One job's egress proxy, serving the unix socket at ``path`` until :meth:`close`."""

    def __init__(self, job_id: str, policy: Policy, on_refused: Refused, keys: tuple[SecretKey, ...] = (),
                 max_connections: int = JOB_CONNECTIONS) -> None:
        self.job_id = job_id
        self.policy = policy
        self.keys = keys
        self.on_refused = on_refused
        self.max_connections = max_connections
        self.open = 0
        self.refused: set[str] = set()
        self.server: asyncio.AbstractServer | None = None
        self.starting: asyncio.Task[asyncio.AbstractServer] | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def listen(self, path: Path) -> None:
        """Serve the unix socket at ``path``: listening before this returns (so a first connection waits
        in its backlog, never refused), served once the loop runs the server's start."""
        self.take(bind_socket(path))

    def take(self, listener: socket.socket) -> None:
        """Serve ``listener``, a unix socket already listening (bound before the agent started)."""
        self.starting = asyncio.get_running_loop().create_task(
            asyncio.start_unix_server(self._serve, sock=listener, limit=HEAD_MAX))

    async def start(self, path: Path) -> None:
        self.listen(path)
        assert self.starting is not None
        self.server = await self.starting

    async def close(self) -> None:
        """Stop taking connections and cut the ones open (the job's worker is gone)."""
        if self.starting is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                self.server = await self.starting
        if self.server is not None:
            self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def refuse(self, target: str, why: str) -> None:
        """Name a refused target on the job's timeline once per proxy; past NAMED_REFUSALS, once more."""
        if target in self.refused or len(self.refused) > NAMED_REFUSALS:
            return
        self.refused.add(target)
        if len(self.refused) > NAMED_REFUSALS:
            target, why = "more hosts", f"further refusals are not named (over {NAMED_REFUSALS})"
        self.on_refused(self.job_id, target, why)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.open += 1
        try:
            if self.open > self.max_connections:
                await _answer(writer, 503, f"this job has {self.max_connections} connections open, the most it may")
                return
            await self._relay(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open -= 1
            self.tasks.discard(task)
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = parse_request(await read_head(reader), self.keys)
        except BadRequest as exc:
            await _answer(writer, 400, str(exc))
            return
        target = _target(request)
        if not self.policy.allows(request.host, request.port):
            why = f"{'CONNECT' if request.tunnel else 'HTTP'} to {target}: not on the job's network allow-list"
            self.refuse(target, why)
            await _answer(writer, 403, f"roost: {why} (network = {self.policy.mode!r})")
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(request.host, request.port, limit=CHUNK), CONNECT_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as exc:
            await _answer(writer, 502, f"roost: {target} could not be reached: {exc or 'timed out'}")
            return
        try:
            if request.tunnel:
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
                return
            up_writer.write(request.head)
            sending = asyncio.ensure_future(_pipe(reader, up_writer))
            try:  # one request per connection: the server's answer ends it
                await _pipe(up_reader, writer)
            finally:
                sending.cancel()
        finally:
            up_writer.close()


def bind_socket(path: Path | str) -> socket.socket:
    """A unix socket listening at ``path`` (what was there replaced), owner-only."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen(128)
    return listener


def _target(request: Request) -> str:
    return f"[{request.host}]:{request.port}" if ":" in request.host else f"{request.host}:{request.port}"


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Stream ``source`` into ``sink`` CHUNK bytes at a time (waiting for the sink to drain: nothing piles
    up in memory), then pass its end on as a half-close."""
    try:
        while chunk := await source.read(CHUNK):
            sink.write(chunk)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError):
        sink.close()


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 503: "Service Unavailable"}[status]
    body = (text + "\n").encode()
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                 f"Connection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
