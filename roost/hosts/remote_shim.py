"""The far side of a remote worker under its shim, from the shipped bundle (docs/hosts.md#a-dropped-link).

Three commands the daemon runs on the host, each a session over the master:

- ``--shim SETUP SHIM SOCKET KEEP LINE_MAX ALONE_AFTER``: start roost's shim (``SHIM``, shipped beside the bundle, run with
  this host's Python, ``-I -S``) detached from the ssh channel (a session of its own, no stdio of
  the channel), listening on ``SOCKET`` (owner-only, in roost's directory there), running the
  worker the setup names; print one JSON line (the shim's and the worker's pid and start, the
  tree's mark) and return. With no daemon connected for ALONE_AFTER seconds the shim ends the
  worker and itself (``--alone-ends``): a host lost for good, or a daemon that never came back,
  leaves nothing running there for long. The worker's tree is written beside the socket (``.tree``): a later
  start of the same job ends what a past one left first (a job that failed while its host was lost).
- ``--relay SOCKET``: copy stdin to the shim's socket and the socket to stdout, so the daemon
  speaks to the shim over a session; exit ``GONE`` when no shim listens there.
- ``--signal TREE SIG [shim]``: signal the worker's tree (``0``: end it, SIGTERM then SIGKILL; with
  ``shim``, its shim too: `roost stop` while no daemon runs, whose exit nobody is there to take).

The shim keeps the worker running when the link drops and keeps what it says (bounded) for the
daemon's next connection, as it does locally across a daemon restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

from roost.proctree import WorkerTree, boot_id, boot_ticks, read_proc, send

#: Stands for this host's Python in a setup's argv (the daemon does not know its path): an argument
#: that is this, or a JSON string that is this inside an argument (``QUOTED_PYTHON``: Claude Code's
#: ``--mcp-config`` names the Python that runs roost's tools).
PYTHON = "{python}"
QUOTED_PYTHON = json.dumps(PYTHON)
#: The exit code when the worker could not be started at all (as a shell's for a missing command).
NOT_STARTED = 127
COMMANDS = ("--shim", "--relay", "--signal")
#: The relay's exit code when no shim listens at the socket: the worker there is gone.
GONE = 3
#: The longest path a unix socket address holds (sun_path, with its NUL).
SUN_PATH = 107
SHIM_HELLO_WAIT = 10.0
READ = 1 << 16


@contextlib.contextmanager
def address_of(path: str) -> Iterator[str]:
    """``path``, or when too long for an address the same file through its directory's descriptor."""
    if len(os.fsencode(path)) <= SUN_PATH:
        yield path
        return
    fd = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{os.path.basename(path)}"
    finally:
        os.close(fd)


def listen(path: str) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # owner-only from birth
    try:
        with address_of(path) as address:
            sock.bind(address)
    finally:
        os.umask(old)
    sock.listen(4)
    return sock


def here_argv(argv: list[Any]) -> list[str]:
    """A setup's argv on this host: ``PYTHON`` is this host's Python, as an argument or as a JSON
    string inside one; a leading ``~`` of the program is this host's home."""
    here = [sys.executable if arg == PYTHON else str(arg).replace(QUOTED_PYTHON, json.dumps(sys.executable))
            for arg in argv]
    here[0] = os.path.expanduser(here[0])
    return here


def load_setup(path: Path) -> dict[str, Any]:
    """The setup the daemon wrote, removed at once (it holds the job's token)."""
    try:
        return json.loads(path.read_text())
    finally:
        path.unlink(missing_ok=True)


def end_leftover(tree_path: Path) -> None:
    """A past start's worker of this job (and its shim) still running: ended, so one job has one worker."""
    try:
        data = json.loads(tree_path.read_text())
        tree = WorkerTree(**{k: data[k] for k in ("job", "pid", "start", "floor", "mark", "boot")})
    except (OSError, ValueError, KeyError, TypeError):
        return
    send(int(data.get("shim_pid", 0)), int(data.get("shim_start", -1)), 9)
    if tree.boot == boot_id():
        asyncio.run(tree.end(grace=0, session_known=True))
    tree_path.unlink(missing_ok=True)


def shim_runs_here() -> str:
    """Why roost's shim cannot run on this host ("" when it can): it waits on epoll and a pidfd."""
    if hasattr(select, "epoll") and hasattr(os, "pidfd_open"):
        return ""
    return (f"roost's shim needs Linux (epoll and pidfds, Python 3.9+); this host is {sys.platform} with "
            f"Python {sys.version.split()[0]}")


