"""1,000 workers over 20 simulated machines against the real daemon (docs/scale.md).

Each "machine" is a node process (``python bench/scale_node/node.py DIR``) that speaks the worker
protocol for every worker placed on it and emits scripted events at the rate the bench asks. The
daemon starts its workers as it always does (the built-in driver, one process per worker, its
pipes and reader tasks); the job's cwd is the node's directory, whose ``roost/`` package is
bench/scale_node's, so each worker process is a bare relay between the daemon's pipes and its node.
The daemon runs under bench/scale_daemon.py, which only counts SQLite commits.

Reported: the daemon's RSS at 10, 100 and N live idle workers (and so per worker), then for each
kind of event (text, tool, a whole turn) at rising rates: events done per second, the daemon's CPU
(and per event), SQLite commits per second, latency from the node's write to a subscriber's push
(p50 / p99, on a sample of timelines), bytes per event on each hop, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Daemon, Home, Result, median, pct  # noqa: E402

from roost.client import AsyncClient, Client, ClientError  # noqa: E402

BENCH = Path(__file__).resolve().parent
STAMP = re.compile(r"t=(\d+\.\d+)")
CONFIG = "max_running_jobs = 0\nmax_live_workers = 0\nspare_workers = 0\nidle_timeout = 86400\n"


# -- the bench ------------------------------------------------------------------------------------------
class CountedDaemon(Daemon):
    """The daemon under bench/scale_daemon.py, which writes its commit count to a file (and with
    ``trace``, what tracemalloc holds per source file when asked)."""

    def __init__(self, home: Home, trace: bool = False) -> None:
        super().__init__(home)
        self.trace = trace

    def start(self, timeout: float = 60.0) -> float:
        self.counts = self.home.dir / "commits"
        log = open(self.home.paths.daemon_log, "ab")
        begin = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, str(BENCH / "scale_daemon.py"), str(self.counts),
                                      *(["--trace"] if self.trace else [])],
                                     env=self.home.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     start_new_session=True)
        log.close()
        while time.perf_counter() - begin < timeout:
            try:
                Client.connect(self.home.paths.socket, client="bench-probe", timeout=timeout).close()
                return time.perf_counter() - begin
            except ClientError:
                time.sleep(0.05)
        raise RuntimeError(f"the daemon did not answer; see {self.home.paths.daemon_log}")

    def commits(self) -> int:
        try:
            return int(self.counts.read_text() or 0)
        except (OSError, ValueError):
            return 0

    def waited(self) -> float:
        """Seconds the daemon's threads have waited for a CPU while runnable (schedstat)."""
        return sum(int(Path(t, "schedstat").read_text().split()[1]) for t in Path(f"/proc/{self.pid}/task").iterdir()) / 1e9

    def traced(self, timeout: float = 60.0) -> dict[str, int]:
        """Bytes tracemalloc holds per source file now."""
        ask, trace = self.counts.with_suffix(".ask"), self.counts.with_suffix(".trace")
        trace.unlink(missing_ok=True)
        ask.touch()
        deadline = time.monotonic() + timeout
        while ask.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return json.loads(trace.read_text())


