"""The daemon's end of a worker's shim (roost/programs/shim.py, docs/reliability.md): starting one,
connecting to it — a new worker's, or one a past daemon started — and its frames turned back into
what a worker says: stdout lines with their sequence numbers, stderr, and its exit.

The shim is started with a listening socket the daemon bound (so the daemon connects at once, no
race), owner-only in the state directory's ``workers/`` (0700), beside the record that names it
(``ShimRecord``: the worker's tree, the shim's pid and start time, the socket, a hash of the job's
token — never the token). A later daemon finds a shim only through that record, never by a process
name, and takes it only when the pid still has the start time written down and its hello names the
same worker. A shim takes a connection only from the process that holds the daemon's lock (the
running daemon: ``--daemon-lock``, checked with SO_PEERCRED and /proc/locks), so no other process
of the user can take a worker's input (docs/reliability.md, "Only roost reaches a shim").

One idea at about 420 lines: the daemon's end of one shim connection (its hello, frames, acknowledgements
and reconnects); starting shims is shim_process.py, a remote one remote_worker.py.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import logging
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

from roost.proctree import WorkerTree, read_proc, send
from roost.protocol import MAX_FRAME
from roost.worker_protocol import Oversize

log = logging.getLogger(__name__)

#: The shim program, run by path so that a running shim is never changed by an upgrade of roost.
SHIM_PROGRAM = Path(__file__).resolve().parents[2] / "programs" / "shim.py"
#: What the shims this roost starts speak; version 1's (started before an upgrade) are adopted too:
#: they take any connection of the user and are no subreaper (docs/reliability.md).
VERSION = 2
VERSIONS = (1, 2)
#: What a shim keeps of its worker's output that no daemon acknowledged (the newest).
KEEP = 8 << 20
#: How long the daemon waits for a shim's hello.
SHIM_HELLO_TIMEOUT = 10.0
#: Lines read from the shim and not yet taken by the worker's reader, in bytes, before reading pauses.
BUFFERED = 2 * MAX_FRAME
#: The longest path a unix socket address holds (sun_path, with its NUL).
SUN_PATH = 107


class ShimError(OSError):
    """The shim could not start its worker, or is not the one its record names."""


@dataclass(frozen=True)
class Dropped:
    """Output the shim dropped over its bound while nobody acknowledged it: how many bytes."""

    size: int


def token_hash(token: str) -> str:
    """What a record keeps of a job's token: enough to check one presented, nothing to present."""
    return hashlib.sha256(token.encode()).hexdigest() if token else ""


class DaemonLock:
    """The daemon's lock as /proc/locks names it (``MAJ:MIN:INODE``, hex device numbers): a shim
    takes a connection only from the process holding it. Set once the daemon holds its lock;
    empty in a process that is no daemon (a test's own shims), whose shims take any connection."""

    name = ""

    @classmethod
    def held(cls, fd: int) -> None:
        st = os.fstat(fd)
        cls.name = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"


