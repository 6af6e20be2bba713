"""roost's benchmarks (issue 8's targets): each a median or p99 beside a baseline measured in the
same run, so load from whatever else shares the machine hits both alike.

    python bench/run.py                  # all, about 6-8 minutes on 2 cores
    python bench/run.py scale spawn      # some
    python bench/run.py --list           # the names
    python bench/run.py --json out.json  # also write the results as JSON

Each runs under fresh temporary ROOST_HOMEs; nothing touches the user's directories. Where real
spawns would take too long (100k finished records, 100k timeline entries) the records are
seeded through the store's own API (roost.daemon.storage.store.Store, roost.models.Job) before the
daemon starts; everything live (500 idle workers, 500 turns/s, spawns) runs real built-in
workers. docs/performance.md records a run and what the profiles showed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (Daemon, Home, Result, clock, count_json_array, median, pct, seed_records,  # noqa: E402
                     seed_timeline, table, timed, worker_turn)
from harness import spawn_idle as _spawn_idle  # noqa: E402

from command_output import bench_output  # noqa: E402
from diff import bench_diff  # noqa: E402
from live_workers import bench_chain, bench_children  # noqa: E402
from app_speed import bench_app  # noqa: E402
from app_memory import LINES, bench_app_memory  # noqa: E402
from transcript_speed import bench_transcript  # noqa: E402
from cli_speed import bench_cli_commands  # noqa: E402
from scale_sim import add_options as scale_sim_options, bench_scale_sim  # noqa: E402

from roost.client import AsyncClient  # noqa: E402
from roost.proctree import wakeups  # noqa: E402

PY_PASS = [sys.executable, "-c", "pass"]


def _python_pass(env: dict[str, str]) -> float:
    return timed(PY_PASS, env)


# -- 100k records ---------------------------------------------------------------------------------------
def bench_scale(opts: argparse.Namespace) -> list[Result]:
    """100k seeded records: start, memory per record, `ls --json`, the app's first screen, and a
    100k-entry transcript opened tail first, each beside the same on an (almost) empty store."""
    n = opts.records
    big, empty = Home(tag="big"), Home(tag="empty")
    out: list[Result] = []
    try:
        seconds = clock(lambda: seed_records(big, n, kids_per_root=opts.kids))
        ids = [f"s{i:06d}" for i in range(n)]
        long_job = ids[0]
        seconds += clock(lambda: seed_timeline(big, long_job, opts.entries))
        print(f"  seeded {n:,} records and {opts.entries:,} timeline entries in {seconds:.1f}s", flush=True)

        # Start and memory: three starts of each, interleaved; RSS read 1 s after the first hello.
        starts: dict[str, list[float]] = {"big": [], "empty": []}
        rss: dict[str, list[int]] = {"big": [], "empty": []}
        for _ in range(3):
            for name, home in (("big", big), ("empty", empty)):
                with Daemon(home) as d:
                    starts[name].append(d.start())
                    time.sleep(1.0)
                    rss[name].append(d.rss_kb())
        start_big, start_empty = median(starts["big"]), median(starts["empty"])
        out.append(Result("scale", f"daemon start, {n:,} records (process start -> hello)", start_big, "s",
                          start_empty, "0 records", "< 2 s", start_big < 2.0))
        per_record = (median(rss["big"]) - median(rss["empty"])) * 1024 / n
        out.append(Result("scale", f"daemon RSS {n:,} records", median(rss["big"]) / 1024, "MB",
                          median(rss["empty"]) / 1024, "0 records"))
        out.append(Result("scale", "memory per idle record (RSS diff / n)", per_record / 1024, "KB",
                          target="< 2 KB", met=per_record < 2048))

        small_ids = seed_records(empty, 5)
        seed_timeline(empty, small_ids[0], 50)
        with Daemon(big) as dbig, Daemon(empty) as dsmall:
            dbig.start()
            dsmall.start()
            out += _ls_json(big, empty, n)
            out += _app_first_screen(dbig, dsmall, opts)
            out += _logs_tail(big, empty, dbig, dsmall, long_job, small_ids[0], opts.entries)
    finally:
        big.remove()
        empty.remove()
    return out


def _ls_json(big: Home, empty: Home, n: int) -> list[Result]:
    dump = big.dir / "ls.json"
    s, b = [], []
    for i in range(3):
        with open(dump, "w") as fh:
            s.append(timed(big.cli("ls", "--json"), big.env, stdout=fh))
        if i == 0:
            got = count_json_array(dump)
            if got != n:
                print(f"  ! roost ls --json printed {got:,} records, not {n:,}", flush=True)
        b.append(timed(empty.cli("ls", "--json"), empty.env))
    return [Result("scale", f"`roost ls --json` of {n:,} records", median(s), "s", median(b), "5 records",
                   "< 3 s", median(s) < 3.0)]


def _app_first_screen(dbig: Daemon, dsmall: Daemon, opts: argparse.Namespace) -> list[Result]:
    async def subscribe_once(d: Daemon) -> float:
        start = time.perf_counter()
        client = await AsyncClient.connect(d.home.paths.socket, client="bench-app")
        await client.subscribe("agent_view")
        elapsed = time.perf_counter() - start
        await client.close()
        return elapsed

    async def rounds() -> tuple[list[float], list[float]]:
        s, b = [], []
        for _ in range(10):
            s.append(await subscribe_once(dbig))
            b.append(await subscribe_once(dsmall))
        return s, b

    s, b = asyncio.run(rounds())
    out = [Result("scale", "connect + subscribe(agent_view) p99, async client", pct(s, 99), "s", pct(b, 99),
                  "5 records", "< 1 s", pct(s, 99) < 1.0)]
    if not opts.no_app:
        s, b = [], []
        for _ in range(3):
            s.append(_app_run(dbig))
            b.append(_app_run(dsmall))
        out.append(Result("scale", "Textual app headless: run_test -> agent view has rows", median(s), "s",
                          median(b), "5 records", "< 1 s", median(s) < 1.0))
    return out


def _app_run(d: Daemon) -> float:
    """Seconds from entering App.run_test to the agent view's table holding rows (headless)."""
    from roost.config import Config
    from roost.tui.agent_view import JobTable
    from roost.tui.app import RoostApp
    from roost.tui.daemon_link import DaemonSource

    async def go() -> float:
        start = time.perf_counter()
        app = RoostApp(DaemonSource(d.home.paths), Config())
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                tables = app.screen.query(JobTable)
                if tables and tables.first().row_count > 0:
                    return time.perf_counter() - start
                await pilot.pause(0.005)
        raise RuntimeError("the app showed no rows within 30 s")

    return asyncio.run(go())


