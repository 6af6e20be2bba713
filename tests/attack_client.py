"""A process that tries an operation on the daemon as whoever its environment says it is (a job
with ROOST_JOB_ID and ROOST_TOKEN, else a person) and writes what happened to a file:
``attack_client.py OUT OP [JSON-ARGS]``. The attack tests run it from a job's `run`, from a hook.
With ATTACK_ORPHAN=PID it first waits until its parent PID has exited (a double fork's escape), with
ATTACK_ORPHAN=setsid until its parent is no longer the ``setsid`` that started it (``setsid -f``); an
``approval`` argument of ``-`` is the first pending approval of the job row on stdin (a hook's)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from roost.client import Client, job_identity
from roost.paths import resolve
from roost.socket_connect import ClientError


def parent_name() -> str:
    try:
        return Path(f"/proc/{os.getppid()}/comm").read_text().strip()
    except OSError:
        return ""


def main() -> None:
    out, op = Path(sys.argv[1]), sys.argv[2]
    args = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    if args.get("approval") == "-":  # a hook: the first approval pending in the row on its stdin
        args["approval"] = json.loads(sys.stdin.readline())["approvals"][0]["id"]
    if os.environ.get("ATTACK_ORPHAN") == "setsid":  # under `setsid -f`: wait until that parent has exited
        until = time.monotonic() + 10
        while parent_name() == "setsid" and time.monotonic() < until:
            time.sleep(0.02)
    elif os.environ.get("ATTACK_ORPHAN"):  # wait until its parent has exited: it left the tree it was in
        parent, until = int(os.environ["ATTACK_ORPHAN"]), time.monotonic() + 10
        while os.getppid() == parent and time.monotonic() < until:
            time.sleep(0.02)
    job, token = job_identity()
    try:
        with Client.connect(resolve().socket, client="attack", job=job, token=token) as client:
            client.call(op, **args)
        out.write_text("ok\n")
    except ClientError as exc:
        out.write_text(f"{exc.code}: {exc.message}\n")


if __name__ == "__main__":
    main()
