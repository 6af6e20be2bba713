"""The control socket's daemon: set-up, serve, clean-up, and accepting clients of this user only.

Set-up, serve and clean-up are three explicit steps (``Daemon.setup``, ``serve``, ``cleanup``).
One daemon per state directory: a lock file held for the daemon's life refuses a second one, and
a socket left by a killed daemon is replaced, since holding the lock proves nobody serves it.
Accepting is ours, not asyncio's server, so that running out of file descriptors pauses it (said
once in the log) instead of spinning, and so that a client past its cap gets a clear ``busy``
frame. The caps: MAX_CONNECTIONS in all, of which PERSON_ROOM only a person's connections may take
(a peer the daemon did not start), and ``max_connections_per_job`` for the connections that said
hello as one job (refused at that hello); a connection with no request running and no subscription
for ``connection_idle_close`` seconds is closed. Each connection is served by roost/daemon/server/connection.py; each operation by
roost/daemon/server/handlers.py.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import functools
import logging
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from roost import __version__
from roost.config import ConfigError
from roost.daemon.config_reload import ConfigFile, FileNotice
from roost.daemon.server.connection import Connection
from roost.daemon.server.handlers import Context, handle_line
from roost.daemon.processes.shim_link import DaemonLock
from roost.daemon.server.peers import daemons_own
from roost.daemon.storage.store import Store, StoreError
from roost.daemon.storage.repair import closed_cleanly, open_store
from roost.daemon.supervisor import Supervisor
from roost.hosts.link import HostDown, host_socket_path
from roost.sandbox.enclose import socket_link
from roost.paths import Paths, UnsafePath
from roost.protocol import MAX_CONNECTIONS, MAX_FRAME, PERSON_ROOM, ErrorCode, ProtocolError, encode, err
from roost.socket_connect import peer_credentials

log = logging.getLogger("roost.daemon")

#: Connections waiting in the kernel to be accepted, and taken per wake-up.
BACKLOG = 128
#: Seconds accepting pauses when the process is out of file descriptors (or memory for them).
ACCEPT_BACKOFF = 1.0
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class AlreadyRunning(Exception):
    """Another daemon holds this state directory's lock."""