def launch(setup_path: str, shim_program: str, sock_path: str, keep: str, line_max: str, alone_after: str) -> int:
    setup = load_setup(Path(setup_path))
    if why := shim_runs_here():
        print(f"cannot start a worker on this host: {why}", file=sys.stderr)
        return NOT_STARTED
    tree_path = Path(sock_path).with_suffix(".tree")
    end_leftover(tree_path)
    floor, mark = boot_ticks(), WorkerTree.new_mark()
    argv = here_argv(setup["argv"])
    env = {**os.environ, **{k: os.path.expanduser(v) for k, v in setup["env"].items()}}
    if setup.get("pythonpath"):
        env["PYTHONPATH"] = setup["pythonpath"]
    sock = listen(sock_path)
    try:
        shim = subprocess.Popen(
            [sys.executable, "-I", "-S", shim_program, "--fd", str(sock.fileno()), "--job", str(setup["job"]),
             "--keep", str(int(keep)), "--line-max", str(int(line_max)), "--mark", mark,
             "--socket", sock_path, "--orphan-after", str(float(alone_after)), "--alone-ends", "1", "--", *argv],
            cwd=os.path.expanduser(setup["cwd"]), env={}, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, pass_fds=[sock.fileno()], start_new_session=True)
    except OSError as exc:  # its cwd is not there, say
        with contextlib.suppress(OSError):
            os.unlink(sock_path)
        print(f"cannot start {argv[0]} on this host: {exc.strerror}: {exc.filename}", file=sys.stderr)
        return NOT_STARTED
    finally:
        sock.close()
    assert shim.stdin is not None
    with contextlib.suppress(BrokenPipeError), shim.stdin:
        shim.stdin.write(b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0" for k, v in env.items()))
    hello = _hello(sock_path)
    if "error" in hello or "worker_pid" not in hello:
        shim.kill()  # it said why, or said nothing in time: either way no worker of it runs
        with contextlib.suppress(OSError):
            os.unlink(sock_path)
        print(f"cannot start {argv[0]} on this host: {hello.get('error', 'its shim did not answer')} (`roost hosts "
              f"check` says what a host lacks)", file=sys.stderr)
        return NOT_STARTED
    proc = read_proc(shim.pid)
    info = {"job": str(setup["job"]), "pid": int(hello["worker_pid"]), "start": int(hello["worker_start"]),
            "floor": floor, "mark": mark, "boot": boot_id(), "shim_pid": shim.pid,
            "shim_start": proc.start if proc else 0}
    tmp = tree_path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(info, fh)
    os.replace(tmp, tree_path)
    print(json.dumps(info), flush=True)
    return 0


def _hello(sock_path: str) -> dict[str, Any]:
    """The shim's hello (the worker's pid and start, or why it could not start it); the connection
    is left at once, so the shim keeps everything for the daemon's."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(SHIM_HELLO_WAIT)
    try:
        with address_of(sock_path) as address:
            conn.connect(address)
        data = b""
        while b"\n" not in data:
            chunk = conn.recv(READ)
            if not chunk:
                break
            data += chunk
        hello = json.loads(data.split(b"\n", 1)[0] or b"{}")
        return hello if isinstance(hello, dict) else {}
    except (OSError, ValueError):
        return {}
    finally:
        conn.close()


def relay(sock_path: str) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with address_of(sock_path) as address:
            conn.connect(address)
    except (FileNotFoundError, ConnectionRefusedError):
        print(f"no shim listens at {sock_path}", file=sys.stderr)
        return GONE

    def upstream() -> None:
        try:
            while data := os.read(0, READ):
                conn.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)

    threading.Thread(target=upstream, daemon=True).start()
    try:
        while data := conn.recv(READ):
            view = memoryview(data)
            while view:
                view = view[os.write(1, view):]
    except OSError:
        pass
    return 0


def signal_tree(tree_path: str, sig: int, shim: bool = False) -> int:
    try:
        data = json.loads(Path(tree_path).read_text())
        tree = WorkerTree(**{k: data[k] for k in ("job", "pid", "start", "floor", "mark", "boot")})
    except (OSError, ValueError, KeyError, TypeError):
        return 0  # nothing written down: nothing to signal
    if sig:
        tree.signal(sig, session_known=True)
        return 0
    ended = asyncio.run(tree.end(grace=0, session_known=True))
    if shim:
        send(int(data.get("shim_pid", 0)), int(data.get("shim_start", -1)), 9)
    return 0 if ended else 1


def main(args: list[str]) -> int:
    if args[0] == "--shim":
        return launch(*args[1:7])
    if args[0] == "--relay":
        return relay(args[1])
    return signal_tree(args[1], int(args[2]), args[3:4] == ["shim"])
