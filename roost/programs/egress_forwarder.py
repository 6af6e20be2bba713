"""Inside a job's walls: listen on 127.0.0.1:PORT, relay each connection to the job's egress proxy.

``python3 -I -S egress_forwarder.py SOCKET PORT -- AGENT ARGV...`` (the first thing bwrap runs when the
job's network is ``allow``). The job's network namespace has loopback only, so this is its one way
out: the agent's HTTP_PROXY / HTTPS_PROXY point here, and every byte goes on to the job's proxy
(roost/egress/proxy.py) over the unix socket bind-mounted at SOCKET, which decides.

It binds before anything else runs, then forks: the child becomes the agent (exec; it dies with the
forwarder: PR_SET_PDEATHSIG), the parent relays, passes on the signals it gets, and ends as the agent
ends. So the forwarder is above the agent, never in the tree the agent's worker cleans up.
Standard library only, nothing of roost imported: it starts in a few milliseconds.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading

#: The most connections relayed at once (the proxy has its own bound, per job); bytes per step.
RELAYS = 64
CHUNK = 64 * 1024
PR_SET_PDEATHSIG = 1
#: What the forwarder passes on to the agent.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.exit("usage: egress_forwarder.py SOCKET PORT -- PROGRAM [ARGS...]")
    path, port, program = argv[0], int(argv[1]), argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    parent = os.getpid()
    child = os.fork()
    if child == 0:  # the agent: it dies with the forwarder, so nothing runs unrelayed
        listener.close()
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)
        os.execvp(program[0], program)
    def forward(number: int, frame: object) -> None:
        try:
            os.kill(child, number)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # hold none of the agent's pipes open
        os.dup2(devnull, fd)
    threading.Thread(target=serve, args=(listener, path), daemon=True).start()
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # end as the agent ended: by its signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def serve(listener: socket.socket, path: str) -> None:
    slots = threading.BoundedSemaphore(RELAYS)
    while True:
        conn, _ = listener.accept()
        if not slots.acquire(blocking=False):
            conn.close()
            continue
        threading.Thread(target=relay, args=(conn, path, slots), daemon=True).start()


def relay(conn: socket.socket, path: str, slots: threading.BoundedSemaphore) -> None:
    try:
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        up.connect(path)
    except OSError:
        conn.close()
        slots.release()
        return
    back = threading.Thread(target=pump, args=(up, conn), daemon=True)
    back.start()
    pump(conn, up)
    back.join()
    conn.close()
    up.close()
    slots.release()


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until ``source`` ends, then half-close ``sink`` (its reader sees the end too)."""
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
