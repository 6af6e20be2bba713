"""One OpenSSH master connection per host, and what goes over it.

The master is the daemon's child (``ssh -M``, ControlPersist off): its session runs ``cat`` on the
far side, so it lives as long as the daemon holds its stdin, and its exit is seen at once (a
watcher marks the host down; the next start on that host starts a new master). Its control socket
is in roost's runtime directory, owner-only. Every worker, every file shipped and every probe is a
session over it (``-o ControlMaster=no``), so a spawn costs no new handshake.

A socket of the host's own (``host_socket_path``, the daemon listens on it) is forwarded to the host
once per master (``ssh -O forward -R``, a Unix socket in roost's directory there, 0600 by sshd's
StreamLocalBindMask), so remote workers' tools reach the daemon as their job exactly as local ones
do — and never the person's socket: a connection through it must prove a job placed on that host.

No prompt ever: BatchMode, StrictHostKeyChecking=yes (an unknown host key is refused with the
command that fixes it), ConnectTimeout, and ServerAlive probes so a silent drop is seen in seconds.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import os
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Coroutine, Sequence

from roost.config import HostSettings
from roost.hosts.bundle import Bundle
from roost.proctree import read_proc

#: How long connecting (and the first handshake) may take before the host counts as down.
CONNECT_TIMEOUT = 15.0
#: How long one session over the master may take (writing a setup, shipping the bundle, a probe).
RUN_TIMEOUT = 30.0
#: A Unix socket path is at most 107 bytes; ssh binds the control socket at PATH + 17 more first.
MAX_CONTROL_PATH = 90


class HostDown(Exception):
    """The host cannot be reached (or refuses roost); the message says why and what to do."""


def ssh_options(host: HostSettings) -> list[str]:
    """The ssh arguments that say how to reach ``host``, before any of roost's own."""
    out = ["-p", str(host.port)] if host.port else []
    if host.identity:
        out += ["-i", host.identity, "-o", "IdentitiesOnly=yes"]
    return [*out, *host.options]


#: Every ssh of roost's: no prompt, no unknown host key, a silent drop seen in seconds.
BATCH = ("-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5",
         "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", "-o", "LogLevel=ERROR")


def one_off(host: HostSettings, command: str) -> list[str]:
    """argv of one ssh session of its own (no master: `roost stop` with no daemon) running ``command``."""
    return ["ssh", *ssh_options(host), *BATCH, host.ssh, command]


def host_socket_path(runtime_dir: Path, name: str) -> Path:
    """The daemon's socket for host ``name``'s workers (what its forward targets): one per host, in
    the runtime directory (0700), short since a Unix socket's path is bounded."""
    return runtime_dir / "h" / f"{hashlib.sha256(name.encode()).hexdigest()[:10]}.sock"


def remote_dir_expr(path: str) -> str:
    """``dir`` as a shell word on the host: ``~`` is its home there, the rest quoted."""
    if path == "~" or path.startswith("~/"):
        return '"$HOME"' + (shlex.quote(path[1:]) if len(path) > 1 else "")
    return shlex.quote(path)


