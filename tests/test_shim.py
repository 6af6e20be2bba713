"""Workers that outlive the daemon (docs/reliability.md): every worker runs under its shim, and a
daemon stopped with SIGTERM or killed with SIGKILL leaves the turns running; the next one re-adopts
them and each turn completes with its output whole, nothing twice. Real daemons, real workers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from roost.daemon.processes.shim_link import SHIM_PROGRAM, address_of, listen
from roost.proctree import read_proc

from conftest import DaemonHarness, pid_alive

AGENT = Path(__file__).resolve().parent / "numbered_agent.py"
LINES, HALF = 3000, 1200
CONFIG = f"""
[drivers.numbered]
kind = "command"
command = [{json.dumps(sys.executable)}, {json.dumps(str(AGENT))}, "{{prompt}}"]
"""
BUILTIN_JOBS = 4


def texts(daemon: DaemonHarness, job: str) -> str:
    return "".join(e["data"]["text"] for e in daemon.timeline(job) if e["kind"] == "text")


def kinds(daemon: DaemonHarness, job: str, kind: str) -> list[dict]:
    return [e["data"] for e in daemon.timeline(job) if e["kind"] == kind]


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_turns_go_on_across_a_restart_of_the_daemon_whole_and_nothing_twice(
        daemon_factory: Callable[[str], DaemonHarness], how: str) -> None:
    daemon = daemon_factory(CONFIG)
    gates = Path(daemon.env["ROOST_GATES"])
    builtin = [daemon.spawn(f"say before-{i}\nwait-for g{i}\nsay after-{i}") for i in range(BUILTIN_JOBS)]
    numbered = daemon.spawn(f"{LINES} {HALF} {gates / 'numbers'}", driver="numbered")
    for i, job in enumerate(builtin):
        daemon.at_gate(job, f"g{i}")
    daemon.wait_for(lambda: f"line-{HALF:05d}\n" in texts(daemon, numbered), what="the first half of the lines")
    pids = {job: daemon.show(job)["pid"] for job in [*builtin, numbered]}
    if how == "SIGKILL":
        daemon.kill()
    else:
        daemon.stop(keep_workers=True)
    # Half the gates open while no daemon listens: their shims keep what the workers say.
    for i in range(0, BUILTIN_JOBS, 2):
        daemon.release(f"g{i}")
    daemon.release("numbers")
    daemon.start()
    for i in range(1, BUILTIN_JOBS, 2):
        daemon.release(f"g{i}")
    for job in [*builtin, numbered]:
        row = daemon.wait_state(job, "idle")
        assert row["pid"] == pids[job], "the same worker, re-adopted"
        assert len(kinds(daemon, job, "turn_end")) == 1 and not kinds(daemon, job, "error")
        assert [w.get("adopted") for w in kinds(daemon, job, "worker")] == [None, True]
    for i, job in enumerate(builtin):
        said = texts(daemon, job)
        assert said.count(f"before-{i}") == 1 and said.count(f"after-{i}") == 1
    said = texts(daemon, numbered)
    assert [said.count(f"line-{i:05d}\n") for i in range(1, LINES + 1)] == [1] * LINES
    assert said == "".join(f"line-{i:05d}\n" for i in range(1, LINES + 1))


def test_a_worker_that_died_while_no_daemon_listened_fails_its_job_with_the_reason(daemon: DaemonHarness) -> None:
    job = daemon.spawn("wait-for never")
    daemon.at_gate(job, "never")
    pid = daemon.show(job)["pid"]
    daemon.kill()
    os.kill(pid, signal.SIGKILL)
    daemon.wait_for(lambda: not pid_alive(pid), what="the worker to be gone")
    daemon.start()
    row = daemon.wait_state(job, "failed")
    assert "killed by SIGKILL" in row["reason"] and row["pid"] is None
    assert daemon.call("send", job=job, text="say back")["outcome"] in ("resumed", "restarted")
    assert daemon.wait_state(job, "idle")["last_text"] == "back"


def test_a_shim_that_is_gone_fails_its_job_as_a_lost_worker(daemon: DaemonHarness) -> None:
    job = daemon.spawn("wait-for never")
    daemon.at_gate(job, "never")
    pid = daemon.show(job)["pid"]
    record = json.loads((daemon.paths.state_dir / "workers" / f"{job}.json").read_text())
    daemon.kill()
    os.kill(record["shim"]["pid"], signal.SIGKILL)
    daemon.start()
    row = daemon.wait_state(job, "failed")
    assert "daemon restarted" in row["reason"]
    daemon.wait_for(lambda: not pid_alive(pid), what="the worker the shim left to be killed")


def test_output_past_the_bound_while_no_daemon_listens_is_cut_from_the_oldest_and_said(
        daemon_factory: Callable[[str], DaemonHarness]) -> None:
    """About 30 MB written while the daemon is down, to a shim that keeps 8 MiB: the turn still ends,
    the timeline holds the first part (committed before) and then an unbroken end of the output,
    with a note between them saying how many bytes of the worker's output were dropped."""
    daemon = daemon_factory(CONFIG)
    gates = Path(daemon.env["ROOST_GATES"])
    count, half = 2_500_000, 1000
    job = daemon.spawn(f"{count} {half} {gates / 'flood'} {gates / 'written'}", driver="numbered")
    daemon.wait_for(lambda: f"line-{half:05d}\n" in texts(daemon, job), what="the first lines")
    daemon.kill()
    daemon.release("flood")
    daemon.wait_for(lambda: (gates / "written").exists(), timeout=120, what="every line written")
    daemon.start()
    daemon.wait_state(job, "idle", timeout=120)
    entries = daemon.timeline(job)
    [dropped] = [e for e in entries if e["kind"] == "note" and "were dropped" in e["data"].get("message", "")]
    size = int(dropped["data"]["message"].split()[0])
    assert size > 8 << 20, "most of the 30 MB"
    before = "".join(e["data"]["text"] for e in entries if e["kind"] == "text" and e["seq"] < dropped["seq"])
    after = "".join(e["data"]["text"] for e in entries if e["kind"] == "text" and e["seq"] > dropped["seq"])
    full = "".join(f"line-{i:05d}\n" for i in range(1, count + 1))
    assert full.startswith(before) and before.endswith(f"line-{half:05d}\n")
    assert full.endswith(after) and 0 < len(after) < 8 << 20
    assert [e["data"]["outcome"] for e in entries if e["kind"] == "turn_end"] == ["ok"]