def _logs_tail(big: Home, empty: Home, dbig: Daemon, dsmall: Daemon, long_job: str, short_job: str,
               entries: int) -> list[Result]:
    with dbig.client() as cb, dsmall.client() as cs:
        s, b = [], []
        for _ in range(30):
            s.append(clock(lambda: cb.call("logs", job=long_job)))
            b.append(clock(lambda: cs.call("logs", job=short_job)))
    cli_s, cli_b = [], []
    for _ in range(5):
        cli_s.append(timed(big.cli("logs", long_job), big.env))
        cli_b.append(timed(empty.cli("logs", short_job), empty.env))
    return [Result("scale", f"`logs` request, job with {entries:,} entries (tail 200) p99", pct(s, 99), "s",
                   pct(b, 99), "50 entries"),
            Result("scale", f"`roost logs JOB` (CLI process), {entries:,} entries", median(cli_s), "s",
                   median(cli_b), "50 entries", "< 0.5 s", median(cli_s) < 0.5)]


# -- live built-in workers ----------------------------------------------------------------------------------
def _cpu_percent(d: Daemon, seconds: float) -> float:
    c0, t0 = d.cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    return (d.cpu_seconds() - c0) / (time.monotonic() - t0) * 100


def bench_idle(opts: argparse.Namespace) -> list[Result]:
    """500 idle built-in workers: the daemon's CPU over 30 s (beside the same daemon with none),
    and `show` / `list limit=100` p99 (beside `status`, the cheapest request)."""
    home = Home("max_running_jobs = 0\nmax_live_workers = 0\n", tag="idle")
    out: list[Result] = []
    try:
        with Daemon(home) as d:
            d.start()
            base_cpu = _cpu_percent(d, 10.0)
            start = time.monotonic()
            ids = _spawn_idle(d, opts.workers)
            print(f"  {opts.workers} workers idle after {time.monotonic() - start:.1f}s", flush=True)
            time.sleep(3.0)
            cpu = _cpu_percent(d, opts.idle_seconds)
            out.append(Result("idle", f"daemon CPU, {opts.workers} idle workers, {opts.idle_seconds:.0f}s", cpu, "%",
                              base_cpu, "0 workers, 10 s", "< 0.5 %", cpu < 0.5))
            out.append(Result("idle", f"daemon RSS, {opts.workers} idle workers", d.rss_kb() / 1024, "MB"))
            with d.client() as c:
                show, page, status = [], [], []
                for i in range(300):
                    show.append(clock(lambda: c.call("show", job=ids[i % len(ids)])))
                    page.append(clock(lambda: c.call("list", limit=100)))
                    status.append(clock(lambda: c.call("status")))
            out.append(Result("idle", "`show` p99", pct(show, 99), "s", pct(status, 99), "`status` p99", "< 20 ms",
                              pct(show, 99) < 0.020))
            out.append(Result("idle", "`list limit=100` p99", pct(page, 99), "s", pct(status, 99), "`status` p99",
                              "< 20 ms", pct(page, 99) < 0.020))
    finally:
        home.remove()
    return out