class Nodes:
    """The node processes, one directory (the jobs' cwd) and socket each."""

    def __init__(self, home: Home, count: int) -> None:
        self.dirs = [home.dir / f"n{k:02d}" for k in range(count)]
        self.procs = []
        for where in self.dirs:
            where.mkdir()
            (where / "roost").symlink_to(BENCH / "scale_node" / "roost")
            # niced: a node stands for another machine, so it must not take the daemon's CPU here
            argv = ["nice", "-n", "19", sys.executable, str(BENCH / "scale_node" / "node.py"), str(where)]
            self.procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for where, proc in zip(self.dirs, self.procs):
            while not (where / "node.sock").exists():
                if proc.poll() is not None:
                    raise RuntimeError(f"node {where.name} exited ({proc.returncode}) before it listened")
                time.sleep(0.02)

    def tell(self, line: str) -> None:
        for p in self.procs:
            assert p.stdin
            p.stdin.write(line + "\n")
            p.stdin.flush()

    def stats(self) -> dict[str, int]:
        self.tell("stats")
        total = {"events": 0, "bytes": 0, "workers": 0}
        for p in self.procs:
            assert p.stdout
            for key, value in json.loads(p.stdout.readline()).items():
                total[key] += value
        return total

    def cpu_seconds(self) -> float:
        return sum(_cpu(p.pid) for p in self.procs)

    def close(self) -> None:
        for p in self.procs:
            if p.stdin:
                p.stdin.close()
            p.wait(10)


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spawn_on(d: Daemon, nodes: Nodes, first: int, last: int, timeout: float = 600.0) -> list[str]:
    """Jobs first..last-1, job i on node i mod nodes; wait until every worker is up and idle."""
    with d.client() as c:
        where = [str(nodes.dirs[i % len(nodes.dirs)]) for i in range(first, last)]
        ids = [c.call("spawn", prompt="go", cwd=cwd)["id"] for cwd in where]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if c.call("list", states=["idle"], limit=1)["total"] >= last and c.call("status")["workers"] >= last:
                return ids
            time.sleep(0.5)
    raise RuntimeError(f"{last} workers were not idle within {timeout:.0f}s")


def _relay_pss_kb(d: Daemon) -> float:
    """Median proportional set size of the worker relays (the daemon's children)."""
    kids = Path(f"/proc/{d.pid}/task/{d.pid}/children").read_text().split()
    pss = []
    for pid in kids[:50]:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss.append(int(line.split()[1]))
    return median(pss) if pss else 0.0


async def _phase(d: CountedDaemon, nodes: Nodes, sample: list[str], kind: str, rate: float,
                 seconds: float) -> dict[str, Any]:
    """One kind at one total rate for ``seconds``: what it cost the daemon and how late pushes came."""
    watcher = await AsyncClient.connect(d.home.paths.socket, client="bench-timelines")
    app = await AsyncClient.connect(d.home.paths.socket, client="bench-app")
    for job in sample:
        await watcher.subscribe("timeline", job=job, after=10**12)
    await app.subscribe("agent_view")
    lat: list[float] = []
    pushed = {"timeline": 0, "timeline_bytes": 0, "row_bytes": 0}

    async def watch(client: AsyncClient, what: str) -> None:
        async for event in client.events():
            size = len(json.dumps(event, separators=(",", ":"))) + 1
            if what == "row":
                pushed["row_bytes"] += size
                continue
            found = STAMP.search(json.dumps(event))
            if found:
                lat.append(time.time() - float(found.group(1)))
                pushed["timeline"] += 1
                pushed["timeline_bytes"] += size

    readers = [asyncio.create_task(watch(watcher, "timeline")), asyncio.create_task(watch(app, "row"))]
    if kind in ("text", "tool"):  # every worker in a turn of its own first, outside the measure
        nodes.tell("begin")
        await _settled(d, nodes.stats()["workers"])
    lat.clear()  # what the turns' beginning pushed is not this phase's
    pushed.update(timeline=0, timeline_bytes=0, row_bytes=0)
    before, cpu0, commits0, wait0, rows0 = nodes.stats(), d.cpu_seconds(), d.commits(), d.waited(), _rows(d.home)
    ncpu0, t0 = nodes.cpu_seconds(), time.monotonic()
    nodes.tell(f"{kind} {rate / len(nodes.dirs)}")
    await asyncio.sleep(seconds)
    nodes.tell("idle")
    after = nodes.stats()
    await asyncio.sleep(1.0)  # what was written is pushed (or late: p99 says)
    elapsed = time.monotonic() - t0
    cpu, commits, wait = d.cpu_seconds() - cpu0, d.commits() - commits0, d.waited() - wait0
    taken = _rows(d.home) - rows0
    if kind in ("text", "tool"):
        nodes.tell("end")
        await _settled(d, 0)
    for r in readers:
        r.cancel()
    await watcher.close()
    await app.close()
    events = after["events"] - before["events"]
    return {"kind": kind, "asked": rate, "done": events / seconds, "taken": taken / elapsed,
            "cpu_pct": cpu / elapsed * 100, "wait_pct": wait / elapsed * 100,
            "cpu_us_per_event": cpu / max(taken, 1) * 1e6, "commits_s": commits / elapsed,
            "p50": median(lat) if lat else float("nan"), "p99": pct(lat, 99) if lat else float("nan"),
            "line_bytes": (after["bytes"] - before["bytes"]) / max(events, 1),
            "push_bytes": pushed["timeline_bytes"] / max(pushed["timeline"], 1),
            "row_bytes_s": pushed["row_bytes"] / elapsed,
            "nodes_cpu_pct": (nodes.cpu_seconds() - ncpu0) / elapsed * 100,
            "load": os.getloadavg()[0]}