@dataclass(frozen=True)
class ShimRecord:
    """What a daemon needs to find, check and take over a worker it did not start (or to kill it)."""

    tree: WorkerTree
    shim_pid: int
    shim_start: int
    socket: str
    #: The job's token hashed: a record any process of the user may read holds no secret.
    token_hash: str
    #: Whether a new daemon can speak for its worker (its adapter keeps nothing, or restores what it knew).
    adoptable: bool
    #: A worker on an SSH host (``RemotePlace``): its pids, socket and tree are the host's, none of this
    #: machine's; None for a shim here.
    remote: "RemotePlace | None" = None

    def save(self, path: Path) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        remote = {"remote": asdict(self.remote)} if self.remote is not None else {}
        with os.fdopen(fd, "w") as fh:
            json.dump({**asdict(self.tree), "shim": {"pid": self.shim_pid, "start": self.shim_start,
                                                     "socket": self.socket, "token_hash": self.token_hash,
                                                     "adoptable": self.adoptable, **remote}}, fh)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "ShimRecord | None":
        tree = WorkerTree.load(path)
        try:
            shim = json.loads(path.read_text())["shim"]
            hashed = str(shim["token_hash"]) if "token_hash" in shim else token_hash(str(shim["token"]))  # a past roost's
            far = shim.get("remote")
            remote = RemotePlace(str(far["host"]), tuple(str(a) for a in far["runner"]), str(far["tree"])) \
                if far is not None else None
            return cls(tree, int(shim["pid"]), int(shim["start"]), str(shim["socket"]), hashed,
                       bool(shim["adoptable"]), remote) if tree is not None else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def alive(self) -> bool:
        """Whether the shim that was started still runs (its pid with its start time); a host's shim
        cannot be told from here (its hello, once reached, says whether it is the same)."""
        if self.remote is not None:
            return True
        proc = read_proc(self.shim_pid)
        return proc is not None and proc.start == self.shim_start and proc.state not in ("Z", "X")

    def kill(self) -> None:
        """SIGKILL the shim, if it is still the one started (its worker's tree is the caller's); a
        host's is ended there (``--signal``), never by its pid here."""
        if self.remote is None:
            send(self.shim_pid, self.shim_start, 9)


@dataclass(frozen=True)
class RemotePlace:
    """Where a worker on an SSH host runs, as its record keeps it for the next daemon (or `roost stop`
    with none): the host's name in the config, the command that runs roost's far side there, and its
    tree's file there (the socket is the record's own ``socket``)."""

    host: str
    runner: tuple[str, ...]
    tree: str