def bench_latency(opts: argparse.Namespace) -> list[Result]:
    """A worker's state change -> a subscribed client has the row, at 500 turns/s over 50 workers
    (`send` of `say x`), beside the same at a gentle 25 turns/s. Latency is the client's receive
    time minus the row's state_since (stamped by the daemon at the transition)."""
    home = Home("max_running_jobs = 0\nmax_live_workers = 0\n", tag="latency")
    out: list[Result] = []
    try:
        with Daemon(home) as d:
            d.start()
            ids = _spawn_idle(d, opts.latency_workers)
            base, base_rate = asyncio.run(_turns_at(d, ids, 25.0, 6.0))
            lat, rate = asyncio.run(_turns_at(d, ids, opts.rate, opts.rate_seconds))
            out.append(Result("latency", f"state change -> row at client p99, {opts.rate:.0f} turns/s asked "
                                         f"({rate:.0f} done)", pct(lat, 99), "s", pct(base, 99),
                              f"25 turns/s ({base_rate:.0f} done)", "< 20 ms", pct(lat, 99) < 0.020))
            out.append(Result("latency", "state change -> row at client p50", median(lat), "s", median(base), "25 turns/s"))
    finally:
        home.remove()
    return out


async def _turns_at(d: Daemon, ids: list[str], rate: float, seconds: float) -> tuple[list[float], float]:
    """Send `say x` to the workers round robin at ``rate`` a second for ``seconds``; the latencies
    of every state change a watching client saw, and the turns per second that ended."""
    watcher = await AsyncClient.connect(d.home.paths.socket, client="bench-watch")
    senders = [await AsyncClient.connect(d.home.paths.socket, client="bench-send") for _ in range(4)]
    await watcher.subscribe("agent_view")
    wanted = set(ids)
    seen: dict[str, float] = {}
    lat: list[float] = []
    ended = 0

    async def watch() -> None:
        nonlocal ended
        async for event in watcher.events():
            row = event.get("row")
            if row is None or row["id"] not in wanted or seen.get(row["id"]) == row["state_since"]:
                continue
            lat.append(time.time() - row["state_since"])
            seen[row["id"]] = row["state_since"]
            ended += row["state"] == "idle"

    reader = asyncio.create_task(watch())
    calls: set[asyncio.Task[Any]] = set()
    total = int(rate * seconds)
    start = time.monotonic()
    for k in range(total):
        delay = start + k / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(senders[k % len(senders)].call("send", job=ids[k % len(ids)], text="say x"))
        calls.add(task)
        task.add_done_callback(calls.discard)
    await asyncio.gather(*calls, return_exceptions=True)
    # let the queued turns finish (every worker idle again)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        page = await senders[0].call("list", states=["working"], limit=1)
        if page["total"] == 0:
            break
        await asyncio.sleep(0.1)
    elapsed = time.monotonic() - start
    await asyncio.sleep(0.2)
    reader.cancel()
    for c in (watcher, *senders):
        await c.close()
    return lat, ended / elapsed


