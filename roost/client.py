"""Clients of the control socket: a blocking one for the CLI, an asyncio one for the app and agents.

Both say hello first, as a person (no job) or as a job (``ROOST_JOB_ID`` and ``ROOST_TOKEN``
from the environment the daemon gave its worker), so the daemon knows who is calling.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator

from roost import paths as paths_mod
if TYPE_CHECKING:
    import asyncio

from roost.protocol import MAX_FRAME, PROTOCOL_VERSION, ErrorCode, ProtocolError, decode, encode, read_frame


class ClientError(Exception):
    """The daemon refused a request, or could not be reached; ``code`` says which."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def job_identity(environ: dict[str, str] | None = None) -> tuple[str | None, str | None]:
    """The (job id, token) a worker's environment carries, or (None, None) for a person."""
    env = os.environ if environ is None else environ
    return env.get("ROOST_JOB_ID") or None, env.get("ROOST_TOKEN") or None


def _hello(client: str, job: str | None, token: str | None) -> dict[str, Any]:
    args: dict[str, Any] = {"version": PROTOCOL_VERSION, "client": client}
    if job:
        args.update(job=job, token=token)
    return {"id": 0, "op": "hello", "args": args}


def _result(frame: dict[str, Any]) -> Any:
    if frame.get("ok"):
        return frame.get("result")
    error = frame.get("error") or {}
    raise ClientError(error.get("code", ErrorCode.INTERNAL), error.get("message", "request failed"))


class Client:
    """A blocking connection, one request at a time; what the CLI uses."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = b""
        self._ids = itertools.count(1)

    @classmethod
    def connect(cls, socket_path: Path, client: str = "cli", job: str | None = None,
                token: str | None = None, timeout: float | None = 30.0) -> "Client":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(str(socket_path))
        except OSError as exc:
            sock.close()
            raise ClientError("unreachable", f"cannot reach the daemon at {socket_path}: {exc.strerror or exc}") from None
        self = cls(sock)
        self._send(_hello(client, job, token))
        _result(self._read_response(0))
        return self

    def _send(self, frame: dict[str, Any]) -> None:
        self._sock.sendall(encode(frame))

    def read_frame(self) -> dict[str, Any]:
        """The next frame the daemon sends (a response or an event)."""
        while b"\n" not in self._buf:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ClientError("disconnected", "the daemon closed the connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return decode(line)

    def _read_response(self, req_id: int) -> dict[str, Any]:
        while True:
            frame = self.read_frame()
            if "event" not in frame and frame.get("id") == req_id:
                return frame

    def call(self, op: str, **args: Any) -> Any:
        """Send one request and return its result, or raise ClientError with the daemon's words."""
        req_id = next(self._ids)
        self._send({"id": req_id, "op": op, "args": {k: v for k, v in args.items() if v is not None}})
        return _result(self._read_response(req_id))

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
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._reader_task: asyncio.Task[None] | None = None

    @classmethod
    async def connect(cls, socket_path: Path, client: str = "app", job: str | None = None,
                      token: str | None = None) -> "AsyncClient":
        import asyncio

        try:
            reader, writer = await asyncio.open_unix_connection(str(socket_path), limit=MAX_FRAME)
        except OSError as exc:
            raise ClientError("unreachable", f"cannot reach the daemon at {socket_path}: {exc.strerror or exc}") from None
        self = cls(reader, writer)
        self._reader_task = asyncio.create_task(self._read_loop())
        await self._request(_hello(client, job, token)["args"], op="hello")
        return self

    async def _read_loop(self) -> None:
        import asyncio

        try:
            while True:
                try:
                    line = await read_frame(self._reader)
                except ProtocolError:
                    continue
                if line is None:
                    break
                frame = json.loads(line)
                if "event" in frame:
                    self._events.put_nowait(frame)
                else:
                    fut = self._pending.pop(frame.get("id"), None)
                    if fut is not None and not fut.done():
                        fut.set_result(frame)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ClientError("disconnected", "the daemon closed the connection"))
            self._pending.clear()
            self._events.put_nowait(None)

    async def _request(self, args: dict[str, Any], op: str) -> Any:
        import asyncio

        req_id = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = fut
        self._writer.write(encode({"id": req_id, "op": op, "args": args}))
        await self._writer.drain()
        return _result(await fut)

    async def call(self, op: str, **args: Any) -> Any:
        """One request; raises ClientError with the daemon's code and words when refused."""
        return await self._request({k: v for k, v in args.items() if v is not None}, op=op)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """Pushed events (after ``watch``), until the connection ends."""
        while True:
            event = await self._events.get()
            if event is None:
                return
            yield event

    async def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError):
            pass


def daemon_running(socket_path: Path) -> bool:
    """Whether a daemon answers hello on the socket."""
    try:
        Client.connect(socket_path, client="probe", timeout=2.0).close()
        return True
    except (ClientError, OSError):
        return False


def start_daemon(paths: paths_mod.Paths, config: str | None = None, timeout: float = 15.0) -> None:
    """Start a daemon in the background and wait until it answers; raise ClientError saying why not."""
    paths.ensure()
    cmd = [sys.executable, "-m", "roost.daemon"]
    if config:
        cmd += ["--config", str(config)]
    log = open(paths.daemon_log, "ab")
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
    """A blocking client for this environment, starting the daemon when none runs."""
    paths = paths_mod.resolve(environ)
    job, token = job_identity(environ)
    try:
        return Client.connect(paths.socket, client=client, job=job, token=token)
    except ClientError as exc:
        if not autostart or exc.code != "unreachable":
            raise
    start_daemon(paths, config=config)
    return Client.connect(paths.socket, client=client, job=job, token=token)