class Daemon:
    def __init__(self, paths: Paths, config_path: Path | None, max_connections: int = MAX_CONNECTIONS) -> None:
        self.paths = paths
        self.config_path = config_path
        self.max_connections = max_connections
        self.watcher: ConfigFile | None = None
        #: The kernel's notices of config file changes; None when not watched (see ``watching``).
        self._notice: FileNotice | None = None
        #: How changes to the config file reach the daemon, for ``status`` and the log.
        self.watching = "SIGHUP or `roost daemon reload` only"
        self.store: Store | None = None
        self.supervisor: Supervisor | None = None
        self._listener: socket.socket | None = None
        #: Each host's own socket (what its forward targets), by host name: roost/hosts/link.py.
        self._host_listeners: dict[str, tuple[socket.socket, Path]] = {}
        self._paused_at: float | None = None
        self._full = False
        #: The connections whose peer the daemon started (a job's, a host's): PERSON_ROOM is kept from them.
        self._not_persons = 0
        self._clients: dict[asyncio.Task[None], Connection | None] = {}
        self._lock_fd: int | None = None
        self._stopping = asyncio.Event()
        #: Whether stopping closes every worker too (``roost daemon stop --all``); otherwise the
        #: workers a later daemon can re-adopt run on under their shims.
        self.close_workers = False
        self.started_at = time.time()

    # -- 1. set-up ---------------------------------------------------------------------------------
    def setup(self) -> None:
        """Take the lock, read the config, open the store, recover records. Raises AlreadyRunning,
        ConfigError, StoreError or UnsafePath with a message that says what is wrong (a damaged
        store is repaired, not refused: see store_repair)."""
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
        DaemonLock.held(fd)  # the proof its shims ask of whoever connects to them
        self.watcher = ConfigFile(self.config_path)
        self.store = open_store(self.paths.store, self.paths.state_dir)
        self.supervisor = Supervisor(self.store, self.paths, lambda: self.watcher.config)  # type: ignore[union-attr]
        self.supervisor.recover()

    # -- 2. serve ------------------------------------------------------------------------------------
    async def serve(self) -> None:
        assert self.supervisor is not None
        loop = asyncio.get_running_loop()
        self._listen()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        loop.add_signal_handler(signal.SIGHUP, self.reload_config)
        self.supervisor.engine.host_socket = self._host_socket
        self.supervisor.start()
        self._watch_config()
        idle = asyncio.create_task(self._close_idle())
        log.info("roost daemon %s serving on %s (pid %d)", __version__, self.paths.socket, os.getpid())
        await self._stopping.wait()
        idle.cancel()
        if self._notice is not None:
            self._notice.stop()

    def _listen(self) -> None:
        try:
            self._listener = _bind(self.paths.socket)
            socket_link(self.paths)  # what running sandboxed jobs see of the runtime directory: this socket now
        except OSError as exc:  # a path too long for a Unix socket, a full disk
            raise CannotListen(_cannot_listen("roost daemon", self.paths.socket, "", exc)) from None
        asyncio.get_running_loop().add_reader(self._listener.fileno(), self._accept, self._listener, None)

    def _host_socket(self, name: str) -> Path:
        """The socket of host ``name``'s own, listening (opened on first use): what the forward to
        that host targets, so its connections are host connections, never a person's. HostDown
        when it cannot be opened."""
        if name not in self._host_listeners:
            path = host_socket_path(self.paths.runtime_dir, name)
            try:
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                sock = _bind(path)
            except OSError as exc:  # a path too long for a Unix socket, a full disk
                raise HostDown(_cannot_listen(f"host {name}", path, " for its workers", exc)) from None
            self._host_listeners[name] = (sock, path)
            asyncio.get_running_loop().add_reader(sock.fileno(), self._accept, sock, name)
        return self._host_listeners[name][1]

    def _listening(self) -> list[tuple[socket.socket, str | None]]:
        main = [(self._listener, None)] if self._listener is not None else []
        return [*main, *((sock, name) for name, (sock, _) in self._host_listeners.items())]

    def _watch_config(self) -> None:
        """Have the kernel say when the config file changes, if it can (roost[watch]); the log
        says which way changes reach the daemon."""
        if self.config_path is not None:
            notice = FileNotice(self.config_path, self.reload_config)
            why_not = notice.start()
            if why_not is None:
                self._notice, self.watching = notice, "noticed (inotify), SIGHUP or `roost daemon reload`"
            else:
                log.info("config: changes to %s are not watched (%s); reload with SIGHUP or `roost daemon reload`",
                         self.config_path, why_not)
        log.info("config: changes are read on %s", self.watching)

    def reload_config(self) -> dict[str, Any]:
        """Read the config file again (SIGHUP, ``reload``, a notice): what changed, or why the
        file was not taken (the settings in force stay)."""
        assert self.watcher is not None and self.supervisor is not None
        done = self.watcher.reload()
        if done.error is not None:
            log.error("config not reloaded, keeping the old settings: %s", done.error)
        elif done.changed:
            log.info("config reloaded from %s: %s changed", done.config, ", ".join(done.changed))
            self.supervisor.config_changed()
        return done.to_dict()

    # -- 3. clean-up ----------------------------------------------------------------------------------
    async def cleanup(self) -> None:
        for sock, _ in self._listening():
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
        self._listener = None
        for _, path in self._host_listeners.values():
            path.unlink(missing_ok=True)
        self._host_listeners.clear()
        if self.supervisor is not None:
            await self.supervisor.shutdown(close_workers=self.close_workers)
        for task, conn in list(self._clients.items()):
            if conn is not None:
                conn.abort()
            task.cancel()
        await asyncio.gather(*self._clients, return_exceptions=True)
        try:
            self.paths.socket.unlink()
        except FileNotFoundError:
            pass
        if self.store is not None:
            self.store.close()
            closed_cleanly(self.paths.store)
        if self._lock_fd is not None:
            os.close(self._lock_fd)

    # -- accepting ------------------------------------------------------------------------------------
    def _accept(self, listener: socket.socket, host: str | None) -> None:
        for _ in range(BACKLOG):
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_DESCRIPTORS:
                    self._pause_accepting(exc)
                else:
                    log.error("accepting a connection failed: %s", exc)
                return
            if self._paused_at is not None:
                log.warning("accepting connections again after %.1fs", time.monotonic() - self._paused_at)
                self._paused_at = None
            self._admit(sock, host)

    def _pause_accepting(self, exc: OSError) -> None:
        """Out of descriptors: stop watching the listener for a while instead of spinning on it."""
        loop = asyncio.get_running_loop()
        for sock, _ in self._listening():
            loop.remove_reader(sock.fileno())
        if self._paused_at is None:
            self._paused_at = time.monotonic()
            log.error("cannot accept connections: %s; paused, retrying every %.0fs", exc.strerror, ACCEPT_BACKOFF)
        loop.call_later(ACCEPT_BACKOFF, self._resume_accepting)

    def _resume_accepting(self) -> None:
        for sock, host in self._listening():
            asyncio.get_running_loop().add_reader(sock.fileno(), self._accept, sock, host)

    def _admit(self, sock: socket.socket, host: str | None) -> None:
        """Refuse peers of another uid and connections past the cap; serve the others, knowing
        whether the peer may be a person (and, on a host's socket, which host it came through)."""
        sock.setblocking(False)
        try:
            pid, uid = peer_credentials(sock)
        except (OSError, AttributeError):
            pid, uid = 0, -1
        if uid != os.getuid():
            _refuse(sock, ProtocolError(ErrorCode.AUTH, f"peer uid {uid} is not this daemon's user"))
            return
        not_person = daemons_own(pid)
        refusal = self._over_cap(not_person is not None or host is not None)
        if refusal is not None:
            if not self._full:
                self._full = True
                log.warning("refusing connections: %s", refusal)
            _refuse(sock, ProtocolError(ErrorCode.BUSY, refusal))
        else:
            self._full = False
            task = asyncio.create_task(self._serve_client(sock, not_person, host))
            self._clients[task] = None
            if not_person is not None or host is not None:
                self._not_persons += 1
                task.add_done_callback(self._not_person_gone)
            task.add_done_callback(self._clients.pop)

    def _over_cap(self, not_person: bool) -> str | None:
        """Why one more connection is refused (busy), or None: the daemon's cap for everyone, and
        for a job's (a peer the daemon started) the cap less the room kept for a person."""
        if len(self._clients) >= self.max_connections:
            return f"the daemon already serves {self.max_connections} connections, its limit; try again later"
        jobs_max = max(self.max_connections - PERSON_ROOM, 0)
        if not_person and self._not_persons >= jobs_max:
            return (f"jobs already hold {jobs_max} connections, all they may: the other {PERSON_ROOM} are kept "
                    f"for a person; try again later")
        return None

    def _not_person_gone(self, _task: asyncio.Task[None]) -> None:
        self._not_persons -= 1

    def job_connections(self, job: str) -> int:
        """How many open connections said hello as ``job``."""
        return sum(1 for conn in self._clients.values() if conn is not None and conn.job == job and not conn.closing)

    async def _close_idle(self) -> None:
        """Close every connection that said hello and has had no request running and no
        subscription for ``connection_idle_close`` seconds, checked a few times per bound."""
        assert self.watcher is not None and self.supervisor is not None
        loop = asyncio.get_running_loop()
        while True:
            bound = self.watcher.config.connection_idle_close
            await asyncio.sleep(bound / 4 if bound > 0 else 60.0)
            if bound <= 0:
                continue
            now, watching = loop.time(), self.supervisor.publisher.watching()
            for conn in list(self._clients.values()):
                if conn is None or not conn.hello or conn.closing or conn.conn_id in watching:
                    continue
                if conn.idle_for(now) >= bound:
                    log.info("%r sent no request for %.0fs and watches nothing; closed", conn, bound)
                    conn.fail(None, ProtocolError(ErrorCode.IDLE, f"no request for {bound:g}s and no subscription "
                                                                  f"(connection_idle_close); closing"))
                    conn.close()

    async def _serve_client(self, sock: socket.socket, not_person: str | None, host: str | None) -> None:
        assert self.supervisor is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_FRAME)
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
        except OSError:
            sock.close()
            return
        conn = Connection(reader, asyncio.StreamWriter(transport, protocol, reader, loop), not_person=not_person,
                          host=host)
        self._clients[asyncio.current_task()] = conn  # type: ignore[index]
        try:
            await conn.serve(functools.partial(handle_line, self._context()))
        finally:
            self.supervisor.publisher.forget(conn)
            self.supervisor.forget_connection(conn.conn_id)
            await conn.closed()

    def _context(self) -> Context:
        assert self.supervisor is not None
        return Context(self.supervisor, self._facts, self._stop_soon, self.reload_config, self.job_connections)

    def _facts(self) -> dict[str, Any]:
        """What ``status`` says about the daemon itself (the supervisor adds the jobs)."""
        assert self.watcher is not None
        error = self.watcher.last_error
        return {"pid": os.getpid(), "version": __version__, "uptime": time.time() - self.started_at,
                "connections": len(self._clients), "socket": str(self.paths.socket),
                "state_dir": str(self.paths.state_dir),
                "config": str(self.watcher.config.source) if self.watcher.config.source else None,
                "config_error": str(error) if error else None, "config_watch": self.watching}

    def _stop_soon(self, close_workers: bool = False) -> None:
        """Stop after the reply to ``shutdown`` has gone out."""
        self.close_workers = close_workers
        asyncio.get_running_loop().call_later(0.05, self._stopping.set)


