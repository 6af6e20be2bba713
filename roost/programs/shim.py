"""The shim: a small process per worker that outlives the daemon (docs/reliability.md, "Workers that
outlive the daemon").

The daemon starts it instead of the agent, handing it a listening unix socket (``--fd``, bound in the
daemon's private runtime directory); the shim starts the agent (everything after ``--``) in a session
of its own with its stdio on pipes, and relays the worker protocol between the agent and whichever
daemon is connected. Each connection opens with a versioned hello line (JSON: ``roost_shim``, the
job, the shim's and the worker's pids, the worker's start time, what was acknowledged). Then, the
shim to the daemon, one frame a line:

- ``L SEQ LINE``: a line of the agent's stdout; ``O SEQ SIZE HEAD TAIL``: one over ``--line-max``
  (its size and its first and last bytes in hex, the rest skipped); ``S SEQ N`` + N bytes: stderr;
- ``D SEQ BYTES``: BYTES bytes of output (up to SEQ) were dropped while nobody acknowledged them;
- ``E SEQ JSON``: the agent exited (``rc``, its last ``stderr`` lines).

And the daemon to the shim: ``I N`` + N bytes (for the agent's stdin), ``C`` (close its stdin),
``A SEQ`` (everything up to SEQ is committed: forget it), ``P`` (keep running without a daemon: the
daemon starts every shim with ``--ephemeral 1`` and sends ``P`` once the shim's record is written
down — a spare's, once a job took it; until then the shim ends, killing its agent, when its first
connection goes). What is not acknowledged is kept, at most
``--keep`` bytes (the newest; what goes is counted in one ``D`` frame), and sent again, once, to the
next daemon that connects. The shim ends once its agent's exit is acknowledged.

Only the daemon reaches it: started ``--daemon-lock MAJ:MIN:INODE`` (the daemon's lock as /proc/locks
names it), the shim takes a connection only from the process holding that lock (its pid from
SO_PEERCRED), and tells any other why and closes it, keeping the daemon that is connected and all it
kept. It is a child subreaper: what the agent's tree orphans is re-parented to it (and reaped by
it), so every process a job starts stays below its shim, which is how the daemon tells a job's
processes (roost/daemon/server/peers.py).

No shim is left that nobody can reach (an orphan): one that no daemon connected within
``--orphan-after`` seconds, or, while no daemon is connected, whose socket path no longer leads to
its socket (the file removed, the state directory gone: checked when a connection drops and every
``--orphan-after`` seconds while none is there, never while one is), kills its agent and ends; so
does one started ``--alone-ends 1`` (a worker's on an SSH host, roost/hosts/remote_shim.py) that no
daemon was connected to for ``--orphan-after`` seconds.

No roost import, and only the interpreter's built-in modules (``_socket``, ``select``'s epoll,
``os.posix_spawn``; ``ctypes`` once, for prctl; not ``subprocess``, ``selectors``, ``socket`` or
``json``, which would double what it holds): it is run by path (``python -I -S``), so a running shim never changes under an
upgrade of roost, and it stays small (docs/performance.md). For the same reason it is one file
(about 600 lines): a program run by path can import nothing of its own package.
"""

from __future__ import annotations

import os
import select
import sys
import time

import fcntl

import _collections
import _signal
import _socket

#: 2: the shim takes only a peer that proves it is the daemon (``--daemon-lock``) and is a subreaper.
VERSION = 2
#: Lines of the agent's stderr kept to explain its exit, and how long each may be.
STDERR_TAIL = 20
STDERR_LINE = 1000
#: How long the agent's pipes may still be read after it exited (a child it left may hold them).
PIPE_GRACE = 1.0
#: Bytes of an oversize line's head and tail sent with its size (roost.worker_protocol.OVERSIZE_KEEP).
OVERSIZE_KEEP = 4096
READ = 1 << 16
#: The agent's stdout pipe (bounded by /proc/sys/fs/pipe-max-size), and fcntl's F_SETPIPE_SZ.
PIPE_BYTES = 1 << 20
F_SETPIPE_SZ = 1031
#: The most bytes for the agent's stdin waiting to be written before the shim stops reading the daemon.
STDIN_HELD = 8 << 20
#: The spare's room variable must stay last in the agent's environment (roost/daemon/processes/spare.py).
ROOM_VAR = "ROOST_SPARE_ROOM"
MARK_VAR = "ROOST_WORKER_MARK"
#: Seconds within which a daemon must connect, and how often the socket is checked while none is.
ORPHAN_AFTER = 60.0
PR_SET_CHILD_SUBREAPER = 36
#: Rounds of killing what was orphaned to the shim at its end (each round takes the next generation).
MAX_ROUNDS = 100
#: struct ucred (pid, uid, gid: three ints), what SO_PEERCRED gives.
UCRED = 12
#: The most ancestors looked at; a chain longer than any real one means something is wrong.
MAX_DEPTH = 4096