async def _settled(d: Daemon, working: int, timeout: float = 120.0) -> None:
    """Wait until exactly ``working`` jobs are working (own turns begun or ended), then a second more."""
    c = await AsyncClient.connect(d.home.paths.socket, client="bench-settle")
    try:
        deadline = time.monotonic() + timeout
        while (await c.call("list", states=["working"], limit=1))["total"] != working:
            if time.monotonic() > deadline:
                raise RuntimeError(f"not {working} jobs working within {timeout:.0f}s")
            await asyncio.sleep(0.2)
    finally:
        await c.close()
    await asyncio.sleep(1.0)


def _rows(home: Home) -> int:
    """Timeline rows the daemon has written (the newest seq): events it took, whole."""
    db = sqlite3.connect(f"file:{home.paths.store}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT coalesce(max(seq), 0) FROM timeline").fetchone()[0])
    finally:
        db.close()


def _row_bytes(home: Home, kind: str) -> float:
    db = sqlite3.connect(f"file:{home.paths.store}?mode=ro", uri=True)
    try:
        got = db.execute("SELECT avg(length(data) + length(job) + length(kind) + 16) FROM timeline WHERE kind = ?",
                         (kind,)).fetchone()[0]
    finally:
        db.close()
    return float(got or 0)


def bench_scale_sim(opts: argparse.Namespace) -> list[Result]:
    """N live workers over opts.nodes node processes: memory per worker, then each kind of event
    at rising rates: the daemon's CPU, commits, push latency, bytes per hop."""
    home = Home(CONFIG, tag="sim")
    out: list[Result] = []
    d = CountedDaemon(home)
    nodes = Nodes(home, opts.nodes)
    try:
        d.start()
        base_rss, have, ids = d.rss_kb(), 0, []
        for n in sorted({10, 100, opts.sim_workers}):
            start = time.monotonic()
            ids += _spawn_on(d, nodes, have, n)
            have = n
            time.sleep(2.0)
            rss = d.rss_kb()
            print(f"  {n} live workers in {time.monotonic() - start:.0f}s: daemon RSS {rss / 1024:.1f} MB", flush=True)
            out.append(Result("scale_sim", f"daemon RSS, {n} live idle workers", rss / 1024, "MB", base_rss / 1024,
                              "0 workers"))
            out.append(Result("scale_sim", f"daemon RSS per live worker, at {n}", (rss - base_rss) / n, "KB"))
            out.append(Result("scale_sim", f"daemon open files / threads, at {n}", len(os.listdir(f"/proc/{d.pid}/fd")),
                              "", len(os.listdir(f"/proc/{d.pid}/task")), "threads"))
        out.append(Result("scale_sim", "one worker relay's PSS (the simulation's cost, not the daemon's)",
                          _relay_pss_kb(d) / 1024, "MB"))
        sample = ids[:: max(1, len(ids) // opts.sample)]
        for kind in ("text", "tool", "turn"):
            for rate in opts.sim_rates:
                got = asyncio.run(_phase(d, nodes, sample, kind, rate, opts.sim_seconds))
                print(f"  {json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in got.items()})}",
                      flush=True)
                out += _phase_results(got)
        for kind, entry in (("text", "text"), ("tool", "tool")):
            out.append(Result("scale_sim", f"store row per {kind} event (data + job + kind + keys)",
                              _row_bytes(home, entry), "B"))
    finally:
        d.stop()
        nodes.close()
        home.remove()
    return out + (_traced(opts) if opts.sim_trace else [])


def _traced(opts: argparse.Namespace) -> list[Result]:
    """What tracemalloc says the daemon holds per live idle worker, by source file (top ten)."""
    home = Home(CONFIG, tag="sim-trace")
    d = CountedDaemon(home, trace=True)
    nodes = Nodes(home, opts.nodes)
    try:
        d.start()
        before = d.traced()
        _spawn_on(d, nodes, 0, opts.sim_trace)
        time.sleep(2.0)
        after = d.traced()
    finally:
        d.stop()
        nodes.close()
        home.remove()
    root = str(BENCH.parent) + "/"
    grown = sorted(((after[f] - before.get(f, 0), f) for f in after), reverse=True)
    total = sum(g for g, _ in grown)
    out = [Result("scale_sim", f"tracemalloc: daemon holds per live worker, at {opts.sim_trace}",
                  total / opts.sim_trace / 1024, "KB")]
    for grew, name in grown[:10]:
        short = name.replace(root, "").split("/lib/python")[-1]
        out.append(Result("scale_sim", f"  of which {short}", grew / opts.sim_trace / 1024, "KB"))
    return out


def _phase_results(got: dict[str, Any]) -> list[Result]:
    what = (f"{got['kind']} at {got['asked']:.0f}/s asked ({got['done']:.0f} written, {got['taken']:.0f} rows, "
            f"load {got['load']:.1f})")
    late = got["p99"] < 0.1
    return [Result("scale_sim", f"{what}: daemon CPU", got["cpu_pct"], "%", got["nodes_cpu_pct"], "nodes' CPU"),
            Result("scale_sim", f"{what}: daemon waiting for a CPU", got["wait_pct"], "%"),
            Result("scale_sim", f"{what}: daemon CPU per timeline row", got["cpu_us_per_event"], "us"),
            Result("scale_sim", f"{what}: SQLite commits", got["commits_s"], "/s"),
            Result("scale_sim", f"{what}: worker line -> push p99", got["p99"], "s", got["p50"], "p50",
                   "< 100 ms", late),
            Result("scale_sim", f"{what}: bytes per worker line / per push", got["line_bytes"], "B",
                   got["push_bytes"], "push"),
            Result("scale_sim", f"{what}: agent_view row bytes pushed", got["row_bytes_s"] / 1024, "KB/s")]


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sim-workers", type=int, default=1000, help="scale_sim: live workers")
    parser.add_argument("--nodes", type=int, default=20, help="scale_sim: simulated machines")
    parser.add_argument("--sim-rates", type=float, nargs="+", default=[100.0, 300.0, 1000.0],
                        help="scale_sim: total events per second asked, in turn")
    parser.add_argument("--sim-seconds", type=float, default=8.0, help="scale_sim: seconds per rate")
    parser.add_argument("--sim-trace", type=int, default=200,
                        help="scale_sim: live workers of a second run under tracemalloc (0: none)")
    parser.add_argument("--sample", type=int, default=40, help="scale_sim: timelines watched for latency")


if __name__ == "__main__":
    from harness import table

    p = argparse.ArgumentParser(prog="scale_sim")
    add_options(p)
    print(table(bench_scale_sim(p.parse_args())))