@dataclass
class Link:
    """The master connection to one host, with what it knows about the far side."""

    host: HostSettings
    runtime_dir: Path
    local_socket: Path
    master: asyncio.subprocess.Process | None = None
    #: roost's directory on the host, absolute (learnt from the master's session).
    remote_dir: str = ""
    #: Why the host is down (the last failure), "" while it is up or was never tried.
    reason: str = ""
    shipped: set[str] = field(default_factory=set)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def control(self) -> Path:
        digest = hashlib.sha256(f"{self.host.name}\0{self.host.ssh}\0{self.host.port}".encode()).hexdigest()[:10]
        return self.runtime_dir / "h" / digest  # short: a Unix socket's path is bounded

    @property
    def socket_name(self) -> str:
        """The daemon's socket on the host: one per daemon (a host may serve several)."""
        origin = f"{socket.gethostname()}\0{self.local_socket}"
        return f"daemon-{hashlib.sha256(origin.encode()).hexdigest()[:12]}.sock"

    @property
    def remote_socket(self) -> str:
        return f"{self.remote_dir}/{self.socket_name}"

    @property
    def up(self) -> bool:
        """Whether the master runs: also not when it was killed and asyncio has not reaped it yet
        (a session over its dead socket would quietly connect on its own, past the master)."""
        if self.master is None or self.master.returncode is not None:
            return False
        proc = read_proc(self.master.pid)
        return proc is None and not os.path.isdir("/proc/self") or proc is not None and proc.state not in ("Z", "X")

    def base(self) -> list[str]:
        return ["ssh", *ssh_options(self.host), "-S", str(self.control), *BATCH]

    def session(self, command: str) -> list[str]:
        """argv of one session over the master running ``command`` (a shell line) on the host."""
        return [*self.base(), "-o", "ControlMaster=no", self.host.ssh, command]

    async def ensure(self) -> None:
        """A master that is up, started when there is none (or it died); HostDown if it cannot be."""
        async with self._lock:
            if not self.up:
                await self._start()

    async def verify(self) -> None:
        """After a session over the master dropped: a master that does not answer on its control socket
        is taken for gone (killed if it lingers) before its end is seen, so the next ``ensure``
        starts a new one — a session over a dead control socket would connect on its own instead."""
        async with self._lock:
            if not self.up:
                return
            rc, _, _ = await self.run_local([*self.base(), "-O", "check", self.host.ssh], timeout=5)
            if rc != 0 and self.master is not None:
                if self.master.returncode is None:
                    self.master.kill()
                self.master, self.reason = None, f"host {self.host.name} unreachable: its connection ended"
                self.shipped.clear()

    async def _start(self) -> None:
        self.control.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if len(str(self.control)) > MAX_CONTROL_PATH:
            raise HostDown(f"host {self.host.name}: the control socket path {self.control} is too long for a Unix "
                           f"socket; put roost's runtime directory somewhere shorter")
        self.control.unlink(missing_ok=True)  # a dead master's
        d = remote_dir_expr(self.host.dir)
        script = (f"umask 077; mkdir -p {d}/run {d}/sessions && cd {d} && rm -f {shlex.quote(self.socket_name)} "
                  f"&& pwd && echo roost-ready && exec cat >/dev/null")
        proc = await asyncio.create_subprocess_exec(
            *self.base(), "-o", "ControlMaster=yes", "-o", "ControlPersist=no", self.host.ssh, script,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)
        assert proc.stdout and proc.stderr
        try:
            where = await asyncio.wait_for(proc.stdout.readline(), CONNECT_TIMEOUT)
            ready = await asyncio.wait_for(proc.stdout.readline(), CONNECT_TIMEOUT)
        except asyncio.TimeoutError:
            where = ready = b""
        if ready.strip() != b"roost-ready":
            if proc.returncode is None:
                proc.kill()
            err = (await proc.stderr.read()).decode(errors="replace")
            await proc.wait()
            self.reason = self.explain(err)
            raise HostDown(self.reason)
        self.master, self.remote_dir, self.reason = proc, where.decode().strip(), ""
        self.keep(self._watch(proc))
        rc, _, err = await self.run_local([*self.base(), "-O", "forward", "-R",
                                           f"{self.remote_socket}:{self.local_socket}", self.host.ssh])
        if rc != 0:
            proc.kill()
            raise HostDown(f"host {self.host.name}: cannot forward roost's socket there: {err.strip()}")

    def keep(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)  # kept: asyncio holds tasks weakly
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(self, proc: asyncio.subprocess.Process) -> None:
        """Note the master's end at once: the next start on this host starts a new one."""
        assert proc.stderr
        tail: collections.deque[str] = collections.deque(maxlen=5)
        async for line in proc.stderr:
            tail.append(line.decode(errors="replace").strip())
        await proc.wait()
        if self.master is proc:
            self.reason = self.explain("\n".join(tail)) if tail else f"host {self.host.name} unreachable: its " \
                                                                       f"connection ended"
            self.shipped.clear()

    def explain(self, stderr: str) -> str:
        """ssh's failure as a reason that says what to do."""
        name = self.host.name
        if "Host key verification failed" in stderr or "host key for" in stderr.lower():
            fix = shlex.join(["ssh", *ssh_options(self.host), self.host.ssh, "true"])
            return (f"host {name}: its host key is not known, so roost refuses it; check the key's fingerprint "
                    f"and accept it once, interactively: {fix}")
        if "Permission denied" in stderr:
            return (f"host {name} refused roost's login (no password is ever asked: give a key with `identity`, "
                    f"or load one into ssh-agent): {last_line(stderr)}")
        return f"host {name} unreachable: {last_line(stderr) or 'ssh ended'}"

    async def run(self, command: str, data: bytes = b"", timeout: float = RUN_TIMEOUT) -> tuple[int, str, str]:
        """Run a shell line on the host over the master: (exit code, stdout, stderr)."""
        return await self.run_local(self.session(command), data, timeout)

    async def run_local(self, argv: list[str], data: bytes = b"", timeout: float = RUN_TIMEOUT) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE, start_new_session=True)
        try:
            out, err = await asyncio.wait_for(proc.communicate(data), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return 255, "", f"no answer within {timeout:.0f}s"
        assert proc.returncode is not None
        return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    async def write_setup(self, job_id: str, setup: bytes, files: Sequence[Bundle] = ()) -> str:
        """Write a worker's setup file there, and the files it needs that are not there yet (each once
        per master, named by its hash); the setup's path there."""
        path = f"{self.remote_dir}/run/{job_id}.json"
        unsure = [f for f in files if f.name not in self.shipped]
        check = "".join(f"[ -f {shlex.quote(f.name)} ] && echo have={shlex.quote(f.name)}; " for f in unsure)
        rc, out, err = await self.run(f"umask 077; cat > {shlex.quote(path)} && cd {shlex.quote(self.remote_dir)} "
                                      f"|| exit 1; {check}exit 0", setup)
        if rc != 0:
            raise HostDown(self.explain(err) if rc == 255 else f"host {self.host.name}: cannot write a worker's "
                                                                  f"setup in {self.remote_dir}: {last_line(err)}")
        there = {line[5:] for line in out.split() if line.startswith("have=")}
        for f in unsure:
            if f.name not in there:
                target = shlex.quote(f"{self.remote_dir}/{f.name}")
                rc, _, err = await self.run(f"umask 077; cat > {target}.$$ && mv {target}.$$ {target}", f.data)
                if rc != 0:
                    raise HostDown(f"host {self.host.name}: cannot ship {f.name} there: {last_line(err)}")
            self.shipped.add(f.name)
        return path


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