# -- a stalled subscriber ------------------------------------------------------------------------------------
def bench_stalled(opts: argparse.Namespace) -> list[Result]:
    """One job prints ``entries`` text lines (timeline entries) while a subscriber that never reads
    holds its timeline and the agent view: the daemon's RSS growth, and another client's `show`
    and timeline latency, beside the same production with no stalled subscriber."""
    home = Home("max_running_jobs = 0\n", tag="stalled")
    out: list[Result] = []
    try:
        with Daemon(home) as d:
            d.start()
            job = _spawn_idle(d, 1)[0]
            with d.client() as c:
                idle = [clock(lambda: c.call("show", job=job)) for _ in range(200)]
            n = opts.stall_entries
            base = asyncio.run(_produce(d, job, n, stalled=False))
            subj = asyncio.run(_produce(d, job, n, stalled=True))
            out.append(Result("stalled", f"daemon RSS growth, {n:,} entries, stalled subscriber",
                              subj["growth"] / 1024, "MB", base["growth"] / 1024, "none stalled", "< 50 MB",
                              subj["growth"] < 50 * 1024))
            for q in (50, 99):
                out.append(Result("stalled", f"other client: `show` p{q} while producing", pct(subj["show"], q), "s",
                                  pct(base["show"], q), "none stalled", "unchanged (<= 1.5x)",
                                  pct(subj["show"], q) <= 1.5 * pct(base["show"], q) + 0.002))
            out.append(Result("stalled", "other client: `show` p50 while producing, none stalled",
                              pct(base["show"], 50), "s", pct(idle, 50), "idle daemon"))
            out.append(Result("stalled", "other client: timeline entry latency p99", pct(subj["entry"], 99), "s",
                              pct(base["entry"], 99), "none stalled", "unchanged (<= 1.5x)",
                              pct(subj["entry"], 99) <= 1.5 * pct(base["entry"], 99) + 0.002))
            out.append(Result("stalled", "entries produced per second", subj["rate"], "/s", base["rate"], "none stalled"))
            print(f"  stalled subscriber: {subj['stalled_end']}", flush=True)
    finally:
        home.remove()
    return out


async def _produce(d: Daemon, job: str, entries: int, stalled: bool) -> dict[str, Any]:
    per_message = 5000
    stall: socket.socket | None = None
    if stalled:
        stall = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stall.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stall.connect(str(d.home.paths.socket))
        stall.sendall(b'{"id":1,"op":"hello","args":{"version":2,"client":"stalled"}}\n'
                      b'{"id":2,"op":"subscribe","args":{"what":"timeline","job":"%s"}}\n'
                      b'{"id":3,"op":"subscribe","args":{"what":"agent_view"}}\n' % job.encode())
    other = await AsyncClient.connect(d.home.paths.socket, client="bench-other")
    sender = await AsyncClient.connect(d.home.paths.socket, client="bench-send")
    first = (await other.call("logs", job=job, limit=1))["newest"] or 0
    await other.subscribe("timeline", job=job, after=first)
    entry_lat: list[float] = []
    got = 0

    async def read() -> None:
        nonlocal got
        async for event in other.events():
            entry = event.get("entry")
            if entry is not None and entry["kind"] == "text":
                got += 1
                if got % 10 == 0:
                    entry_lat.append(time.time() - entry["ts"])

    reader = asyncio.create_task(read())
    rss0 = d.rss_kb()
    peak = rss0
    show: list[float] = []
    start = time.monotonic()
    for m in range(0, entries, per_message):
        script = "\n".join(f"say line {m + i} of the build log, padded to look like one" for i in range(per_message))
        await sender.call("send", job=job, text=script)
    deadline = time.monotonic() + 600
    while got < entries and time.monotonic() < deadline:
        t0 = time.perf_counter()
        await other.call("show", job=job)
        show.append(time.perf_counter() - t0)
        peak = max(peak, d.rss_kb())
        await asyncio.sleep(0.005)
    rate = got / (time.monotonic() - start)
    reader.cancel()
    stalled_end = ""
    if stall is not None:
        stall.settimeout(5)
        data, eof = b"", False
        try:
            while True:
                chunk = stall.recv(1 << 20)
                if not chunk:
                    eof = True
                    break
                data = (data + chunk)[-4096:]
        except OSError:
            pass
        lagged = b'"lagged"' in data
        stalled_end = (("told it lagged, " if lagged else "not told it lagged, ") +
                       ("then closed by the daemon" if eof else "still open after the run"))
        stall.close()
    await other.close()
    await sender.close()
    return {"growth": peak - rss0, "show": show, "entry": entry_lat, "rate": rate, "stalled_end": stalled_end}


