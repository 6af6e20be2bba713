"""`roost daemon start | stop | restart | status | reload`: the daemon itself (these never start one by
accident: each speaks to the socket directly)."""

from __future__ import annotations

import sys
import time

import click

from roost import paths as paths_mod
from roost.cli.common import Ctx, fail, pass_ctx, say
from roost.client import UNREACHABLE, Client, ClientError, probe, start_daemon
from roost.rules.counts import WorkCounts, work_parts


@click.group()
def daemon() -> None:
    """Start, stop or check the daemon."""


@daemon.command("start")
@click.option("--foreground", is_flag=True, help="Run in this terminal, logging to stderr.")
@pass_ctx
def daemon_start(ctx: Ctx, foreground: bool) -> None:
    """Start the daemon (in the background unless --foreground)."""
    paths = paths_mod.resolve()
    if foreground:
        from roost.daemon.__main__ import main as daemon_main

        sys.exit(daemon_main(["--config", ctx.config] if ctx.config else []))
    error = probe(paths.socket)
    if error is None:
        say(f"roost daemon already running ({paths.socket})")
        return
    if error.code != UNREACHABLE:  # one is there but refused us: a second one would not help
        fail(error.message)
    try:
        start_daemon(paths, config=ctx.config)
    except ClientError as exc:
        fail(exc.message)
    say(f"roost daemon started ({paths.socket})")


@daemon.command("stop")
@click.option("--all", "close_all", is_flag=True,
              help="Close every worker too (their turns end); without it, turns run on for the next daemon.")
def daemon_stop(close_all: bool) -> None:
    """Stop the daemon; running turns go on under their shims and the next daemon re-adopts them."""
    if _stop(paths_mod.resolve(), close_all) is None:
        say("roost daemon is not running")
        return
    say("roost daemon stopped")


@daemon.command("restart")
@pass_ctx
def daemon_restart(ctx: Ctx) -> None:
    """Stop the daemon and start a new one (after an upgrade of roost, say): running turns go on under
    their shims and the new daemon re-adopts them."""
    paths = paths_mod.resolve()
    pid = _stop(paths, close_all=False)
    deadline = time.monotonic() + 15
    while pid is not None and _alive(pid) and time.monotonic() < deadline:  # it lets go of the lock as it ends
        time.sleep(0.05)
    try:
        start_daemon(paths, config=ctx.config)
    except ClientError as exc:
        fail(exc.message)
    say(f"roost daemon restarted ({paths.socket})")


def _stop(paths: paths_mod.Paths, close_all: bool) -> int | None:
    """Ask the daemon to stop and wait (up to 15 s) for its socket to go; its pid, or None when none ran."""
    try:
        with Client.connect(paths.socket) as client:
            pid = int(client.call("status")["pid"])
            client.call("shutdown", **({"all": True} if close_all else {}))
    except ClientError as exc:
        if exc.code == "busy" and not close_all:  # a full daemon still stops: SIGTERM does what shutdown does
            pid = _signal_stop(paths, exc.message)
        elif exc.code != UNREACHABLE:
            fail(exc.message)
        else:
            return None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and paths.socket.exists():
        time.sleep(0.05)
    return pid


def _signal_stop(paths: paths_mod.Paths, busy: str) -> int:
    """Stop the daemon that holds the lock with SIGTERM (its workers run on, as with ``shutdown``):
    its pid. Only when it is too busy to take a connection (``busy``)."""
    import fcntl
    import os
    import signal

    try:
        fd = os.open(paths.lock, os.O_RDONLY)
    except OSError:
        fail(busy)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fail(busy)  # nobody holds the lock, so no daemon to signal
        except BlockingIOError:
            pid = int(os.read(fd, 32).decode(errors="replace").strip() or 0)
    finally:
        os.close(fd)
    if pid <= 0:
        fail(busy)
    say(f"the daemon is busy ({busy}); stopping it with SIGTERM (pid {pid})")
    os.kill(pid, signal.SIGTERM)
    return pid


def _alive(pid: int) -> bool:
    """Whether the process still runs (a zombie does not: it let go of the lock)."""
    from roost.proctree import read_proc  # `daemon stop` only: proctree loads asyncio, 19 ms of `daemon status`

    proc = read_proc(pid)
    return proc is not None and proc.state not in ("Z", "X")


@daemon.command("status")
@click.option("--acknowledge", is_flag=True, help="Say you have read the store's repair notice; it stops showing.")
def daemon_status(acknowledge: bool) -> None:
    """Say whether the daemon runs (exit 0) or not (exit 1), and what it had to repair."""
    paths = paths_mod.resolve()
    try:
        with Client.connect(paths.socket, timeout=3) as client:
            if acknowledge:
                client.call("acknowledge")
            st = client.call("status")
    except ClientError as exc:
        say(f"roost daemon is not running ({paths.socket})" if exc.code == UNREACHABLE
            else f"roost daemon at {paths.socket} did not answer: {exc.message}")
        sys.exit(1)
    say(f"roost daemon running: pid {st['pid']}, {st['jobs']} jobs, {st['workers']} workers, "
        f"socket {st['socket']}")
    say(" · ".join(work_parts(WorkCounts.from_wire(st.get("counts")))))
    if st.get("queued"):
        say(f"{st['queued']} spawns queued (max_running_jobs, their host's, or max_live_workers)")
    spares = st.get("spares") or {}
    if spares.get("wanted"):
        ready, retry = len(spares.get("ready") or ()), spares.get("retry_in")
        say(f"spare workers: {ready} of {spares['wanted']} ready"
            + (f"; they kept dying ({spares.get('failures')} times), next try in {retry:g}s" if retry else ""))
    if st.get("sandbox"):
        say(st["sandbox"]["words"])
    if st.get("config_error"):
        say(f"config not reloaded: {st['config_error']}")
    if st.get("store_notice"):
        say(f"THE STORE WAS REPAIRED: {st['store_notice']}\n"
            "(docs/reliability.md says how to get records back; "
            "`roost daemon status --acknowledge` stops this message)")


@daemon.command("reload")
def daemon_reload() -> None:
    """Read the config file again (as SIGHUP does) and say what changed; a broken file is not taken."""
    paths = paths_mod.resolve()
    try:
        with Client.connect(paths.socket) as client:
            done = client.call("reload")
    except ClientError as exc:
        fail("roost daemon is not running: nothing to reload (it reads the config when it starts)"
             if exc.code == UNREACHABLE else exc.message)
    if done["error"]:
        fail(f"config not reloaded, keeping the settings in force: {done['error']}")
    changed = done["changed"]
    say(f"config reloaded from {done['config'] or '<defaults>'}: "
        + (f"changed {', '.join(changed)}" if changed else "nothing changed"))