def become_subreaper() -> bool:
    """prctl(PR_SET_CHILD_SUBREAPER): what the agent's tree orphans (a double fork, ``setsid -f``) is
    re-parented to this shim, not to PID 1, so that it still descends from the shim: the daemon tells
    a job's processes by that (roost/daemon/server/peers.py). False where the kernel does not allow it."""
    import ctypes  # here only: the one module beyond the built-in ones, half a MiB, once

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def peer_pid(conn: _socket.socket) -> int:
    """The pid of the process that connected (SO_PEERCRED, as the kernel saw it at connect)."""
    raw = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, UCRED)
    return int.from_bytes(raw[:4], sys.byteorder, signed=True)


def holds_lock(pid: int, lock: str) -> bool:
    """Whether process ``pid`` holds the write lock (flock) on the file ``lock`` names as /proc/locks
    does (``MAJ:MIN:INODE``): the daemon's lock, which one daemon at a time holds."""
    try:
        with open("/proc/locks", "rb") as fh:
            table = fh.read().decode(errors="replace")
    except OSError:
        return False
    for line in table.splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[3] == "WRITE" and fields[4] == str(pid) \
                and fields[5] == lock:
            return True
    return False


def quote(text: str) -> str:
    """``text`` as a JSON string (what ``json.dumps`` gives, without importing json and its ``re``)."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch < " ":
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def executable(name: str, path: str) -> str:
    """``name`` found on the agent's PATH, as a subprocess would (a name with a slash as it is)."""
    if "/" in name:
        return name
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    raise FileNotFoundError(2, "No such file or directory", name)


def read_environment() -> dict[str, str]:
    """The agent's environment, which the daemon writes to the shim's stdin (``NAME=VALUE`` NUL
    ended), so that the shim's own (``/proc/PID/environ``) names no job: it is not the worker."""
    data = bytearray()
    while chunk := os.read(0, READ):
        data += chunk
    env: dict[str, str] = {}
    for item in bytes(data).split(b"\0"):
        if item:
            key, _, value = item.partition(b"=")
            env[os.fsdecode(key)] = os.fsdecode(value)
    return env


def start_time(pid: int) -> int:
    """Field 22 of /proc/PID/stat: the start time that, with the pid, names one process."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        raw = fh.read()
    return int(raw[raw.rfind(b")") + 2:].split()[19])


class Kept:
    """What the agent said that no daemon has acknowledged: frames by sequence number, bounded."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.frames: "_collections.deque[tuple[int, bytes, int]]" = _collections.deque()  # seq, frame, output bytes
        self.size = 0
        self.seq = 0
        self.acked = 0
        #: Output dropped over the bound and not acknowledged: through which seq, how many bytes.
        self.gap_seq = 0
        self.gap_bytes = 0

    def add(self, head: bytes, body: bytes = b"", output: int = 0) -> int:
        """A frame ``HEAD SEQ...``; the oldest go while over the bound (an exit frame never)."""
        self.seq += 1
        frame = head + b" " + str(self.seq).encode() + body + (b"" if head == b"S" else b"\n")
        self.frames.append((self.seq, frame, output))
        self.size += len(frame)
        while self.size > self.keep and len(self.frames) > 1 and not self.frames[0][1].startswith(b"E"):
            seq, old, out = self.frames.popleft()
            self.size -= len(old)
            self.gap_seq, self.gap_bytes = seq, self.gap_bytes + out
        return self.seq

    def ack(self, seq: int) -> None:
        self.acked = max(self.acked, seq)
        while self.frames and self.frames[0][0] <= self.acked:
            self.size -= len(self.frames.popleft()[1])
        if self.gap_seq <= self.acked:
            self.gap_seq = self.gap_bytes = 0


IN, OUT = select.EPOLLIN, select.EPOLLOUT
GONE = select.EPOLLHUP | select.EPOLLERR