# -- spawn to ready ------------------------------------------------------------------------------------------
def bench_spawn(opts: argparse.Namespace) -> list[Result]:
    """Spawn -> the worker answered its first get_state (its state leaves starting: the daemon
    hands it the prompt then), seen by a subscribed client: with the spare worker (the default)
    beside a daemon with `spare_workers = 0`, interleaved; and beside `python -c pass` and the same
    built-in worker started by hand and asked get_state. Then bursts of spawns at once, both ways."""
    warm = Home("max_running_jobs = 0\nmax_live_workers = 0\n", tag="spawn")
    cold = Home("max_running_jobs = 0\nmax_live_workers = 0\nspare_workers = 0\n", tag="cold")
    out: list[Result] = []
    try:
        with Daemon(warm) as dw, Daemon(cold) as dc:
            dw.start()
            dc.start()
            ready, fresh, by_ts, bare, by_hand, took = [], [], [], [], [], 0
            for _ in range(opts.spawns):
                spare = _wait_spare(dw)  # a spawn that finds the spare ready: what a person's spawns are
                r, pid = asyncio.run(_spawn_ready(dw))
                ready.append(r)
                took += pid == spare
                _wait_spare(dw)  # the next spare's start must not share the cores with the baseline's
                fresh.append(asyncio.run(_spawn_ready(dc))[0])
                bare.append(_python_pass(warm.env))
                by_hand.append(_worker_by_hand(warm))
            by_ts = _stamped(dw)
            cold_ts = _stamped(dc)
            burst_warm, burst_cold = [], []
            for _ in range(5):
                _wait_spare(dw)
                burst_warm.append(_burst(dw, opts.burst))
                _wait_spare(dw)
                burst_cold.append(_burst(dc, opts.burst))
        if took != opts.spawns:
            print(f"  ! {opts.spawns - took} of {opts.spawns} spawns did not take the spare", flush=True)
        out.append(Result("spawn", "spawn request -> working row at client p50, spare worker", median(ready), "s",
                          median(fresh), "spare_workers = 0", "< 50 ms", median(ready) < 0.050))
        out.append(Result("spawn", "the same, spare_workers = 0", median(fresh), "s", median(bare),
                          "`python -c pass`"))
        out.append(Result("spawn", "spawned -> ready, daemon timeline stamps p50, spare worker", median(by_ts), "s",
                          median(cold_ts), "spare_workers = 0"))
        out.append(Result("spawn", "spawned -> ready, daemon timeline stamps p50, spare_workers = 0", median(cold_ts),
                          "s", median(by_hand), "worker by hand: start + get_state"))
        out.append(Result("spawn", f"{opts.burst} spawns at once -> all working, median of 5, spare worker",
                          median(burst_warm), "s", median(burst_cold), "spare_workers = 0"))
    finally:
        warm.remove()
        cold.remove()
    return out


