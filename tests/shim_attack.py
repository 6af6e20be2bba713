"""A process of the user that connects to a job's shim socket and, if the shim takes it, injects a
prompt for that job's agent (the attack of issue 31, item 2): ``shim_attack.py OUT SOCKET PROMPT``.
It writes to OUT the first line the shim said and whether it could inject anything."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path


def main() -> None:
    out, path, prompt = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(10)
    conn.connect(path)
    first = conn.makefile("rb").readline()
    said = json.loads(first) if first.strip() else {}
    injected = False
    if "worker_pid" in said:  # it took us for the daemon: the agent's stdin is ours
        frame = json.dumps({"type": "prompt", "id": "x", "message": prompt, "run": 999}).encode() + b"\n"
        conn.sendall(b"I %d\n" % len(frame) + frame)
        injected = True
    out.write_text(json.dumps({"said": said, "injected": injected}))


if __name__ == "__main__":
    main()