def test_the_shim_keeps_the_newest_output_and_says_exactly_how_many_bytes_it_dropped(tmp_path: Path) -> None:
    """A worker writes 5,000 bytes while nobody is connected, to a shim that keeps 1,000: the first
    daemon to connect hears, first, how many bytes went, then the newest lines whole, then the exit."""
    path = tmp_path / "w.sock"
    sock = listen(path)
    pid_file = tmp_path / "pid"
    worker = ("import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); "
              "sys.stdout.write(''.join(f'{i:049d}\\n' for i in range(1, 101)))")
    shim = subprocess.Popen([sys.executable, "-I", "-S", str(SHIM_PROGRAM), "--fd", str(sock.fileno()), "--job", "j",
                             "--keep", "1000", "--line-max", "4096", "--mark", "m", "--socket", str(path), "--",
                             sys.executable, "-c", worker, str(pid_file)], pass_fds=[sock.fileno()],
                            stdin=subprocess.DEVNULL)  # the agent's environment (on stdin): none
    sock.close()
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text() or read_proc(int(pid_file.read_text())) is not None:
            assert time.monotonic() < deadline, "the worker wrote its pid, everything, and was reaped by its shim"
            time.sleep(0.01)  # a wait for that, not a pause to show anything
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(str(path))
        frames = conn.makefile("rb")
        hello = json.loads(frames.readline())
        assert hello["roost_shim"] == 2 and hello["job"] == "j" and hello["worker_pid"] == int(pid_file.read_text())
        kind, seq, dropped = frames.readline().split()
        assert kind == b"D"
        lines = []
        while (frame := frames.readline()).startswith(b"L "):
            lines.append(frame.split(b" ", 2)[2].rstrip(b"\n"))
        assert frame.startswith(b"E ") and json.loads(frame.split(b" ", 2)[2])["rc"] == 0
        numbers = [int(line) for line in lines]
        assert numbers == list(range(101 - len(numbers), 101)) and 0 < len(numbers) < 100
        assert int(dropped) == 5000 - 50 * len(numbers) and int(seq) == 100 - len(numbers)
        conn.sendall(b"A %s\n" % frame.split(b" ")[1])  # the exit acknowledged: the shim ends
        assert shim.wait(10) == 0 and not path.exists()
    finally:
        if shim.poll() is None:
            shim.kill()


