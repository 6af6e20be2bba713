"""The control socket: accepts clients of this user only, reads frames, dispatches operations.

Set-up, serve and clean-up are three explicit steps (``Daemon.setup``, ``serve``, ``cleanup``).
One daemon per state directory: a lock file held for the daemon's life refuses a second one, and
a socket left by a killed daemon is replaced, since holding the lock proves nobody serves it.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import logging
import os
import signal
import socket
import struct
import time
from pathlib import Path
from typing import Any

from roost import __version__
from roost.config import ConfigError, ConfigWatcher
from roost.daemon.store import Store, StoreError
from roost.daemon.supervisor import Supervisor
from roost.paths import Paths
from roost.protocol import (JOB_ONLY_OPS, MAX_FRAME, PROTOCOL_VERSION, ErrorCode, ProtocolError, decode, encode,
                            err, ok, parse_request, read_frame)

log = logging.getLogger("roost.daemon")


class AlreadyRunning(Exception):
    """Another daemon holds this state directory's lock."""


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a unix socket (SO_PEERCRED: Linux, which is
    where roost runs; elsewhere the attribute is missing and every peer is refused)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


class Connection:
    """One client: who it is (a person, or a job proven by its token) and what it watches."""

    _ids = itertools.count(1)

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.conn_id = next(self._ids)
        self.writer = writer
        self.hello = False
        self.job: str | None = None
        self.client = "?"

    def push(self, frame: dict[str, Any]) -> None:
        if not self.writer.is_closing():
            self.writer.write(encode(frame))


