"""Finding the daemon, and starting one when none runs: what ``connect`` does for the CLI, and
``start_daemon`` for the app. A daemon that answered with an error is reported, never doubled."""

from __future__ import annotations

import os
import time
from pathlib import Path

from roost import paths as paths_mod
from roost.client.blocking import Client
from roost.client.wire import job_identity
from roost.socket_connect import UNREACHABLE, ClientError


def probe(socket_path: Path, timeout: float = 2.0) -> ClientError | None:
    """None when a daemon answers hello on the socket, else the error that says why not."""
    try:
        Client.connect(socket_path, client="probe", timeout=timeout).close()
        return None
    except ClientError as exc:
        return exc


def daemon_running(socket_path: Path) -> bool:
    """Whether a daemon is there: it answered, even if only to say it is busy, or it holds the
    socket without answering in time. Only an unreachable socket means none runs."""
    error = probe(socket_path)
    return error is None or error.code != UNREACHABLE


def start_daemon(paths: paths_mod.Paths, config: str | None = None, timeout: float = 15.0) -> None:
    """Start a daemon in the background and wait until it answers; raise ClientError saying why not."""
    import subprocess  # only when a daemon must be started: most CLI runs find one
    import sys

    paths.ensure()
    cmd = [sys.executable, "-m", "roost.daemon"]
    if config:
        cmd += ["--config", str(config)]
    log = os.fdopen(paths_mod.open_private(paths.daemon_log), "ab")  # 0600 from creation, whatever the umask
    start = log.tell()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                            close_fds=True)
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon_running(paths.socket):
            return
        rc = proc.poll()
        if rc is not None:
            if daemon_running(paths.socket):  # another one won the race: that is fine
                return
            raise ClientError("daemon", f"the daemon exited with code {rc}: {_log_tail(paths.daemon_log, start)}")
        time.sleep(0.05)
    raise ClientError("daemon", f"the daemon did not answer within {timeout:.0f}s: {_log_tail(paths.daemon_log, start)}")


def _log_tail(path: Path, start: int) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            text = fh.read().decode(errors="replace").strip()
    except OSError:
        return "(no log)"
    lines = text.splitlines()[-5:]
    return " | ".join(lines) if lines else f"(nothing in {path})"


def connect(client: str = "cli", autostart: bool = True, config: str | None = None,
            environ: dict[str, str] | None = None) -> Client:
    """A blocking client for this environment, starting the daemon only when none is there: a
    daemon that answered with an error (busy, a timeout) is reported, never doubled."""
    paths = paths_mod.resolve(environ)
    job, token = job_identity(environ)
    try:
        return Client.connect(paths.socket, client=client, job=job, token=token)
    except ClientError as exc:
        if not autostart or exc.code != UNREACHABLE:
            raise
    start_daemon(paths, config=config)
    return Client.connect(paths.socket, client=client, job=job, token=token)