def _wait_spare(d: Daemon, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    with d.client() as c:
        while time.monotonic() < deadline:
            ready = c.call("status")["spares"]["ready"]
            if ready:
                return ready[0]
            time.sleep(0.002)
    raise RuntimeError("no spare worker was ready")


def _stamped(d: Daemon) -> list[float]:
    """Per job: its `spawned` entry to its first state past starting, as the daemon stamped them."""
    out = []
    with d.client() as c:
        for row in c.rows():
            entries = c.call("logs", job=row["id"])["entries"]
            t_spawn = next(e["ts"] for e in entries if e["kind"] == "spawned")
            t_ready = next(e["ts"] for e in entries if e["kind"] == "state" and
                           e["data"]["state"] not in ("queued", "starting"))
            out.append(t_ready - t_spawn)
    return out


async def _spawn_ready(d: Daemon) -> tuple[float, int]:
    """Seconds from the spawn request to the job's row past starting, and its worker's pid."""
    client = await AsyncClient.connect(d.home.paths.socket, client="bench-spawn")
    await client.subscribe("agent_view", limit=0)
    start = time.perf_counter()
    row = await client.call("spawn", prompt="say hi", cwd=str(d.home.work))
    async for event in client.events():
        r = event.get("row")
        if r and r["id"] == row["id"] and r["state"] not in ("queued", "starting"):
            break
    elapsed = time.perf_counter() - start
    pid = (await client.call("show", job=row["id"]))["pid"]
    await client.close()
    return elapsed, pid


def _burst(d: Daemon, count: int) -> float:
    """Seconds from ``count`` spawns sent at once to every one of their rows past starting."""
    async def run() -> float:
        client = await AsyncClient.connect(d.home.paths.socket, client="bench-burst")
        await client.subscribe("agent_view", limit=0)
        start = time.perf_counter()
        rows = await asyncio.gather(*(client.call("spawn", prompt="say hi", cwd=str(d.home.work))
                                      for _ in range(count)))
        waiting = {row["id"] for row in rows}
        async for event in client.events():
            r = event.get("row")
            if r and r["state"] not in ("queued", "starting"):
                waiting.discard(r["id"])
                if not waiting:
                    break
        elapsed = time.perf_counter() - start
        await client.close()
        return elapsed

    return asyncio.run(run())


def _worker_by_hand(home: Home) -> float:
    session = home.dir / f"by-hand-{time.monotonic_ns()}.jsonl"
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "roost.programs.builtin_agent", "--session", str(session)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=home.env)
    assert proc.stdin and proc.stdout
    proc.stdin.write(b'{"type":"get_state","id":"s"}\n')
    proc.stdin.flush()
    proc.stdout.readline()
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait()
    return elapsed


# -- the CLI -----------------------------------------------------------------------------------------------------
def bench_cli(opts: argparse.Namespace) -> list[Result]:
    """`roost ls --json` with a few jobs beside `python -c pass` from the same interpreter, and
    beside `supervisorctl status` of a supervisord with as many programs (supervisor installed
    with pip in a temporary venv; skipped with a note when it cannot be)."""
    home = Home(tag="cli")
    out: list[Result] = []
    sup = _Supervisord(home, programs=3)
    try:
        with Daemon(home) as d:
            d.start()
            _spawn_idle(d, 3)
            s, b, v = [], [], []
            sup_ok = sup.start()
            for _ in range(opts.cli_runs):
                s.append(timed(home.cli("ls", "--json"), home.env))
                b.append(_python_pass(home.env))
                if sup_ok:
                    v.append(timed(sup.status_cmd, home.env))
            out.append(Result("cli", "`roost ls --json`, 3 jobs", median(s), "s", median(b), "`python -c pass`",
                              "<= 4x", median(s) <= 4 * median(b)))
            if sup_ok:
                out.append(Result("cli", "`roost ls --json`, 3 jobs", median(s), "s", median(v),
                                  "`supervisorctl status`, 3 programs", "faster", median(s) < median(v)))
            else:
                print(f"  supervisorctl skipped: {sup.note}", flush=True)
    finally:
        sup.stop()
        home.remove()
    return out