class Daemon:
    def __init__(self, paths: Paths, config_path: Path | None) -> None:
        self.paths = paths
        self.config_path = config_path
        self.watcher: ConfigWatcher | None = None
        self.store: Store | None = None
        self.supervisor: Supervisor | None = None
        self.server: asyncio.base_events.Server | None = None
        self._lock_fd: int | None = None
        self._stopping = asyncio.Event()
        self.started_at = time.time()

    # -- 1. set-up ---------------------------------------------------------------------------------
    def setup(self) -> None:
        """Take the lock, read the config, open the store, recover records. Raises AlreadyRunning,
        ConfigError or StoreError with a message that says what is wrong."""
        self.paths.ensure()
        fd = os.open(self.paths.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise AlreadyRunning(f"another roost daemon (pid {other}) is running on {self.paths.state_dir}") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd
        self.watcher = ConfigWatcher(self.config_path)
        self.store = Store(self.paths.store)
        self.supervisor = Supervisor(self.store, self.paths, lambda: self.watcher.config)  # type: ignore[union-attr]
        self.supervisor.recover()

    # -- 2. serve ------------------------------------------------------------------------------------
    async def serve(self) -> None:
        assert self.supervisor is not None
        sock_path = self.paths.socket
        if sock_path.exists() or sock_path.is_symlink():
            sock_path.unlink()  # left by a killed daemon: we hold the lock, nobody serves it
        old_umask = os.umask(0o177)  # owner-only from the moment it exists
        try:
            self.server = await asyncio.start_unix_server(self._client, path=str(sock_path), limit=MAX_FRAME)
        finally:
            os.umask(old_umask)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        self.supervisor.after_recovery()
        tick = asyncio.create_task(self.supervisor.tick_forever())
        reload = asyncio.create_task(self._watch_config())
        log.info("roost daemon %s serving on %s (pid %d)", __version__, sock_path, os.getpid())
        await self._stopping.wait()
        tick.cancel()
        reload.cancel()

    async def _watch_config(self) -> None:
        assert self.watcher is not None
        reported: object = None
        while True:
            await asyncio.sleep(1.0)
            if self.watcher.poll():
                log.info("config reloaded from %s", self.watcher.config.source)
            error = self.watcher.last_error
            if error is not None and str(error) != reported:
                log.error("config not reloaded, keeping the old settings: %s", error)
            reported = str(error) if error else None

    # -- 3. clean-up ----------------------------------------------------------------------------------
    async def cleanup(self) -> None:
        if self.server is not None:
            self.server.close()
        if self.supervisor is not None:
            await self.supervisor.shutdown()
        try:
            self.paths.socket.unlink()
        except FileNotFoundError:
            pass
        if self.store is not None:
            self.store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)

    # -- clients -----------------------------------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.supervisor is not None
        conn = Connection(writer)
        sock = writer.get_extra_info("socket")
        try:
            uid = peer_uid(sock)
        except (OSError, AttributeError):
            uid = -1
        if uid != os.getuid():
            conn.push(err(None, ProtocolError(ErrorCode.AUTH, f"peer uid {uid} is not this daemon's user")))
            writer.close()
            return
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                try:
                    line = await read_frame(reader)
                except ProtocolError as exc:
                    conn.push(err(None, exc))
                    continue
                if line is None:
                    break
                if not line.strip():
                    continue
                task = asyncio.create_task(self._handle_line(conn, line))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                if not conn.hello:
                    await task  # the hello decides who this is before anything else runs
        except (ConnectionError, OSError):
            pass
        finally:
            for task in tasks:
                task.cancel()
            self.supervisor.forget_connection(conn.conn_id)
            writer.close()

    async def _handle_line(self, conn: Connection, line: bytes) -> None:
        req_id: Any = None
        try:
            frame = decode(line)
            req_id = frame.get("id")
            req_id, op, args = parse_request(frame)
            result = await self._dispatch(conn, op, args)
            conn.push(ok(req_id, result))
        except ProtocolError as exc:
            conn.push(err(req_id, exc))
        except Exception as exc:  # a bug must not take the daemon down; say what happened
            log.exception("operation failed")
            conn.push(err(req_id, ProtocolError(ErrorCode.INTERNAL, f"internal error: {exc}")))
        try:
            await conn.writer.drain()
        except (ConnectionError, OSError):
            pass

    async def _dispatch(self, conn: Connection, op: str, args: dict[str, Any]) -> Any:
        sup = self.supervisor
        assert sup is not None and self.watcher is not None
        if op == "hello":
            return self._hello(conn, args)
        if not conn.hello:
            raise ProtocolError(ErrorCode.NO_HELLO, "send hello first: {\"op\": \"hello\", \"args\": {\"version\": 1}}")
        caller = conn.job
        if op in JOB_ONLY_OPS and caller is None:
            raise ProtocolError(ErrorCode.AUTH, f"{op} is for jobs: call it from a worker (ROOST_JOB_ID is not set)")
        if op == "spawn":
            return await sup.spawn(args, caller)
        if op == "send":
            return await sup.send(args["job"], args["text"], caller)
        if op == "stop":
            return await sup.stop(args["job"], bool(args.get("tree")), caller)
        if op == "close":
            return await sup.close(args["job"], caller)
        if op in ("pin", "unpin"):
            return sup.set_pinned(args["job"], op == "pin", caller)
        if op == "show":
            return sup.row(sup.get(args["job"])).to_wire()
        if op == "list":
            return sup.rows(archived=bool(args.get("archived")))
        if op == "children":
            target = args.get("job") or caller
            if target is None:
                raise ProtocolError(ErrorCode.BAD_ARGS, "children: give a job id (no calling job to default to)")
            return sup.children_of(target)
        if op == "report":
            assert caller is not None  # JOB_ONLY_OPS
            return sup.report(caller, args["status"], args.get("text", ""))
        if op == "logs":
            sup.get(args["job"])
            return self.store.timeline(args["job"], after=int(args.get("after", 0)))  # type: ignore[union-attr]
        if op == "watch":
            sup.subscribers[conn.conn_id] = conn
            return sup.rows()
        if op == "attach":
            return sup.attach(args["job"], conn.conn_id, resume=bool(args.get("resume")))
        if op == "release":
            sup.release(args["job"], conn.conn_id)
            return None
        if op == "archive":
            return await sup.archive(args["job"], caller)
        if op == "detach":
            return sup.detach(args["job"], caller)
        if op == "label":
            return sup.set_label(args["job"], args["key"], args["value"], caller)
        if op == "status":
            error = self.watcher.last_error
            return {"pid": os.getpid(), "version": __version__, "uptime": time.time() - self.started_at,
                    "jobs": len(sup.jobs), "workers": sum(1 for l in sup.live.values() if l.worker),
                    "socket": str(self.paths.socket), "state_dir": str(self.paths.state_dir),
                    "config": str(self.watcher.config.source) if self.watcher.config.source else None,
                    "config_error": str(error) if error else None}
        if op == "shutdown":
            asyncio.get_running_loop().call_later(0.05, self._stopping.set)
            return {"stopping": True}
        raise ProtocolError(ErrorCode.UNKNOWN_OP, f"unknown operation {op!r}")

    def _hello(self, conn: Connection, args: dict[str, Any]) -> dict[str, Any]:
        assert self.supervisor is not None
        if args["version"] != PROTOCOL_VERSION:
            raise ProtocolError(ErrorCode.VERSION, f"protocol version {args['version']} is not supported "
                                                   f"(this daemon speaks {PROTOCOL_VERSION})")
        job = args.get("job")
        if job:
            live = self.supervisor.live.get(job)
            if live is None or not live.token or args.get("token") != live.token:
                raise ProtocolError(ErrorCode.AUTH, f"no valid token for job {job}")
        conn.job = job or None
        conn.client = str(args.get("client", "?"))
        conn.hello = True
        return {"version": PROTOCOL_VERSION, "daemon": __version__, "job": conn.job}


def run(paths: Paths, config_path: Path | None) -> int:
    """Run a daemon in this process until SIGTERM or a shutdown request; the exit code."""
    daemon = Daemon(paths, config_path)
    try:
        daemon.setup()
    except (AlreadyRunning, ConfigError, StoreError) as exc:
        log.error("%s", exc)
        print(f"roost daemon: {exc}", flush=True)
        return 1

    async def main() -> None:
        try:
            await daemon.serve()
        finally:
            await daemon.cleanup()

    asyncio.run(main())
    return 0
