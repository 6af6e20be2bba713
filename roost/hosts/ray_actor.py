"""The far side of a worker on a Ray cluster: the body of the detached actor a job's relay creates.

It runs in a Ray worker process on whichever node Ray placed it, and starts there what an SSH host
starts: roost's remote wrapper (``roost.hosts.remote``, from the shipped worker bundle, written to a
node-local directory named by its hash) with the job's setup, and so the worker in a session of its
own, in the job's cwd on that node. The wrapper's stdin, stdout and stderr are pipes of this actor;
the relay (``roost.hosts.ray_relay``) moves the worker protocol through actor calls.

Only the standard library here, and ``ray`` inside methods: the relay ships this class to the
cluster by value, so a node needs Ray and Python 3.11+, not roost.

Data stays bounded: the worker's output waits in a queue of ``QUEUE_CHUNKS`` chunks, and the
readers block (the worker's pipe fills, the worker waits) until the relay takes them. A relay that
stops calling (SIGKILLed, its machine gone) is noticed after ``lease`` seconds: the worker's stdin
is closed (the wrapper then ends its tree) and the actor exits, so nothing outlives a lost relay.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

#: Chunks of the worker's output held for the relay, each up to ``CHUNK`` bytes.
QUEUE_CHUNKS = 64
CHUNK = 1 << 16
#: The most one ``read`` returns.
READ_MAX = 1 << 20
#: How long ``end`` waits for the wrapper after closing its stdin (it ends the tree within ~4 s).
END_GRACE = 6.0


class WorkerActor:
    """One job's worker on a node: the remote wrapper and the worker under it, and their pipes."""

    def __init__(self, job_id: str, bundle_name: str, bundle_data: bytes, setup: dict[str, Any],
                 lease: float) -> None:
        self.job_id = job_id
        self.lease = lease
        self.last_call = time.monotonic()
        self.out: queue.Queue[tuple[str, bytes]] = queue.Queue(QUEUE_CHUNKS)
        folder = os.path.join(tempfile.gettempdir(), f"roost-ray-{os.getuid()}")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        pyz = os.path.join(folder, bundle_name)
        if not os.path.exists(pyz):
            _write(pyz + f".{os.getpid()}", bundle_data)
            os.replace(pyz + f".{os.getpid()}", pyz)
        setup_path = os.path.join(folder, f"{job_id}.json")
        _write(setup_path, json.dumps({**setup, "pythonpath": pyz}).encode())  # the wrapper removes it once read (it holds the job's token)
        self.proc = subprocess.Popen([sys.executable, pyz, setup_path], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.open_streams = 2
        for name, pipe in (("out", self.proc.stdout), ("err", self.proc.stderr)):
            threading.Thread(target=self._pump, args=(name, pipe), daemon=True).start()
        threading.Thread(target=self._watch_lease, daemon=True).start()

    def where(self) -> dict[str, Any]:
        """The node this worker runs on and the wrapper's pid there."""
        import ray

        self.last_call = time.monotonic()
        return {"node": ray.get_runtime_context().get_node_id(), "pid": self.proc.pid}

    def write(self, data: bytes) -> bool:
        """Bytes for the worker's stdin; False once it is closed (the worker is gone)."""
        self.last_call = time.monotonic()
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def close_stdin(self) -> None:
        """The daemon closed the worker's stdin: pass EOF on (the wrapper ends the tree after a grace)."""
        self.last_call = time.monotonic()
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass

    def read(self, wait: float) -> dict[str, Any]:
        """What the worker said since the last read (waiting up to ``wait`` s for something), and its
        exit code once it has ended and said all."""
        self.last_call = time.monotonic()
        got: dict[str, list[bytes]] = {"out": [], "err": []}
        size = 0
        try:
            item = self.out.get(timeout=wait)
            while True:
                name, data = item
                if not data:
                    self.open_streams -= 1
                got[name].append(data)
                size += len(data)
                if size >= READ_MAX:
                    break
                item = self.out.get_nowait()
        except queue.Empty:
            pass
        code = self.proc.poll() if self.open_streams == 0 else None
        if self.open_streams == 0 and code is None:
            code = self.proc.wait()
        self.last_call = time.monotonic()
        return {"out": b"".join(got["out"]), "err": b"".join(got["err"]), "exit": code}

    def end(self) -> int | None:
        """Close on purpose: EOF to the wrapper (which ends the worker's tree), then SIGKILL to a
        wrapper that is still there after ``END_GRACE``. Its exit code."""
        self.close_stdin()
        try:
            return self.proc.wait(END_GRACE)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def _pump(self, name: str, pipe: Any) -> None:
        while True:
            try:
                data = os.read(pipe.fileno(), CHUNK)
            except OSError:
                data = b""
            self.out.put((name, data))  # blocks while the relay is behind: the worker waits
            if not data:
                return

    def _watch_lease(self) -> None:
        """End the worker and this actor when no relay has called for ``lease`` seconds."""
        while time.monotonic() - self.last_call < self.lease:
            time.sleep(min(1.0, self.lease / 4))
        self.end()
        os._exit(0)  # from a thread of its own: Ray marks the (detached, never restarted) actor dead


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