@contextlib.contextmanager
def address_of(path: Path) -> Iterator[str]:
    """An address for ``path`` a socket call takes: itself, or, when too long for sun_path, the
    same file reached through an open descriptor of its directory (/proc/self/fd/N/NAME)."""
    if len(os.fsencode(path)) <= SUN_PATH:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def listen(path: Path) -> socket.socket:
    """A listening socket at ``path``, owner-only from birth, in an owner-only directory."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        with address_of(path) as address:
            sock.bind(address)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    sock.listen(4)
    return sock


def shim_argv(sock: socket.socket, path: Path, job_id: str, mark: str, argv: list[str]) -> list[str]:
    """The shim's command line. Every shim starts ``--ephemeral``: it ends, with its worker, when
    its first daemon's connection goes, until ``ShimLink.keep`` — sent once its record is written
    down, so that no shim outlives the daemon unless a later one can find it."""
    lock = ["--daemon-lock", DaemonLock.name] if DaemonLock.name else []
    return [sys.executable, "-I", "-S", str(SHIM_PROGRAM), "--fd", str(sock.fileno()), "--job", job_id,
            "--keep", str(KEEP), "--line-max", str(MAX_FRAME), "--mark", mark, "--socket", str(path),
            "--ephemeral", "1", *lock, "--", *argv]


async def handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    timeout: float = SHIM_HELLO_TIMEOUT) -> dict[str, Any]:
    """The shim's hello on a new connection; ShimError (the connection closed) when it says its worker
    could not start, refuses this process, speaks another version, or says nothing."""
    try:
        line = await asyncio.wait_for(reader.readline(), timeout)
        hello = json.loads(line) if line else {}
    except (ValueError, asyncio.TimeoutError, OSError) as exc:
        writer.close()
        raise ShimError(f"the worker's shim did not say hello: {exc or 'no answer'}") from None
    if not isinstance(hello, dict) or hello.get("roost_shim") not in VERSIONS or "error" in hello \
            or "refused" in hello:
        writer.close()
        if isinstance(hello, dict) and "error" in hello:
            raise ShimError(str(hello["error"]))
        if isinstance(hello, dict) and "refused" in hello:
            raise ShimError(f"the worker's shim refused this daemon: {hello['refused']}")
        raise ShimError(f"the worker's shim speaks {str(hello)[:100]!r}, not version {VERSION}")
    return hello


#: Opens a new connection to the same shim after one was lost (a remote worker's, over a link that
#: dropped): its reader, writer and hello; ShimError, saying why, when it never will.
Reconnect = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter, dict[str, Any]]]]
#: Bytes for the worker held while its connection is being opened again, at most.
HELD_MAX = 4 * MAX_FRAME
#: The exit code a worker is given when its shim cannot be reached again (ssh's own for a lost link).
LINK_LOST = 255


class ShimLink:
    """One connection to a shim. Its frames are read by a task of its own into a bounded buffer of
    lines (``next_line``), stderr goes to ``on_stderr`` as it comes, the exit to ``exited``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: dict[str, Any],
                 committed: int, reconnect: Reconnect | None = None, place: str = "") -> None:
        self.hello = hello
        self.worker_pid = int(hello["worker_pid"])
        self.worker_start = int(hello["worker_start"])
        self.shim_pid = int(hello["shim_pid"])
        self._reader, self._writer = reader, writer
        #: The last sequence number committed (nothing up to it is handed on again) and acknowledged.
        self.committed = self.acked = committed
        #: The last sequence number read (a new connection's replay up to it is skipped).
        self.seen = committed
        #: A remote worker's: a lost connection is opened again (bytes for the worker held meanwhile).
        self._reconnect = reconnect
        self._held = bytearray()
        #: Where the shim runs (``host NAME``), for the notes about its link.
        self.place = place
        self.on_note: Callable[[str], None] = lambda text: None
        self.on_stderr: Callable[[bytes], None] = lambda data: None
        self.exited: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.exit_tail: list[str] = []
        self.exit_seq = 0
        self._lines: collections.deque[tuple[int, bytes | Oversize | Dropped]] = collections.deque()
        self._size = 0
        self._more = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._ended = False
        self.closed = False
        self._task = asyncio.get_running_loop().create_task(self._pump())

    @classmethod
    async def connect(cls, path: Path, committed: int = 0, timeout: float = SHIM_HELLO_TIMEOUT) -> "ShimLink":
        """Connect and read the hello; ShimError when the shim says its worker could not start, speaks
        another version, or is not there."""
        with address_of(path) as address:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(address, limit=MAX_FRAME + (1 << 16)), timeout)
        hello = await handshake(reader, writer, timeout)
        return cls(reader, writer, hello, committed).resume()

    def resume(self) -> "ShimLink":
        """Tell the shim what is committed already: it sends again only what follows."""
        if self.committed:
            self._send(b"A %d\n" % self.committed)
        return self

    async def _pump(self) -> None:
        rc: int | None = None
        try:
            while True:
                try:
                    line = await self._reader.readline()
                except OSError:
                    line = b""
                data = b""
                if line.endswith(b"\n") and line.startswith(b"S "):
                    try:
                        data = await self._reader.readexactly(int(line.split()[2]))
                    except asyncio.IncompleteReadError as exc:
                        data, line = exc.partial, b""
                    except OSError:
                        line = b""
                if not line.endswith(b"\n"):  # the shim is gone (or cut a frame short), or the link to it
                    if self._reconnect is None or not await self._again():
                        rc = LINK_LOST if self._reconnect is not None else None
                        break
                    continue
                kind, _, rest = line[:-1].partition(b" ")
                seq_text, _, body = rest.partition(b" ")
                seq = int(seq_text)
                if kind == b"S":
                    if seq > self.seen:
                        self.seen = seq
                        self.on_stderr(data)
                    continue
                if seq <= self.seen:
                    continue
                self.seen = seq
                if kind == b"E":
                    end = json.loads(body)
                    rc, self.exit_tail, self.exit_seq = int(end["rc"]), [str(x) for x in end["stderr"]], seq
                    break
                item: bytes | Oversize | Dropped
                if kind == b"L":
                    item = body
                elif kind == b"O":
                    size, head, tail = body.split(b" ")
                    item = Oversize(int(size), bytes.fromhex(head.decode().strip("-")),
                                    bytes.fromhex(tail.decode().strip("-")))
                elif kind == b"D":
                    item = Dropped(int(body))
                else:
                    continue
                self._lines.append((seq, item))
                self._size += len(body) + 16
                self._more.set()
                if self._size > BUFFERED:
                    self._room.clear()
                    await self._room.wait()
        except (OSError, ValueError, KeyError, asyncio.IncompleteReadError) as exc:
            log.warning("a worker's shim (pid %d) link ended: %s", self.shim_pid, exc)
        except asyncio.CancelledError:
            return
        self._ended = True
        self._more.set()
        if not self.exited.done() and not self.closed:
            if rc is None:
                self.exit_tail = ["its shim ended without saying how the worker exited"]
            self.exited.set_result(rc if rc is not None else -9)

    async def _again(self) -> bool:
        """The connection was lost: open a new one (the reconnect retries as long as it may); what the
        shim sends again up to ``seen`` is skipped, what was held for the worker goes. False, with
        the reason as the exit's words, when the shim cannot be reached again."""
        assert self._reconnect is not None
        self._writer.close()
        self.on_note(f"the link to its worker on {self.place} dropped: trying again (the worker runs on there)")
        lost = time.monotonic()
        try:
            self._reader, self._writer, hello = await self._reconnect()
        except ShimError as exc:
            self.exit_tail = [str(exc)]
            return False
        if (int(hello["shim_pid"]), int(hello["worker_pid"])) != (self.shim_pid, self.worker_pid):
            self._writer.close()
            self.exit_tail = [f"its shim's socket is answered by another worker ({hello['worker_pid']}, not "
                              f"{self.worker_pid})"]
            return False
        log.info("a worker's shim (pid %d) is connected again, from seq %d", self.shim_pid, self.seen)
        self.on_note(f"the link to its worker on {self.place} is back after {time.monotonic() - lost:.0f}s")
        self._writer.write(b"A %d\n" % self.acked + bytes(self._held))
        self._held.clear()
        return True

    async def next_line(self) -> tuple[int, bytes | Oversize | Dropped] | None:
        """The next line of the worker's stdout with its sequence number; None once there are no more."""
        while not self._lines:
            if self._ended or self.closed:
                return None
            self._more.clear()
            await self._more.wait()
        seq, item = self._lines.popleft()
        self._size -= (len(item) if isinstance(item, bytes) else 0) + 16
        if self._size <= BUFFERED:
            self._room.set()
        return seq, item

    def _send(self, data: bytes) -> None:
        if self.closed:
            return
        if not self._writer.is_closing():
            self._writer.write(data)
        elif self._reconnect is not None and not self._ended:  # held for the next connection
            if len(self._held) + len(data) > HELD_MAX:
                log.warning("a worker's shim (pid %d): %d bytes for it dropped while its link is down",
                            self.shim_pid, len(data))
            elif not data.startswith(b"A "):  # acks: the next connection's first line says the last
                self._held += data

    def write(self, data: bytes) -> None:
        """Bytes for the worker's stdin."""
        self._send(b"I %d\n" % len(data) + data)

    def close_stdin(self) -> None:
        self._send(b"C\n")

    def keep(self) -> None:
        """Its record is written down (a spare's: a job took it): it outlives this daemon."""
        self._send(b"P\n")

    def is_closing(self) -> bool:
        if self._reconnect is not None:  # a lost link is opened again: writes are held meanwhile
            return self.closed or self._ended
        return self.closed or self._writer.is_closing()

    def ack(self, seq: int) -> None:
        """Everything up to ``seq`` is committed: the shim may forget it."""
        if seq > self.acked:
            self.acked = seq
            self._send(b"A %d\n" % seq)

    def release(self) -> None:
        """The worker's exit is committed: the shim may end."""
        if self.exit_seq:
            self.ack(self.exit_seq)
        self.close()

    def close(self) -> None:
        """Leave the shim (it keeps its worker, and what it says, for the next daemon)."""
        if not self.closed:
            self.closed = True
            self._task.cancel()
            self._more.set()
            self._writer.close()