class _Supervisord:
    """A supervisord with a few `sleep` programs on a unix socket in the home."""

    def __init__(self, home: Home, programs: int) -> None:
        self.home = home
        self.programs = programs
        self.venv = Path(tempfile.gettempdir()) / "roost-bench-supervisor-venv"
        self.conf = home.dir / "supervisord.conf"
        self.proc: subprocess.Popen[bytes] | None = None
        self.note = ""

    @property
    def status_cmd(self) -> list[str]:
        return [str(self.venv / "bin" / "supervisorctl"), "-c", str(self.conf), "status"]

    def start(self) -> bool:
        if not (self.venv / "bin" / "supervisord").exists():
            try:
                subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True, capture_output=True)
                subprocess.run([str(self.venv / "bin" / "pip"), "install", "-q", "supervisor"], check=True,
                               capture_output=True, timeout=180)
            except (subprocess.SubprocessError, OSError) as exc:
                self.note = f"pip install supervisor failed: {exc}"
                return False
        sock = self.home.dir / "supervisor.sock"
        lines = ["[unix_http_server]", f"file={sock}", "[supervisord]", f"logfile={self.home.dir}/supervisord.log",
                 f"pidfile={self.home.dir}/supervisord.pid", "nodaemon=true",
                 "[rpcinterface:supervisor]",
                 "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
                 "[supervisorctl]", f"serverurl=unix://{sock}"]
        for i in range(self.programs):
            lines += [f"[program:sleep{i}]", "command=sleep 3600"]
        self.conf.write_text("\n".join(lines) + "\n")
        self.proc = subprocess.Popen([str(self.venv / "bin" / "supervisord"), "-c", str(self.conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            done = subprocess.run(self.status_cmd, capture_output=True, text=True)
            if done.stdout.count("RUNNING") >= self.programs:
                return True
            time.sleep(0.2)
        self.note = "supervisord did not come up"
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# -- rows and a whole turn (the earlier benchmarks, on the new engine) ---------------------------------------
def bench_rows(opts: argparse.Namespace) -> list[Result]:
    """`list` pages over a 10k-job forest in process (JobIndex.page, slim rows, kept counts) beside
    json.dumps of the same records alone: what building rows costs."""
    from roost.daemon.storage.index import JobIndex
    from roost.models import Job, State

    index = JobIndex()
    now = time.time()
    jobs = []
    for i in range(10_000):
        parent = f"j{i // 10}" if i >= 10 else None
        jobs.append(Job(id=f"j{i}", title=f"job {i}", driver="builtin", cwd="/", parent=parent,
                        depth=len(str(i)) - 1, state=State.WORKING if i % 3 else State.DONE,
                        created_at=now + i, state_since=now, last_text="x" * 300))
    index.load(jobs)

    def every_page() -> None:
        cursor = None
        while True:
            page = index.page(limit=1000, cursor=cursor)
            json.dumps(page)
            cursor = page["next"]
            if cursor is None:
                return

    records = [j.to_dict() for j in jobs]
    s, b = [], []
    for _ in range(7):
        s.append(clock(every_page))
        b.append(clock(lambda: json.dumps(records)))
    return [Result("rows", "`list` every page of 10k jobs (in process)", median(s), "s", median(b),
                   "json.dumps of the records")]


def bench_turn(opts: argparse.Namespace) -> list[Result]:
    """A whole job through the daemon (spawn -> one `say` turn -> idle, seen by a subscriber) beside
    the same built-in worker started by hand and given get_state and one prompt."""
    home = Home("max_running_jobs = 0\n", tag="turn")
    try:
        with Daemon(home) as d:
            d.start()

            async def through_daemon() -> float:
                client = await AsyncClient.connect(d.home.paths.socket, client="bench")
                await client.subscribe("agent_view", limit=0)
                start = time.perf_counter()
                row = await client.call("spawn", prompt="say hi", cwd=str(home.work))
                async for event in client.events():
                    r = event.get("row")
                    if r and r["id"] == row["id"] and r["state"] == "idle":
                        break
                elapsed = time.perf_counter() - start
                await client.close()
                return elapsed

            def by_hand() -> float:
                session = home.dir / f"hand-{time.monotonic_ns()}.jsonl"
                return worker_turn([sys.executable, "-m", "roost.programs.builtin_agent", "--session", str(session)],
                                   home.env, b'{"type":"get_state","id":"s"}\n'
                                             b'{"type":"prompt","id":"p","message":"say hi","run":1}\n')

            s, b = [], []
            for _ in range(10):
                s.append(asyncio.run(through_daemon()))
                b.append(by_hand())
    finally:
        home.remove()
    return [Result("turn", "spawn -> one `say` turn -> idle row", median(s), "s", median(b), "worker by hand")]


def bench_wakeups(opts: argparse.Namespace) -> list[Result]:
    """An idle daemon with no jobs: how often it wakes in 10 s (its voluntary context switches),
    with the config watched through inotify and without (``inotify_simple`` hidden from it)."""
    out: list[Result] = []
    for watched in (True, False):
        home = Home(tag="wakeups")
        if not watched:
            home.env = {**home.env, "PYTHONPATH": str(_no_inotify(home))}
        try:
            with Daemon(home) as d:
                d.start()
                _wait_spare(d)
                time.sleep(1.0)  # the probes' connections are closed and read
                with d.client() as c:
                    how = c.call("status")["config_watch"]
                time.sleep(1.0)
                before = wakeups(d.pid)
                time.sleep(opts.wakeup_seconds)
                count = wakeups(d.pid) - before
        finally:
            home.remove()
        out.append(Result("wakeups", f"idle daemon wake-ups in {opts.wakeup_seconds:.0f}s, config {how}", count,
                          "wakes", target="≤ 1 in 10 s", met=count <= opts.wakeup_seconds / 10))
    return out


def _no_inotify(home: Home) -> Path:
    """A directory that, first on PYTHONPATH, makes ``import inotify_simple`` fail."""
    stub = home.dir / "no-inotify"
    stub.mkdir()
    (stub / "inotify_simple.py").write_text("raise ImportError('hidden by the benchmark')\n")
    return stub


BENCHES: dict[str, Callable[[argparse.Namespace], list[Result]]] = {
    "scale": bench_scale, "idle": bench_idle, "latency": bench_latency, "stalled": bench_stalled,
    "spawn": bench_spawn, "cli": bench_cli, "rows": bench_rows, "turn": bench_turn, "output": bench_output,
    "children": bench_children, "chain": bench_chain,
    "diff": bench_diff,
    "wakeups": bench_wakeups, "app": bench_app, "transcript": bench_transcript, "app_memory": bench_app_memory,
    "cli_commands": bench_cli_commands, "scale_sim": bench_scale_sim,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--kids", type=int, default=10, help="scale: children of each seeded root (trees as people make them)")
    parser.add_argument("--entries", type=int, default=100_000, help="timeline entries of the long job (scale)")
    parser.add_argument("--no-app", action="store_true", help="scale: skip the headless Textual app")
    parser.add_argument("--workers", type=int, default=500, help="idle: live workers")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--latency-workers", type=int, default=50)
    parser.add_argument("--rate", type=float, default=500.0, help="latency: turns per second asked")
    parser.add_argument("--rate-seconds", type=float, default=10.0)
    parser.add_argument("--stall-entries", type=int, default=100_000)
    parser.add_argument("--spawns", type=int, default=20)
    parser.add_argument("--burst", type=int, default=10, help="spawn: spawns sent at once")
    parser.add_argument("--cli-runs", type=int, default=15)
    parser.add_argument("--output-mb", type=int, default=50, help="output: MB the command prints")
    parser.add_argument("--output-runs", type=int, default=3)
    parser.add_argument("--children", type=int, default=2500, help="children: how many one parent spawns")
    parser.add_argument("--depth", type=int, default=1000, help="chain: how deep")
    parser.add_argument("--diff-mb", type=int, default=40, help="diff: MB of untracked changes")
    parser.add_argument("--diff-runs", type=int, default=3)
    parser.add_argument("--wakeup-seconds", type=float, default=10.0, help="wakeups: seconds counted")
    parser.add_argument("--flood-lines", type=int, default=LINES, help="app_memory: lines the followed job prints")
    scale_sim_options(parser)
    opts = parser.parse_args(argv)
    if opts.list:
        for name, fn in BENCHES.items():
            print(f"{name:8} {(fn.__doc__ or '').strip().splitlines()[0]}")
        return 0
    unknown = [n for n in opts.names if n not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; one of {', '.join(BENCHES)}")
    results: list[Result] = []
    started = time.monotonic()
    for name in opts.names or list(BENCHES):
        t0 = time.monotonic()
        print(f"{name} ...", flush=True)
        try:
            got = BENCHES[name](opts)
        except Exception as exc:  # one broken benchmark must not hide the others
            print(f"  ! {name} failed: {type(exc).__name__}: {exc}", flush=True)
            got = [Result(name, f"FAILED: {exc}", float("nan"), "", met=False)]
        results += got
        print(f"  {time.monotonic() - t0:.0f}s", flush=True)
    print()
    print(table(results))
    print(f"\n{time.strftime('%Y-%m-%d %H:%M')}  {os.cpu_count()} cores  Python {sys.version.split()[0]}  "
          f"{time.monotonic() - started:.0f}s in all")
    if opts.json:
        Path(opts.json).write_text(json.dumps([r.__dict__ | {"ratio": r.ratio} for r in results], indent=2))
    return 0 if all(r.met is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
