"""The control socket: bad frames get clear errors and the daemon keeps serving; one daemon per
state directory; owner-only permissions; a killed daemon's leftovers don't block the next one."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys

import pytest

from roost.client import ClientError

from conftest import DaemonHarness

from roost.socket_connect import peer_credentials
from roost.protocol import MAX_FRAME, PROTOCOL_VERSION


def raw(daemon, *frames: bytes) -> list[dict]:
    """Send raw bytes on one connection and read one reply per frame."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(daemon.paths.socket))
    replies = []
    buf = b""
    for frame in frames:
        sock.sendall(frame)
        while b"\n" not in buf:
            chunk = sock.recv(65536)
            assert chunk, "the daemon hung up"
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        replies.append(json.loads(line))
    sock.close()
    return replies


HELLO = b'{"id":0,"op":"hello","args":{"version":%d}}\n' % PROTOCOL_VERSION


def test_bad_frames_get_errors_and_the_connection_keeps_working(daemon):
    replies = raw(
        daemon,
        b'{"id":1,"op":"list"}\n',                      # before hello
        HELLO,
        b"this is not json\n",
        b"[1,2,3]\n",
        b'{"id":2,"op":"frobnicate"}\n',
        b'{"id":3,"op":"send","args":{"job":"x"}}\n',
        b'{"id":4,"op":"send","args":{"job":5,"text":"hi"}}\n',
        b'{"id":5,"op":"show","args":{"job":"nope"}}\n',
        b'{"id":6,"op":"list","args":{}}\n',
    )
    codes = [r.get("error", {}).get("code") for r in replies]
    assert codes == ["no_hello", None, "bad_json", "bad_frame", "unknown_op", "bad_args", "bad_args",
                     "unknown_job", None]
    assert "missing argument 'text'" in replies[5]["error"]["message"]
    assert "'job' must be str" in replies[6]["error"]["message"]
    assert replies[8] == {"id": 6, "ok": True, "result": {"rows": [], "next": None, "total": 0}}


def test_a_frame_over_the_limit_is_refused_and_the_next_one_served(daemon):
    big = b'{"id":1,"op":"send","args":{"job":"x","text":"' + b"a" * (MAX_FRAME + 10) + b'"}}\n'
    replies = raw(daemon, HELLO, big, b'{"id":2,"op":"status"}\n')
    assert replies[1]["error"]["code"] == "too_large" and replies[1]["id"] == 1
    assert replies[2]["ok"] and replies[2]["id"] == 2


def test_a_wrong_protocol_version_is_refused(daemon):
    reply = raw(daemon, b'{"id":0,"op":"hello","args":{"version":99}}\n')[0]
    assert reply["error"]["code"] == "version" and "99" in reply["error"]["message"]


def test_other_clients_keep_being_served_while_one_misbehaves(daemon):
    bad = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bad.connect(str(daemon.paths.socket))
    bad.sendall(b"{{{{ half a frame")  # and never finishes it
    job = daemon.spawn("say still serving")
    assert daemon.wait_state(job, "idle")["last_text"] == "still serving"
    bad.close()


def test_socket_and_runtime_dir_are_owner_only(daemon):
    mode = daemon.paths.socket.stat().st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(daemon.paths.runtime_dir.stat().st_mode) == 0o700


def test_peer_credentials_read_the_connecting_process_pid_and_uid():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        assert peer_credentials(a) == (__import__("os").getpid(), __import__("os").getuid())
    finally:
        a.close()
        b.close()


def test_a_second_daemon_on_the_same_state_refuses_to_start(daemon):
    proc = subprocess.run([sys.executable, "-m", "roost.daemon"], env=daemon.env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 1
    assert "another roost daemon" in proc.stdout + proc.stderr
    assert daemon.call("status")["pid"] == daemon.proc.pid, "the first one still serves"


def test_a_killed_daemons_socket_and_lock_do_not_stop_the_next(daemon):
    job = daemon.spawn("say before")
    daemon.wait_state(job, "idle")
    daemon.kill()
    assert daemon.paths.socket.exists() and daemon.paths.lock.exists()
    daemon.start()
    assert daemon.show(job)["state"] == "idle"


def test_a_broken_config_stops_the_daemon_from_starting_with_file_and_key(roost_home):
    harness = DaemonHarness(roost_home)
    harness.write_config("idle_timout = 10\n")
    proc = subprocess.run([sys.executable, "-m", "roost.daemon"], env=harness.env, capture_output=True,
                          text=True, timeout=30)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert "roost.toml" in out and "idle_timout" in out and "did you mean 'idle_timeout'" in out
    assert not harness.paths.socket.exists()


def test_a_broken_config_on_reload_keeps_the_old_settings_and_says_so(daemon):
    daemon.write_config("max_depth = 1\n")
    daemon.wait_for(lambda: "config reloaded" in daemon.log_text(), what="the reload")
    daemon.write_config("max_depth = 'deep'\n")
    status = daemon.wait_for(lambda: (s := daemon.call("status"))["config_error"] and s, what="the error")
    assert "max_depth" in status["config_error"]
    root = daemon.spawn("say root")
    child = daemon.spawn("say child", parent=root)
    with pytest.raises(ClientError) as info:  # max_depth = 1 is still in force
        daemon.spawn("say grandchild", parent=child)
    assert info.value.code == "depth_limit" and "max_depth = 1" in info.value.message