def refused(conn: _socket.socket, daemon_lock: str) -> bool:
    """Whether the peer of ``conn`` may not speak for the daemon; then it is told why and closed. With
    ``daemon_lock``, only the process that holds that lock (the running daemon itself) may, and never
    one of this shim's own tree; without, any process of the user (a worker's shim on an SSH host)."""
    why = ""
    if daemon_lock:
        try:
            pid = peer_pid(conn)
        except OSError:
            pid = 0
        if pid <= 0:
            why = "its credentials cannot be read"
        elif not holds_lock(pid, daemon_lock):
            why = f"process {pid} is not the roost daemon (it does not hold the daemon's lock)"
        elif descends(pid, os.getpid()):
            why = f"process {pid} is of this shim's own worker"
    if why:
        try:
            conn.setblocking(False)
            conn.send(('{"roost_shim": %d, "refused": %s}\n' % (VERSION, quote(why))).encode())
        except OSError:
            pass
        conn.close()
    return bool(why)


def descends(pid: int, ancestor: int) -> bool:
    """Whether ``ancestor`` is an ancestor of process ``pid`` (by /proc's parent links)."""
    for _ in range(MAX_DEPTH):
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            return False
        pid = int(raw[raw.rfind(b")") + 2:].split()[1])
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return True


class Shim:
    def __init__(self, listener: _socket.socket, job: str, keep: int, line_max: int, argv: list[str], mark: str,
                 given: dict[str, str], where: "Where", orphans: int, daemon_lock: str = "") -> None:
        self.listener = listener
        #: The daemon's lock as /proc/locks names it: only its holder may connect ("": anyone of the user).
        self.daemon_lock = daemon_lock
        self.where = where
        self.job = job
        self.line_max = line_max
        self.kept = Kept(keep)
        self.poll = select.epoll()
        self.names: dict[int, str] = {}
        env = {k: v for k, v in given.items() if k != ROOM_VAR}
        env[MARK_VAR] = mark
        if ROOM_VAR in given:
            env[ROOM_VAR] = given[ROOM_VAR]
        pipes = [os.pipe() for _ in range(3)]  # close-on-exec; the child's dup2 copies are not
        try:
            self.pid = os.posix_spawn(executable(argv[0], env.get("PATH", os.defpath)), argv, env, setsid=True, setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ),
                                       file_actions=[(os.POSIX_SPAWN_DUP2, pipes[0][0], 0),
                                                     (os.POSIX_SPAWN_DUP2, pipes[1][1], 1),
                                                     (os.POSIX_SPAWN_DUP2, pipes[2][1], 2)])
        finally:
            for fd in (pipes[0][0], pipes[1][1], pipes[2][1]):
                os.close(fd)
        self.stdin, self.stdout, self.stderr = pipes[0][1], pipes[1][0], pipes[2][0]
        self.start = start_time(self.pid)
        self.partial = b""
        self.oversize: list[bytes | int] | None = None  # size, head, tail of a line being skipped
        self.stdin_buf = bytearray()
        self.stdin_closing = False
        self.tail: "_collections.deque[str]" = _collections.deque(maxlen=STDERR_TAIL)
        self.err_partial = b""
        self.conn: _socket.socket | None = None
        self.inbuf = b""
        self.out = bytearray()
        self.sent = 0  # the last seq written to this connection
        self.rc: int | None = None
        self.grace_until: float | None = None
        #: The agent's output pipes not at their end yet, and whether they are read now (``_pace``).
        self.pipes = {self.stdout: "stdout", self.stderr: "stderr"}
        self.reading = True
        self.exit_seq = 0
        #: A spare's shim (``--ephemeral 1``) ends with its first daemon's connection until a ``P``.
        self.ephemeral = False
        for fd in (self.stdout, self.stderr, self.stdin):
            os.set_blocking(fd, False)
        try:  # room for a burst, as the daemon gave its workers' pipes before shims (roost/daemon/processes)
            fcntl.fcntl(self.stdout, F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass
        listener.setblocking(False)
        self.pidfd = os.pidfd_open(self.pid)
        for fd, name in ((listener.fileno(), "accept"), (self.stdout, "stdout"), (self.stderr, "stderr"),
                         (self.pidfd, "exit"), (orphans, "orphan")):
            self._watch(fd, IN, name)

    # -- the agent's side -------------------------------------------------------------------------------
    def on_stdout(self, data: bytes) -> None:
        lines = (self.partial + data).split(b"\n")
        self.partial = b""
        for i, line in enumerate(lines):
            last = i == len(lines) - 1
            if self.oversize is not None:
                size, head, tail = self.oversize
                self.oversize = [size + len(line), head, (tail + line)[-OVERSIZE_KEEP:]]  # type: ignore[operator]
                if not last:
                    size, head, tail = self.oversize
                    self.kept.add(b"O", b" %d %s %s" % (size, head.hex().encode() or b"-",  # type: ignore[union-attr]
                                                     tail.hex().encode() or b"-"), size + 1)  # type: ignore[union-attr]
                    self.oversize = None
            elif last:
                if len(line) > self.line_max:
                    self.oversize = [len(line), line[:OVERSIZE_KEEP], line[-OVERSIZE_KEEP:]]
                else:
                    self.partial = line
            elif len(line) > self.line_max:
                self.kept.add(b"O", b" %d %s %s" % (len(line), line[:OVERSIZE_KEEP].hex().encode(),
                                                 line[-OVERSIZE_KEEP:].hex().encode()), len(line) + 1)
            else:
                self.kept.add(b"L", b" " + line, len(line) + 1)

    def on_stderr(self, data: bytes) -> None:
        self.kept.add(b"S", b" %d\n" % len(data) + data, len(data))
        *lines, self.err_partial = (self.err_partial + data).split(b"\n")
        self.err_partial = self.err_partial[-STDERR_LINE:]
        for line in lines[-STDERR_TAIL:]:
            if text := line[:STDERR_LINE].decode(errors="replace").rstrip():
                self.tail.append(text)

    def exited(self) -> None:
        """The agent is gone: the exit goes out once its pipes are read (or PIPE_GRACE passed)."""
        if text := self.err_partial[:STDERR_LINE].decode(errors="replace").rstrip():
            self.tail.append(text)
        if self.partial:
            self.kept.add(b"L", b" " + self.partial, len(self.partial))
            self.partial = b""
        body = ('{"rc": %d, "stderr": [%s]}' % (self.rc or 0, ", ".join(quote(line) for line in self.tail))).encode()
        self.exit_seq = self.kept.add(b"E", b" " + body)
        for fd in (self.stdout, self.stderr):
            self._drop(fd)
        self.pipes.clear()
        self.grace_until = None

    def _drop(self, fd: int) -> None:
        if self.names.pop(fd, None) is not None:
            self.poll.unregister(fd)

    def write_stdin(self) -> None:
        if self.stdin < 0:
            self.stdin_buf.clear()
            return
        try:
            while self.stdin_buf:
                n = os.write(self.stdin, self.stdin_buf)
                del self.stdin_buf[:n]
        except BlockingIOError:
            pass
        except OSError:  # the agent closed its stdin: what it would have read goes nowhere
            self.stdin_buf.clear()
        self._watch(self.stdin, OUT if self.stdin_buf else 0, "stdin")
        if not self.stdin_buf and self.stdin_closing:
            self._drop(self.stdin)
            os.close(self.stdin)
            self.stdin = -1

    def _watch(self, fd: int, events: int, name: str) -> None:
        """Watch ``fd`` for ``events`` (none: not at all) under ``name``."""
        if not events:
            self._drop(fd)
        elif fd in self.names:
            self.poll.modify(fd, events)
        else:
            self.poll.register(fd, events)
            self.names[fd] = name

    # -- the daemon's side ------------------------------------------------------------------------------
    def accept(self) -> None:
        try:
            fd, _ = self.listener._accept()
        except OSError:
            return
        conn = _socket.socket(fileno=fd)
        if refused(conn, self.daemon_lock):  # the daemon connected (if one is) keeps the shim, and all it said
            return
        if self.conn is not None:  # a new daemon: the old connection is dead or about to be
            self._drop(self.conn.fileno())
            self.conn.close()
        conn.setblocking(False)
        self.conn, self.inbuf, self.out = conn, b"", bytearray()
        self.where.connected = True
        hello = '{"roost_shim": %d, "job": %s, "shim_pid": %d, "worker_pid": %d, "worker_start": %d, "acked": %d}' % (
            VERSION, quote(self.job), os.getpid(), self.pid, self.start, self.kept.acked)
        self.out += hello.encode() + b"\n"
        self.sent = self.kept.acked
        self._refresh()

    def _refresh(self) -> None:
        """Queue the frames this connection has not had (up to a few hundred KiB at a time)."""
        if self.conn is None:
            return
        if self.kept.gap_bytes and self.kept.gap_seq > self.sent:  # first, how much it will never have
            self.out += b"D %d %d\n" % (self.kept.gap_seq, self.kept.gap_bytes)
            self.sent = self.kept.gap_seq
        frames = self.kept.frames
        # Their seqs run on by one from the oldest kept: the first not sent is found, not searched for.
        at = max(0, self.sent + 1 - frames[0][0]) if frames else 0
        while at < len(frames) and len(self.out) <= 1 << 18:
            seq, frame, _ = frames[at]
            self.out += frame
            self.sent = seq
            at += 1
        events = IN | (OUT if self.out else 0)
        if len(self.stdin_buf) > STDIN_HELD:
            events &= ~IN
        self._watch(self.conn.fileno(), events, "conn")

    def _lost(self) -> None:
        assert self.conn is not None
        self._drop(self.conn.fileno())
        self.conn.close()
        self.conn, self.out = None, bytearray()
        self.where.next_check = time.monotonic() + self.where.every
        if self.ephemeral or not self.where.reachable():  # nobody will want it: its agent and it go now
            self.end_alone()

    def end_alone(self) -> None:
        """Kill the agent's session and end without a daemon's acknowledgement."""
        try:
            os.killpg(self.pid, _signal.SIGKILL)
        except OSError:
            pass
        self.rc = self.rc if self.rc is not None else -9
        self.exit_seq = self.kept.acked = max(self.exit_seq, self.kept.seq, 1)

    def on_conn(self, mask: int) -> None:
        assert self.conn is not None
        if mask & OUT and self.out:
            try:
                del self.out[:self.conn.send(self.out)]
            except BlockingIOError:
                pass
            except OSError:
                return self._lost()
        if mask & (IN | GONE):
            try:
                data = self.conn.recv(READ)
            except BlockingIOError:
                data = None
            except OSError:
                data = b""
            if data == b"":
                return self._lost()
            if data:
                self.inbuf += data
                self._commands()

    def _commands(self) -> None:
        while True:
            nl = self.inbuf.find(b"\n")
            if nl < 0:
                return
            head = self.inbuf[:nl].split()
            if head and head[0] == b"I":
                n = int(head[1])
                if len(self.inbuf) < nl + 1 + n:
                    return
                self.stdin_buf += self.inbuf[nl + 1:nl + 1 + n]
                self.inbuf = self.inbuf[nl + 1 + n:]
                self.write_stdin()
                continue
            self.inbuf = self.inbuf[nl + 1:]
            if head and head[0] == b"A":
                self.kept.ack(int(head[1]))
            elif head and head[0] == b"C":
                self.stdin_closing = True
                self.write_stdin()
            elif head and head[0] == b"P":  # a job took it: it outlives the daemon from now on
                self.ephemeral = False

    def reap(self) -> None:
        """Reap every child that ended: the agent (its exit code kept) and what its tree orphaned,
        which a subreaper must reap or it stays a zombie."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid:
                self.rc = os.waitstatus_to_exitcode(status)

    def _pace(self) -> None:
        """Read the agent's output while nobody is connected (the oldest goes past the bound), or while
        a connected daemon has acknowledged enough of it; else leave it in the pipe, so the agent
        waits for the daemon as it would on a pipe of its own, and nothing is dropped."""
        reading = self.conn is None or self.kept.size < self.kept.keep // 2
        if reading != self.reading:
            self.reading = reading
            if not reading:
                self.grace_until = None
            for fd, name in self.pipes.items():
                self._watch(fd, IN if reading else 0, name)

    # -- the loop ---------------------------------------------------------------------------------------
    def run(self) -> int:
        while not (self.exit_seq and self.kept.acked >= self.exit_seq):
            due = [t for t in (self.grace_until, None if self.conn else self.where.next_check) if t is not None]
            timeout = max(0.0, min(due) - time.monotonic()) if due else -1.0
            for fd, mask in self.poll.poll(timeout):
                name = self.names.get(fd)
                if name == "accept":
                    self.accept()
                elif name == "conn":
                    self.on_conn(mask)
                elif name == "stdin":
                    self.write_stdin()
                elif name in ("stdout", "stderr"):
                    try:
                        data = os.read(fd, READ)
                    except BlockingIOError:
                        continue
                    if not data:
                        self._drop(fd)
                        self.pipes.pop(fd, None)
                    else:
                        (self.on_stdout if name == "stdout" else self.on_stderr)(data)
                elif name == "exit":
                    self._drop(fd)
                    self.reap()
                elif name == "orphan":  # SIGCHLD: an orphan of the agent's tree (re-parented here) ended
                    while True:
                        try:
                            if not os.read(fd, READ):
                                break
                        except BlockingIOError:
                            break
                    self.reap()
            if self.conn is None and time.monotonic() >= self.where.next_check:
                self.where.next_check = time.monotonic() + self.where.every
                # Nobody connected in time, or can; or (a host's, ``--alone-ends``) nobody came back in time.
                if not self.where.connected or not self.where.reachable() or self.where.alone_ends:
                    self.end_alone()
                    break
            self._pace()
            if self.rc is not None and not self.exit_seq:
                if self.reading and self.grace_until is None:
                    self.grace_until = time.monotonic() + PIPE_GRACE  # counted only while its pipes are read
                if not self.pipes or (self.reading and time.monotonic() >= self.grace_until):  # type: ignore[operator]
                    self.exited()
            self._refresh()
        self.end_orphans()
        return 0

    def end_orphans(self) -> None:
        """SIGKILL and reap what the agent's tree orphaned to this shim and is still running (round after
        round: a killed one's children come to the shim next), so nothing of the job outlives its shim.
        They are its own unreaped children: their pids cannot have been given to anyone else."""
        me = str(os.getpid()).encode()
        for _ in range(MAX_ROUNDS):
            children = []
            for name in os.listdir("/proc"):
                try:
                    with open(f"/proc/{name}/stat", "rb") as fh:
                        raw = fh.read()
                except (OSError, ValueError):
                    continue
                if name.isdigit() and raw[raw.rfind(b")") + 2:].split()[1] == me:
                    children.append(int(name))
            if not children:
                return
            for pid in children:
                try:
                    os.kill(pid, _signal.SIGKILL)
                    os.waitpid(pid, 0)
                except (OSError, ChildProcessError):
                    pass


class Where:
    """The socket's path, and whether it still leads to this shim's socket (the file the daemon
    bound before starting it: its device and inode), so that a daemon can reach the shim."""

    def __init__(self, path: str, every: float) -> None:
        self.path = path
        self.every = every
        self.connected = False
        #: A worker's on an SSH host: it ends when no daemon was connected for ``every`` seconds.
        self.alone_ends = False
        self.next_check = time.monotonic() + every
        self.id = self._id()

    def _id(self) -> "tuple[int, int] | None":
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def reachable(self) -> bool:
        return self.id is not None and self._id() == self.id


def orphan_alarm() -> int:
    """A pipe's read end that SIGCHLD writes to (the interpreter's wakeup fd), for the loop to watch."""
    read_end, write_end = os.pipe()
    for fd in (read_end, write_end):
        os.set_blocking(fd, False)
    _signal.signal(_signal.SIGCHLD, lambda signum, frame: None)
    _signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    return read_end


def main(args: list[str]) -> int:
    """``shim.py --fd N --job ID --keep BYTES --line-max BYTES --mark MARK --socket PATH [--ephemeral 1]
    [--orphan-after SECONDS] [--alone-ends 1] [--daemon-lock MAJ:MIN:INODE] -- ARGV...``"""
    split = args.index("--")
    opts = dict(zip(args[:split:2], args[1:split:2]))
    listener = _socket.socket(fileno=int(opts["--fd"]))
    os.set_inheritable(listener.fileno(), False)  # the agent gets none of the shim's descriptors
    where = Where(opts["--socket"], float(opts.get("--orphan-after", ORPHAN_AFTER)))
    become_subreaper()
    try:
        shim = Shim(listener, opts["--job"], int(opts["--keep"]), int(opts["--line-max"]), args[split + 1:],
                    opts["--mark"], read_environment(), where, orphan_alarm(), opts.get("--daemon-lock", ""))
    except OSError as exc:  # the agent could not start: the daemon's connection hears why, then EOF
        listener.settimeout(where.every)  # nobody connects: it ends all the same
        while True:
            try:
                conn = _socket.socket(fileno=listener._accept()[0])
            except OSError:
                return 1
            if not refused(conn, opts.get("--daemon-lock", "")):
                break
        error = f"{exc.strerror or exc}: {exc.filename or (args[split + 1] if len(args) > split + 1 else '')}"
        conn.sendall(('{"roost_shim": %d, "error": %s}' % (VERSION, quote(error))).encode() + b"\n")
        return 1
    shim.ephemeral = opts.get("--ephemeral") == "1"
    where.alone_ends = opts.get("--alone-ends") == "1"
    try:
        return shim.run()
    finally:
        if where.reachable():  # a path that leads elsewhere now is another's socket
            try:
                os.unlink(opts["--socket"])
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