def test_a_socket_path_too_long_for_an_address_is_bound_and_reached_through_its_directory(tmp_path: Path) -> None:
    """sun_path holds 107 bytes; a state directory deeper than that still gets its shims' sockets."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "job.sock"
    assert len(os.fsencode(path)) > 107
    sock = listen(path)
    try:
        assert path.exists() and path.stat().st_mode & 0o777 == 0o600
        with address_of(path) as address:
            client = socket.socket(socket.AF_UNIX)
            client.connect(address)
        server, _ = sock.accept()
        client.sendall(b"hi")
        assert server.recv(2) == b"hi"
        server.close()
        client.close()
    finally:
        sock.close()


def test_roost_daemon_restart_keeps_a_turn_running(daemon: DaemonHarness) -> None:
    """`roost daemon restart`: a new daemon (the one an upgrade would start) takes the turn over."""
    job = daemon.spawn("say one\nwait-for restarted\nsay two")
    daemon.at_gate(job, "restarted")
    pid = daemon.show(job)["pid"]
    done = subprocess.run([sys.executable, "-m", "roost.cli", "daemon", "restart"], env=daemon.env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert daemon.proc is not None and daemon.proc.wait(5) == 0
    try:
        assert daemon.show(job)["pid"] == pid and daemon.show(job)["state"] == "working"
        daemon.release("restarted")
        assert daemon.wait_state(job, "idle")["last_text"] == "two"
    finally:  # the harness started the old daemon; this one the CLI did
        daemon.call("shutdown", all=True)
        daemon.wait_for(lambda: not daemon.paths.socket.exists(), what="the new daemon to stop")


async def test_a_shim_that_speaks_another_version_is_refused_saying_so_and_keeps_its_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hello carries the shim's protocol version: a daemon of another one (an upgrade that changed
    it) takes no worker it cannot speak to, says which version it heard, and leaves the worker to it."""
    from roost.daemon.processes import shim_link
    from roost.daemon.processes.shim_link import ShimError, ShimLink

    path = tmp_path / "w.sock"
    sock = listen(path)
    pid_file = tmp_path / "pid"
    worker = "import os, sys; open(sys.argv[1], 'w').write(str(os.getpid())); sys.stdin.read()"
    shim = subprocess.Popen([sys.executable, "-I", "-S", str(SHIM_PROGRAM), "--fd", str(sock.fileno()), "--job", "j",
                             "--keep", "1000", "--line-max", "4096", "--mark", "m", "--socket", str(path), "--",
                             sys.executable, "-c", worker, str(pid_file)], pass_fds=[sock.fileno()],
                            stdin=subprocess.DEVNULL)
    sock.close()
    try:
        monkeypatch.setattr(shim_link, "VERSION", shim_link.VERSION + 1)
        monkeypatch.setattr(shim_link, "VERSIONS", (shim_link.VERSION,))
        with pytest.raises(ShimError, match=f"not version {shim_link.VERSION}") as refused:
            await ShimLink.connect(path)
        assert '"roost_shim": 2' in str(refused.value) or "'roost_shim': 2" in str(refused.value), refused.value
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline, "the worker started"
            time.sleep(0.01)
        assert shim.poll() is None and pid_alive(int(pid_file.read_text())), "the worker is left running"
    finally:
        shim.kill()
        shim.wait(10)
        if pid_file.exists() and pid_file.read_text():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
