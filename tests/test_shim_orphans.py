"""No shim is left that nobody can reach (roost/programs/shim.py, docs/reliability.md "Workers that
outlive the daemon"): one never connected ends within its bound, one whose socket path no longer
leads to it ends once no daemon is connected, one not yet written down ends with its first
connection, and a starting daemon ends those whose socket has no record beside it."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roost.daemon.processes.shim_process import open_process
from roost.daemon.processes.shim_link import SHIM_PROGRAM, ShimRecord, listen
from roost.daemon.storage.recovery import kill_stale_workers
from roost.drivers.base import Launch

from conftest import pid_alive

#: A worker that writes its pid down and then waits on its stdin (the shim's pipe) for ever.
WORKER = "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); sys.stdin.read()"
#: Long enough never to be what ends a shim in a test that is about another rule.
NEVER = "3600"


class Shim:
    """A shim started as the daemon starts one (a socket bound first, the environment on stdin)."""

    def __init__(self, folder: Path, orphan_after: str, ephemeral: bool = False,
                 argv: list[str] | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "j.sock"
        self.pid_file = folder / "worker.pid"
        sock = listen(self.path)
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(SHIM_PROGRAM), "--fd", str(sock.fileno()), "--job", "j",
             "--keep", "100000", "--line-max", "4096", "--mark", "m", "--socket", str(self.path),
             "--orphan-after", orphan_after, *(["--ephemeral", "1"] if ephemeral else []), "--",
             *(argv or [sys.executable, "-c", WORKER, str(self.pid_file)])],
            pass_fds=[sock.fileno()], stdin=subprocess.DEVNULL)
        sock.close()

    def worker(self) -> int:
        deadline = time.monotonic() + 30
        while not (self.pid_file.exists() and self.pid_file.read_text()):
            assert time.monotonic() < deadline, "the worker started"
            time.sleep(0.01)
        return int(self.pid_file.read_text())

    def connect(self) -> tuple[socket.socket, dict]:
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(str(self.path))
        return conn, json.loads(conn.makefile("rb").readline())

    def ended(self, timeout: float = 30) -> None:
        """The shim ended (within ``timeout``, a bound for a loaded machine), its worker with it."""
        self.proc.wait(timeout)
        said = self.pid_file.read_text() if self.pid_file.exists() else ""
        if said:  # else it was ended before it wrote its pid down
            worker = int(said)
            deadline = time.monotonic() + timeout
            while pid_alive(worker):
                assert time.monotonic() < deadline, "the worker was killed with its shim"
                time.sleep(0.01)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def shims():
    started: list[Shim] = []

    def make(*args, **kw) -> Shim:
        started.append(Shim(*args, **kw))
        return started[-1]

    yield make
    for shim in started:
        shim.kill()


def test_a_shim_no_daemon_connected_ends_within_its_bound_with_its_worker(tmp_path: Path, shims) -> None:
    shim = shims(tmp_path, "0.5")
    shim.ended()
    assert not shim.path.exists(), "its socket goes with it"


def test_a_shim_whose_agent_could_not_start_ends_when_nobody_connects(tmp_path: Path, shims) -> None:
    shim = shims(tmp_path, "0.5", argv=[str(tmp_path / "no-such-agent")])
    assert shim.proc.wait(30) == 1


@pytest.mark.parametrize("when", ["connected", "alone"])
def test_a_shim_whose_socket_file_was_removed_ends_once_no_daemon_is_connected(
        tmp_path: Path, shims, when: str) -> None:
    """Removed while a daemon is connected: it ends when that connection drops. Removed while none
    is: it ends at its next check (``--orphan-after`` apart)."""
    shim = shims(tmp_path, "0.5" if when == "alone" else NEVER)
    conn, hello = shim.connect()  # at once: within the bound for a first connection
    assert hello["job"] == "j"
    shim.worker()
    if when == "connected":
        shim.path.unlink()
        conn.close()
    else:
        conn.close()  # a kept shim outlives its daemon's connection ...
        conn, _ = shim.connect()  # ... and the next daemon reaches it
        conn.close()
        shim.path.unlink()
    shim.ended()


def test_a_shim_whose_path_leads_to_another_socket_ends_and_leaves_that_one_alone(tmp_path: Path, shims) -> None:
    shim = shims(tmp_path, "0.5")
    conn, _ = shim.connect()
    conn.close()
    shim.worker()
    shim.path.unlink()
    other = listen(shim.path)  # another shim's socket at the same path
    try:
        shim.ended()
        assert shim.path.exists(), "it removed only its own socket"
    finally:
        other.close()


def test_a_shim_not_written_down_yet_ends_with_its_first_connection_and_one_kept_does_not(
        tmp_path: Path, shims) -> None:
    """``--ephemeral``: every shim the daemon starts, until ``P`` (its record is written down)."""
    lost, kept = shims(tmp_path / "a", NEVER, ephemeral=True), shims(tmp_path / "b", NEVER, ephemeral=True)
    kept_worker = kept.worker()
    for shim in (lost, kept):
        conn, _ = shim.connect()
        if shim is kept:
            conn.sendall(b"P\n")  # read before the end of the connection, which comes after it
        conn.close()
    lost.ended()
    conn, hello = kept.connect()
    assert hello["worker_pid"] == kept_worker and kept.proc.poll() is None and pid_alive(kept_worker)
    conn.close()


def test_a_starting_daemon_ends_a_shim_whose_socket_has_no_record(tmp_path: Path, shims) -> None:
    """The daemon died between starting the shim and writing its record: the next one's recovery
    connects and leaves, and the shim, never kept, ends with its worker."""
    state = tmp_path / "state"
    shim = shims(state / "workers", NEVER, ephemeral=True)
    shim.worker()
    kill_stale_workers(state)
    shim.ended()
    assert not shim.path.exists()


@pytest.mark.parametrize("written", [True, False])
async def test_a_shim_outlives_its_daemon_only_once_its_record_is_written(tmp_path: Path, written: bool) -> None:
    """``open_process`` keeps the shim (``P``) after writing its record; a record that cannot be
    written (here a directory is in its way) leaves a shim that ends with its daemon's connection."""
    record = tmp_path / "state" / "workers" / "j.json"
    if not written:
        (record / "in-the-way").mkdir(parents=True)
    process = await open_process("j", Launch(argv=[sys.executable, "-c", "import sys; sys.stdin.read()"],
                                             env={}, cwd="/", record=record))
    try:
        process.link.close()  # as the daemon's death would
        if written:
            assert ShimRecord.load(record) == process.record
            conn = socket.socket(socket.AF_UNIX)
            conn.connect(process.record.socket)  # the next daemon reaches it, and its worker
            assert json.loads(conn.makefile("rb").readline())["worker_pid"] == process.pid
            conn.close()
        deadline = time.monotonic() + 30
        while not written and (pid_alive(process.record.shim_pid) or pid_alive(process.pid)):
            assert time.monotonic() < deadline, "the shim and its worker ended with the connection"
            await asyncio.sleep(0.01)
    finally:
        process.tree.kill_now()
        process.record.kill()
