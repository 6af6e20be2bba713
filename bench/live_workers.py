"""The live-worker cap at scale, with the cap at its default (issue 18): a built-in parent that
spawns 2,500 ``say`` children, and a 1,000-deep chain at ``max_running_jobs = 1``. Real workers;
every half second the daemon's RSS, its workers' (every process below it: the spare included) and
the load average are sampled. Without the cap the issue saw 328 live workers, 22 MB each, and a
load over 200 on 2 cores for the first, 397 live workers and +3.7 GB in 30 s for the second."""

from __future__ import annotations

import argparse
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness import CLK_TCK, Daemon, Home, Result

from roost.config import Config

CAP = Config().max_live_workers


@dataclass
class Peaks:
    """What a sampler saw: the most live workers (the daemon's count, and processes below it), the
    most RSS they held together, the daemon's own, and the highest one-minute load average."""

    workers: int = 0
    processes: int = 0
    workers_mb: float = 0.0
    daemon_mb: float = 0.0
    load: float = 0.0
    samples: int = 0
    stop: threading.Event = field(default_factory=threading.Event)


def _below(pid: int) -> list[int]:
    """Every process below ``pid`` (its children's children too)."""
    out, stack = [], [pid]
    while stack:
        try:
            kids = Path(f"/proc/{stack.pop()}/task").glob("*/children")
            found = [int(k) for path in kids for k in path.read_text().split()]
        except OSError:
            continue
        out += found
        stack += found
    return out


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _workers_cpu(pid: int) -> float:
    """CPU seconds of the daemon's workers that have exited (and been waited for: cutime + cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[13]) + int(fields[14])) / CLK_TCK


def _sample(d: Daemon, peaks: Peaks) -> None:
    with d.client() as c:
        while not peaks.stop.wait(0.5):
            below = _below(d.pid)
            peaks.workers = max(peaks.workers, c.call("status")["workers"])
            peaks.processes = max(peaks.processes, len(below))
            peaks.workers_mb = max(peaks.workers_mb, sum(_rss_mb(p) for p in below))
            peaks.daemon_mb = max(peaks.daemon_mb, _rss_mb(d.pid))
            peaks.load = max(peaks.load, os.getloadavg()[0])
            peaks.samples += 1


def _run(home: Home, start: Callable[[Daemon], Callable[[], bool]],
         timeout: float) -> tuple[float, float, float, Peaks]:
    """Seconds from ``start`` until its check says done, the daemon's CPU seconds over it, its
    workers' (those that exited by then), and the peaks."""
    peaks = Peaks()
    with Daemon(home) as d:
        d.start()
        cpu0, workers0 = d.cpu_seconds(), _workers_cpu(d.pid)
        sampler = threading.Thread(target=_sample, args=(d, peaks), daemon=True)
        sampler.start()
        t0 = time.monotonic()
        done = start(d)
        while not done():
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"not done within {timeout:.0f}s")
            time.sleep(1.0)
        seconds = time.monotonic() - t0
        peaks.stop.set()
        sampler.join()
        return seconds, d.cpu_seconds() - cpu0, _workers_cpu(d.pid) - workers0, peaks


def _results(bench: str, what: str, run: tuple[float, float, float, Peaks]) -> list[Result]:
    seconds, cpu, workers_cpu, peaks = run
    return [
        Result(bench, f"{what}: wall time", seconds, "s"),
        Result(bench, f"{what}: most live workers (status)", peaks.workers, "", target=f"<= {CAP}",
               met=peaks.workers <= CAP),
        Result(bench, f"{what}: most processes below the daemon", peaks.processes, ""),
        Result(bench, f"{what}: their RSS together, at most", peaks.workers_mb, "MB"),
        Result(bench, f"{what}: daemon RSS, at most", peaks.daemon_mb, "MB"),
        Result(bench, f"{what}: daemon CPU", cpu, "s"),
        Result(bench, f"{what}: workers' CPU (those closed by the end)", workers_cpu, "s"),
        Result(bench, f"{what}: 1-min load average, at most", peaks.load, ""),
    ]


def bench_children(opts: argparse.Namespace) -> list[Result]:
    """A built-in parent spawns 2,500 `say` children (defaults: max_live_workers, max_running_jobs)."""
    home = Home(tag="children")
    count = opts.children

    def start(d: Daemon) -> Callable[[], bool]:
        with d.client() as c:
            parent = c.call("spawn", prompt=f"spawn*{count} say hi", cwd=str(home.work))["id"]

        def done() -> bool:
            with d.client() as c:
                kids = list(c.children(parent))
            return len(kids) == count and all(k["state"] == "idle" for k in kids)
        return done

    try:
        return _results("children", f"{count:,} children", _run(home, start, timeout=3600))
    finally:
        home.remove()


def bench_chain(opts: argparse.Namespace) -> list[Result]:
    """A 1,000-deep chain, each job spawned under the last, at max_running_jobs = 1."""
    depth = opts.depth
    home = Home(f"max_running_jobs = 1\nmax_depth = {depth}\n", tag="chain")

    def start(d: Daemon) -> Callable[[], bool]:
        with d.client() as c:
            parent = None
            for level in range(depth):
                parent = c.call("spawn", prompt=f"say level {level}", cwd=str(home.work), parent=parent,
                                lifetime="session")["id"]

        def done() -> bool:
            with d.client() as c:
                return c.call("list", states=["idle"], limit=1)["total"] >= depth
        return done

    try:
        return _results("chain", f"{depth:,}-deep chain", _run(home, start, timeout=3600))
    finally:
        home.remove()
