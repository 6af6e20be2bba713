"""A simulated worker for bench/scale_sim.py: a relay between the daemon's pipes and its node.

The bench starts jobs of the real built-in driver in a directory whose ``roost/`` package is this
one, so ``python -m roost.programs.builtin_agent`` runs this file (``-m`` puts the cwd first on the
path): the daemon, its driver and its Worker are unchanged, and the protocol is spoken by the
node process (bench/scale_node/node.py) that holds many workers, as a real machine would.
Only the stdlib, so each relay costs what a bare Python costs.
"""

import json
import os
import select
import socket
import sys


def main() -> None:
    session = sys.argv[sys.argv.index("--session") + 1] if "--session" in sys.argv else ""
    node = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    node.connect(os.path.join(os.getcwd(), "node.sock"))
    node.sendall(json.dumps({"job": os.environ.get("ROOST_JOB_ID", ""), "session": session}).encode() + b"\n")
    stdin, stdout, peer = sys.stdin.fileno(), sys.stdout.fileno(), node.fileno()
    while True:
        ready, _, _ = select.select([stdin, peer], [], [])
        for fd in ready:
            data = os.read(fd, 65536)
            if not data:
                return
            out = peer if fd == stdin else stdout
            while data:
                data = data[os.write(out, data):]


if __name__ == "__main__":
    main()