class CannotListen(Exception):
    """The daemon's own socket could not be opened; the message names it, why, and the fix."""


def _cannot_listen(who: str, path: Path, purpose: str, exc: OSError) -> str:
    """Why a socket could not be opened, said the same way for the daemon's and a host's."""
    return (f"{who}: cannot listen on {path}{purpose}: {exc.strerror or exc}; "
            f"put roost's runtime directory somewhere shorter")


def _bind(path: Path) -> socket.socket:
    """A listening unix socket at ``path``, owner-only from the moment it exists; one left there by
    a killed daemon is replaced (we hold the lock: nobody serves it)."""
    if path.exists() or path.is_symlink():
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old_umask)
    sock.listen(BACKLOG)
    sock.setblocking(False)
    return sock


def _refuse(sock: socket.socket, error: ProtocolError) -> None:
    """One error frame, written if the socket takes it at once, then close."""
    try:
        sock.send(encode(err(None, error)))
    except OSError:
        pass
    sock.close()


def run(paths: Paths, config_path: Path | None) -> int:
    """Run a daemon in this process until SIGTERM or a shutdown request; the exit code."""
    daemon = Daemon(paths, config_path)
    try:
        daemon.setup()
    except (AlreadyRunning, ConfigError, StoreError, UnsafePath) as exc:
        log.error("%s", exc)
        print(f"roost daemon: {exc}", flush=True)
        return 1

    async def main() -> None:
        try:
            await daemon.serve()
        finally:
            await daemon.cleanup()

    try:
        asyncio.run(main())
    except CannotListen as exc:
        log.error("%s", exc)
        print(f"{exc}", flush=True)
        return 1
    return 0
