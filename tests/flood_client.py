"""A job's process that opens as many connections to the daemon as it can and holds them:
``flood_client.py OUT RELEASE N``. First N connections that each say hello as the job (its
ROOST_JOB_ID and ROOST_TOKEN), then N that say nothing; it writes what the daemon said (how many it
served, the first refusal of each kind) to OUT as JSON and holds every connection it was given until
RELEASE exists (at most 60 s). The connection-cap tests run it from a job's `run`."""

from __future__ import annotations

import json
import select
import socket
import sys
import time
from pathlib import Path

from roost.client import job_identity
from roost.paths import resolve
from roost.protocol import PROTOCOL_VERSION


def _as_job(path: Path, n: int, hello: dict) -> tuple[list[socket.socket], dict]:
    """N connections, one after the other, each saying hello as the job."""
    held, said = [], {"served": 0, "refused": None}
    for _ in range(n):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(path))
        sock.sendall(json.dumps({"id": 1, "op": "hello", "args": hello}).encode() + b"\n")
        sock.settimeout(10)
        frame = json.loads(sock.makefile("rb").readline() or b'{"ok": false, "error": {"code": "closed"}}')
        if frame.get("ok"):
            held.append(sock)
            said["served"] += 1
        else:
            said["refused"] = said["refused"] or frame["error"]
            sock.close()
    return held, said


def _silent(path: Path, n: int) -> tuple[list[socket.socket], dict]:
    """N connections opened at once that say nothing (the daemon closes them after HELLO_TIMEOUT);
    those refused have a frame waiting within half a second."""
    socks = []
    for _ in range(n):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(path))
        socks.append(sock)
    time.sleep(0.5)
    readable = set(select.select(socks, [], [], 0)[0])
    refused = [json.loads(s.makefile("rb").readline() or b"{}") for s in socks if s in readable]
    return socks, {"served": n - len(refused), "refused": refused[0]["error"] if refused else None}


def main() -> None:
    out, release, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    job, token = job_identity()
    path = resolve().socket
    as_job, said_as_job = _as_job(path, n, {"version": PROTOCOL_VERSION, "client": "flood", "job": job,
                                            "token": token})
    silent, said_silent = _silent(path, n)
    out.write_text(json.dumps({"as_job": said_as_job, "silent": said_silent}))
    until = time.monotonic() + 60
    while not release.exists() and time.monotonic() < until:
        time.sleep(0.05)
    for sock in as_job + silent:
        sock.close()


if __name__ == "__main__":
    main()
