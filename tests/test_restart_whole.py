"""Recovery after a SIGKILL of the daemon is whole (issue 31, item 8): what a worker answered a past
daemon is never taken for an answer to this one, so a prompt the worker took is not sent again; and
the steps the live daemon takes on its own (auto-closing a done subagent's worker) are taken after a
restart too. Real daemons, real built-in workers."""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import termios
import threading

from roost.client import ClientError

from conftest import DaemonHarness


def send_quietly(daemon: DaemonHarness, job: str, text: str) -> None:
    try:
        daemon.call("send", job=job, text=text)
    except (ClientError, OSError):
        pass  # the daemon was killed under it


def written(pid: int) -> int:
    """Bytes process ``pid`` has written so far (/proc/PID/io ``wchar``)."""
    with open(f"/proc/{pid}/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("wchar:"))


def pipe_holds(pid: int) -> int:
    """Bytes waiting in the stdin pipe of process ``pid`` (unread by it)."""
    fd = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NONBLOCK)
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    finally:
        os.close(fd)


def test_a_prompt_the_worker_took_is_not_sent_again_after_two_kills(daemon_factory) -> None:
    """The second daemon re-adopts an idle worker (its get_state answer stays unacknowledged: no
    event follows it), writes it a message and is SIGKILLed before the worker read it. The third
    daemon's get_state must not be answered by the second's old answer ("not busy"): the message
    would go again while the worker runs it."""
    daemon: DaemonHarness = daemon_factory("")
    job = daemon.spawn("say first", isolation="none")  # the pid is the agent itself: SIGSTOP holds it
    pid = daemon.wait_state(job, "idle")["pid"]
    daemon.kill()
    idle = written(pid)  # an idle worker writes nothing more until the next daemon's get_state
    daemon.start()
    daemon.wait_for(lambda: any(e["kind"] == "worker" and e["data"].get("adopted") for e in daemon.timeline(job)),
                    what="the worker re-adopted")
    # Its get_state read and answered, so what the stopped worker's stdin holds next is the prompt alone.
    daemon.wait_for(lambda: written(pid) > idle and pipe_holds(pid) == 0, what="the worker to answer get_state")
    os.kill(pid, signal.SIGSTOP)
    try:
        sender = threading.Thread(target=send_quietly, args=(daemon, job, "say second\nwait-for go\nsay third"))
        sender.start()  # its answer waits for the worker to take the prompt: it never comes from this daemon
        daemon.wait_for(lambda: pipe_holds(pid) > 0, what="the prompt in the worker's stdin")
        daemon.kill()
        sender.join(10)
    finally:
        os.kill(pid, signal.SIGCONT)
    daemon.start()
    daemon.at_gate(job, "go")
    daemon.release("go")
    daemon.wait_state(job, "idle")
    assert daemon.show(job)["pid"] == pid
    entries = daemon.timeline(job)
    assert daemon.texts(job) == ["first", "second", "third"], "each prompt ran once"
    assert [e["kind"] for e in entries].count("prompt") == 2
    assert not [e for e in entries if e["kind"] == "error"], [e for e in entries if e["kind"] == "error"]


def test_a_done_subagents_worker_re_adopted_after_a_kill_is_still_auto_closed(daemon_factory) -> None:
    """A child that reported done, its worker re-adopted by the next daemon: it closes after the
    auto-close delay as it would have (it stayed up for good, holding a live-worker place)."""
    daemon: DaemonHarness = daemon_factory("subagent_auto_close_delay = 4\nspare_workers = 0\n")
    parent = daemon.spawn("spawn report done c\nsay spawned")
    daemon.wait_for(lambda: daemon.children(parent), what="the child")
    child = daemon.children(parent)[0]["id"]
    daemon.wait_state(child, "done")
    daemon.kill()  # within the delay: its worker is still up
    daemon.start()
    daemon.wait_for(lambda: any(e["kind"] == "worker" and e["data"].get("adopted") for e in daemon.timeline(child)),
                    what="the child's worker re-adopted")
    row = daemon.wait_row(child, lambda r: r["reaped"], timeout=20, what="the child's worker auto-closed")
    assert row["state"] == "done"


def test_a_tool_call_made_while_no_daemon_listens_waits_for_the_next_one(daemon_factory) -> None:
    """roost_spawn and roost_report called in the gap between a SIGKILLed daemon and the next: the
    agent waits for the next daemon (DAEMON_WAIT) and its turn goes on, each call made once."""
    daemon: DaemonHarness = daemon_factory("spare_workers = 0\n")
    job = daemon.spawn("wait-for go\nwrite marker.txt reached\nspawn say hi\nreport done r")
    daemon.at_gate(job, "go")
    daemon.kill()
    daemon.release("go")
    marker = daemon.home / "marker.txt"
    daemon.wait_for(marker.exists, what="the agent past its gate, calling roost_spawn with no daemon")
    daemon.start()
    row = daemon.wait_state(job, "done", "failed")
    entries = daemon.timeline(job)
    assert row["state"] == "done", [e for e in entries if e["kind"] in ("tool", "error", "state")]
    tools = [e["data"] for e in entries if e["kind"] == "tool" and e["data"]["name"] in ("roost_spawn", "roost_report")]
    assert [(t["name"], t["error"]) for t in tools] == [("roost_spawn", False), ("roost_report", False)]
    kids = daemon.children(job)
    assert len(kids) == 1
    daemon.wait_state(kids[0]["id"], "idle")
    assert daemon.texts(kids[0]["id"]) == ["hi"]
