"""The far side of a remote worker: what ``ssh`` runs on the host, from the shipped bundle.

It reads the worker's setup (argv, environment, cwd) from a file the daemon wrote there just before
(owner-only, removed once read: the job's token never shows in ``ps``), starts the worker in a
session of its own, and relays its own stdin to the worker's. The worker's stdout and stderr are the
ssh channel's, untouched.

Why a wrapper at all: sshd without a terminal sends no SIGHUP when a connection drops, so a worker
that is busy (not reading stdin) would outlive the link. Here stdin reaching EOF — the daemon closed
it, or the connection is gone — or a SIGTERM/SIGHUP ends the worker's whole tree: EOF is passed on
first, then SIGTERM after ``EOF_GRACE``, then SIGKILL after ``KILL_GRACE``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from roost.hosts import remote_shim
from roost.hosts.remote_shim import NOT_STARTED, here_argv, load_setup
from roost.proctree import MARK_VAR, WorkerTree, boot_ticks

#: How long a worker may take to exit on its own once its stdin closed, and then after SIGTERM.
EOF_GRACE = 2.0
KILL_GRACE = 2.0
#: ssh itself exits 255 on a connection error, so a worker's own 255 is passed on as this.
LINK_CODE = 255


def start(setup: dict[str, Any], mark: str) -> subprocess.Popen[bytes]:
    """The worker, in a session of its own, carrying the tree's mark; the bundle on its PYTHONPATH.
    A leading ``~`` of the program and of a variable's value is this host's home (the config names
    the host's paths: pi's ``command`` and ``agent_dir``)."""
    argv = here_argv(setup["argv"])
    env = {**os.environ, **{k: os.path.expanduser(v) for k, v in setup["env"].items()}, MARK_VAR: mark}
    if setup.get("pythonpath"):
        env["PYTHONPATH"] = setup["pythonpath"]
    return subprocess.Popen(argv, cwd=os.path.expanduser(setup["cwd"]), env=env, stdin=subprocess.PIPE,
                            start_new_session=True)


def relay(child: subprocess.Popen[bytes], eof: threading.Event) -> None:
    """Copy stdin to the worker until EOF, then close the worker's stdin and say so."""
    assert child.stdin is not None
    fd = sys.stdin.fileno()
    try:
        while data := os.read(fd, 1 << 16):
            child.stdin.write(data)
            child.stdin.flush()
    except OSError:
        pass
    finally:
        try:
            child.stdin.close()
        except OSError:
            pass
        eof.set()


def end_tree(child: subprocess.Popen[bytes], tree: WorkerTree | None) -> None:
    """SIGTERM, then SIGKILL, to the worker's tree: on Linux all of it (session, descendants, mark,
    as on the daemon's side); elsewhere its process group."""
    if tree is not None:
        asyncio.run(tree.end(grace=KILL_GRACE, session_known=True))
        return
    for sig, grace in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, KILL_GRACE)):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if child.poll() is not None:
                try:
                    os.killpg(child.pid, 0)
                except ProcessLookupError:
                    return
            time.sleep(0.05)


def serve(setup: dict[str, Any]) -> int:
    floor, mark = (boot_ticks(), WorkerTree.new_mark()) if os.path.isdir("/proc/self") else (0, "")
    try:
        child = start(setup, mark)
    except OSError as exc:  # the job's reason: the host lacks the agent's program (or its cwd)
        print(f"cannot start {setup['argv'][0]} on this host: {exc.strerror}: {exc.filename} (`roost hosts check` "
              f"says what a host lacks)", file=sys.stderr)
        return NOT_STARTED
    tree = WorkerTree.of("remote", child.pid, floor, mark) if mark else None
    eof = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: eof.set())
    threading.Thread(target=relay, args=(child, eof), daemon=True).start()
    while child.poll() is None and not eof.is_set():
        eof.wait(0.2)
    if eof.is_set() and child.poll() is None:
        try:
            child.wait(EOF_GRACE)
        except subprocess.TimeoutExpired:
            pass
    end_tree(child, tree)  # also what an exited worker left in its group
    code = child.wait()
    code = 128 - code if code < 0 else code
    return LINK_CODE - 1 if code == LINK_CODE else code


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--check":
        print(json.dumps({"python": sys.version.split()[0], "executable": sys.executable}))
        return
    if args and args[0] in remote_shim.COMMANDS:  # a worker under a shim there (roost/hosts/remote_shim.py)
        sys.exit(remote_shim.main(args))
    sys.exit(serve(load_setup(Path(args[0]))))


if __name__ == "__main__":
    main()
