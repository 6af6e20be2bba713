"""A job's egress proxy, run by its shim in front of its walls when its network is ``allow``:
``python -m roost.programs.egress_proxy SPEC -- BWRAP ARGV...``.

It reads its spec (roost/sandbox/network.py writes it owner-only in roost's runtime directory, and it
is removed here once read: the job's socket, its policy, the real keys, the mark of its notes),
binds the job's proxy socket, and only then starts bwrap (so the forwarder inside never finds it
missing); then serves the socket (roost/egress/proxy.py) until bwrap ends, and ends as it ended.
Being the shim's child, not the daemon's, it outlives the daemon as the worker does: a worker
re-adopted after a restart keeps its network mid-turn. It dies with its shim (PR_SET_PDEATHSIG),
and bwrap with it (``--die-with-parent``). A refusal is a line of its stderr, which is the worker's,
starting with the spec's mark: the daemon writes it on the job's timeline as a note
(roost/daemon/processes/process.py).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import threading

#: What the proxy passes on to bwrap (which passes them on to the sandbox's processes).
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python -m roost.programs.egress_proxy SPEC -- PROGRAM [ARGS...]")
    with open(argv[0]) as source:
        spec = json.load(source)
    os.unlink(argv[0])
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    from roost.egress.proxy import bind_socket

    listener = bind_socket(spec["socket"])
    listener.set_inheritable(False)
    child = os.fork()
    if child == 0:
        os.execvp(argv[2], argv[2:])

    def forward(number: int, frame: object) -> None:
        try:
            os.kill(child, number)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    threading.Thread(target=serve, args=(spec, listener), daemon=True).start()
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # end as bwrap ended: by its signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def serve(spec: dict, listener: object) -> None:
    """Serve the job's socket on an event loop of its own (the main thread waits for bwrap)."""
    import asyncio

    from roost.egress.proxy import JobProxy
    from roost.egress.request_head import SecretKey
    from roost.rules.egress import Policy

    policy = Policy(mode=spec["mode"], chain=tuple(tuple(c) for c in spec["chain"]), provider=tuple(spec["provider"]))
    keys = tuple(SecretKey(*key) for key in spec["keys"])
    mark = spec["mark"]

    def refused(job: str, target: str, why: str) -> None:
        os.write(2, f"{mark}network: refused {why}".replace("\n", " ").encode() + b"\n")

    async def run() -> None:
        proxy = JobProxy(spec["job"], policy, refused, keys)
        proxy.take(listener)  # type: ignore[arg-type]
        await asyncio.Event().wait()

    asyncio.run(run())


if __name__ == "__main__":
    main(sys.argv[1:])
