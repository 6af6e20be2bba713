"""Back-pressure: a client that stops reading is told it lagged and dropped, the daemon's memory
stays bounded and everyone else keeps being answered; running out of file descriptors pauses
accepting instead of spinning.

The first tests drive one Connection in process over a socket pair; the others run a real daemon
and read its RSS (/proc/PID/status VmRSS) and CPU time (/proc/PID/stat)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import socket
import time
from pathlib import Path

import pytest

from conftest import DaemonHarness

from roost.daemon.server.connection import Connection
from roost.protocol import MAX_FRAME, PROTOCOL_VERSION, QUEUE_BYTES
from test_protocol_frames import seed


# -- one connection, in process -------------------------------------------------------------------------
@pytest.fixture
async def pair():
    """A Connection on one end of a socket pair, and the raw other end (not read until asked)."""
    ours, theirs = socket.socketpair()
    reader, writer = await asyncio.open_unix_connection(sock=ours, limit=MAX_FRAME)
    theirs.setblocking(False)
    conn = Connection(reader, writer)
    yield conn, theirs
    conn.abort()
    theirs.close()


async def read_all(sock: socket.socket, timeout: float = 10.0) -> list[dict]:
    """Every frame the peer gets until the connection ends."""
    loop = asyncio.get_running_loop()
    data = b""
    deadline = loop.time() + timeout
    while True:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), deadline - loop.time())
        if not chunk:
            return [json.loads(line) for line in data.splitlines()]
        data += chunk


async def test_a_reply_over_the_frame_limit_becomes_too_large_with_its_id(pair):
    conn, peer = pair
    conn.reply(5, {"text": "x" * MAX_FRAME})
    conn.reply(6, "fine")
    conn.close()
    frames = await read_all(peer)
    assert frames[0]["id"] == 5 and frames[0]["error"]["code"] == "too_large"
    assert "page it" in frames[0]["error"]["message"]
    assert frames[1] == {"id": 6, "ok": True, "result": "fine"}


async def test_an_event_over_the_frame_limit_is_dropped_and_logged(pair, caplog):
    conn, peer = pair
    with caplog.at_level(logging.WARNING, logger="roost.daemon"):
        conn.send({"event": "timeline", "entry": {"text": "x" * MAX_FRAME}})
    conn.send({"event": "row", "row": {"id": "a"}})
    conn.close()
    assert await read_all(peer) == [{"event": "row", "row": {"id": "a"}}]
    assert "dropped an event" in caplog.text


async def test_a_peer_that_stops_reading_is_told_it_lagged_and_dropped(pair):
    conn, peer = pair
    event = {"event": "timeline", "entry": {"text": "y" * 4000}}
    sent = 0
    most = 0
    while not conn.closing:
        conn.send(event)
        sent += 1
        most = max(most, conn.queued_bytes)
        if sent % 100 == 0:
            await asyncio.sleep(0)  # let the writer fill the socket until it blocks
    assert most <= QUEUE_BYTES, "the queue never held more than its bound"
    assert sent * 4000 > QUEUE_BYTES
    frames = await read_all(peer)
    assert frames[-1] == {"event": "lagged", "dropped": True}
    assert len(frames) < sent, "what did not fit was dropped, not kept"


# -- a real daemon ----------------------------------------------------------------------------------------
def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_status(harness: DaemonHarness) -> float:
    started = time.monotonic()
    harness.call("status")
    return time.monotonic() - started


@pytest.fixture
def seeded(roost_home) -> DaemonHarness:
    harness = DaemonHarness(roost_home)
    seed(harness, 2000)
    harness.write_config("")
    harness.start()
    yield harness
    harness.stop()


def test_a_client_that_floods_requests_and_never_reads_is_dropped_with_memory_bounded(seeded):
    pid = seeded.proc.pid
    before = rss_kib(pid)
    flood = seeded.raw()
    flood.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    request = json.dumps({"id": 1, "op": "list", "args": {"limit": 1000, "full": True}}).encode() + b"\n"
    peak = before
    latencies = []
    try:
        for _ in range(400):  # 400 pages of about 512 KiB each: 200 MB if the daemon kept them
            flood.sock.sendall(request)
            peak = max(peak, rss_kib(pid))
            if "lagged" in seeded.log_text():
                break
        seeded.wait_for(lambda: "lagged" in seeded.log_text(), what="the flood to lag")
        latencies.append(timed_status(seeded))
    except (BrokenPipeError, ConnectionResetError):
        pass  # dropped while we were still writing: that is the point
    assert "lagged" in seeded.log_text()
    assert (peak - before) < 40 * 1024, f"RSS grew {(peak - before) / 1024:.0f} MiB"
    assert all(latency < 2.0 for latency in latencies)
    assert seeded.call("status")["pid"] == pid
    flood.close()


def test_a_subscriber_that_never_reads_lags_while_others_are_answered(daemon):
    pid = daemon.proc.pid
    job = daemon.spawn("say ready")
    daemon.wait_state(job, "idle")
    stalled = daemon.raw()
    stalled.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.call("subscribe", what="timeline", job=job, after=daemon.timeline(job)[-1]["seq"])
    watcher = daemon.raw()
    watcher.call("subscribe", what="agent_view")
    before = rss_kib(pid)
    peak = before
    burst = "\n".join(f"say {i} " + "z" * 4000 for i in range(200))  # 800 KB of text per message
    latencies = []
    for _ in range(30):
        daemon.call("send", job=job, text=burst)
        daemon.wait_state(job, "idle", timeout=30)
        latencies.append(timed_status(daemon))
        peak = max(peak, rss_kib(pid))
        if "lagged" in daemon.log_text():
            break
    assert "lagged" in daemon.log_text(), "24 MB of entries went to a client that read none"
    frames = stalled.until_closed()
    assert frames[-1] == {"event": "lagged", "dropped": True}
    assert (peak - before) < 40 * 1024, f"RSS grew {(peak - before) / 1024:.0f} MiB"
    assert max(latencies) < 2.0
    events: list[dict] = []
    watcher.send({"id": 9, "op": "status"})
    assert watcher.reply(9, events)["ok"], "the other subscriber is still served"
    assert events and all(e["event"] in ("row", "counts") for e in events)  # its agent view: rows and the counts
    watcher.close()


def test_out_of_file_descriptors_pauses_accepting_says_so_once_and_resumes(daemon):
    pid = daemon.proc.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    held = [daemon.raw() for _ in range(2)]
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")), hard))
    try:
        waiting = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        waiting.connect(str(daemon.paths.socket))  # in the backlog: accept() fails with EMFILE
        waiting.sendall(b'{"id":0,"op":"hello","args":{"version":%d}}\n' % PROTOCOL_VERSION)
        daemon.wait_for(lambda: "cannot accept connections" in daemon.log_text(), what="the pause")
        cpu = cpu_seconds(pid)
        started = time.monotonic()
        daemon.wait_for(lambda: time.monotonic() - started > 2.0, what="two seconds out of descriptors")
        assert cpu_seconds(pid) - cpu < 0.3, "the daemon spun while it could not accept"
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    waiting.settimeout(10)
    assert json.loads(waiting.recv(65536))["ok"], "the waiting client is served once descriptors are back"
    assert daemon.log_text().count("cannot accept connections") == 1
    assert "accepting connections again" in daemon.log_text()
    waiting.close()
    for client in held:
        client.close()
