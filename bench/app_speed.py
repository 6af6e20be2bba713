"""The app's own costs (issue 20): CPU while nothing happens, and drawing a 1,000-row agent view.

Both run the real app headless (``App.run_test``) on a real daemon over seeded records. The idle
figure is the app process's CPU (``time.process_time``) over a stretch with nothing happening,
beside the same app on a store whose rows are all finished (no age grows: no timer at all), and
the timer ticks it took, by timer. The render figures are the first draw and a one-row update of the agent view and of the subagent panel at 100,
1,000 and 10,000 rows (``bench/app_draw.py``), this code beside BASELINE's, each in its own process
on the same daemon.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from harness import Daemon, Home, Result, median, seed_records

IDLE_SECONDS = 10.0
IDLE_ROWS = 220


def _rewrite(home: Home, finish: bool = False, older: float = 0.0) -> None:
    """Every seeded record made finished (``finish``: no age grows) or ``older`` seconds older."""
    from roost.daemon.storage.store import Store
    from roost.models import State

    store = Store(home.paths.store)
    with store.transaction():
        for job in store.jobs():
            if finish:
                job.state = State.DONE
            job.created_at -= older
            job.state_since -= older
            store.save_job(job)
    store.close()


def _idle(home: Home, seconds: float) -> tuple[float, Counter[str]]:
    """CPU % of the app over ``seconds`` once its rows are drawn, and its timer ticks then."""
    from textual.timer import Timer

    from roost.config import Config
    from roost.tui.app import RoostApp
    from roost.tui.daemon_link import DaemonSource

    counted: Counter[str] = Counter()
    original = Timer._tick

    async def tick(self: Timer, *, next_timer: float, count: int) -> None:
        counted[f"{self.name}@{type(self.target).__name__}"] += 1
        await original(self, next_timer=next_timer, count=count)

    async def go() -> float:
        app = RoostApp(DaemonSource(home.paths), Config())
        async with app.run_test(size=(120, 40)) as pilot:
            while not app.screen.query("JobTable") or app.screen.query_one("JobTable").row_count < 200:
                await pilot.pause(0.05)
            await pilot.pause(1.0)
            counted.clear()
            c0, t0 = time.process_time(), time.monotonic()
            await asyncio.sleep(seconds)
            return (time.process_time() - c0) / (time.monotonic() - t0) * 100

    Timer._tick = tick  # type: ignore[method-assign]
    try:
        return asyncio.run(go()), counted
    finally:
        Timer._tick = original  # type: ignore[method-assign]


#: The code the draws are measured beside: main before the views kept their rows by the rows that
#: changed (the agent view already a RowTable; the DataTable before it was 47c031a).
BASELINE = "0e564f2"
#: Row counts drawn, and the runs at each.
DRAW_ROWS = {100: 5, 1000: 5, 10_000: 3}


def _old_tree() -> Path:
    """BASELINE's code, extracted (``git archive``) to a temporary directory."""
    root = Path(__file__).resolve().parents[1]
    tree = Path(tempfile.mkdtemp(prefix="roost-bench-baseline-"))
    archive = subprocess.run(["git", "-C", str(root), "archive", BASELINE, "roost"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def _draws(home: Home, tree: Path, view: str, rows: int, runs: int) -> dict[str, list[float]]:
    """``bench/app_draw.py`` in its own process on ``tree``'s code: its first draws and one-row updates."""
    env = {**home.env, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("app_draw.py")), view, str(rows), str(runs)],
                         env=env, capture_output=True, text=True, timeout=1200)
    if out.returncode:
        raise RuntimeError(f"app_draw.py {view} {rows} on {tree} failed:\n{out.stderr[-3000:]}")
    measured = json.loads(out.stdout.splitlines()[-1])
    assert Path(measured["roost"]).parent == tree, (measured["roost"], tree)  # the code meant ran
    return measured


def _bench_draws() -> list[Result]:
    """First draw and one-row update of the agent view and of the subagent panel at 100, 1,000
    and 10,000 rows, this code beside BASELINE's, each in a process of its own."""
    new, old = Path(__file__).resolve().parents[1], _old_tree()
    out: list[Result] = []
    try:
        for view, name in (("agent", "agent view"), ("panel", "subagent panel")):
            updates: dict[int, float] = {}
            for rows, runs in DRAW_ROWS.items():
                home = Home(tag=f"app-{view}-{rows}")
                try:
                    seed_records(home, rows + (view == "panel"), kids_per_root=0 if view == "agent" else rows)
                    with Daemon(home) as d:
                        d.start()
                        now, then = _draws(home, new, view, rows, runs), _draws(home, old, view, rows, runs)
                finally:
                    home.remove()
                draw, cpu = median(now["draw"]), median(now["draw_cpu"])
                out.append(Result("app", f"{name}: first draw of {rows:,} rows until idle, wall (median of {runs})",
                                  draw, "s", median(then["draw"]), "main before"))
                out.append(Result("app", f"{name}: the same, the app's CPU time", cpu, "s", median(then["draw_cpu"]),
                                  "main before", "< 50 ms" if rows == 1000 else "", cpu < 0.05 if rows == 1000 else None))
                updates[rows] = median(now["update_cpu"])
                out.append(Result("app", f"{name}: one row changed, {rows:,} rows, until idle, wall", median(now["update"]),
                                  "s", median(then["update"]), "main before"))
                out.append(Result("app", f"{name}: the same, the app's CPU time", updates[rows], "s",
                                  median(then["update_cpu"]), "main before"))
            out.append(Result("app", f"{name}: one-row update CPU at 10,000 rows beside at 100", updates[10_000], "s",
                              updates[100], "100 rows", "< 2x", updates[10_000] < 2 * updates[100]))
    finally:
        shutil.rmtree(old, ignore_errors=True)
    return out


def bench_app(opts: argparse.Namespace) -> list[Result]:
    """The app idle (CPU, timer ticks), beside a baseline; the draws (``_bench_draws``) beside BASELINE."""
    homes = {"young": Home(tag="app-young"), "old": Home(tag="app-old"), "done": Home(tag="app-done")}
    out: list[Result] = []
    try:
        for home in homes.values():
            seed_records(home, IDLE_ROWS, kids_per_root=0)  # a fifth idle: their ages grow
        _rewrite(homes["old"], older=3600.0)  # "1h": the next change is an hour away
        _rewrite(homes["done"], finish=True)
        cpu: dict[str, list[float]] = {name: [] for name in homes}
        ticks: dict[str, Counter[str]] = {name: Counter() for name in homes}
        for _ in range(2):
            for name, home in homes.items():
                with Daemon(home) as d:
                    d.start()
                    percent, counted = _idle(home, IDLE_SECONDS)
                cpu[name].append(percent)
                ticks[name] += counted
        what = f"app CPU idle, {IDLE_ROWS} jobs ({IDLE_ROWS // 5} idle: their ages grow), {IDLE_SECONDS:g} s"
        out.append(Result("app", what + ", ages an hour and more", median(cpu["old"]), "%", median(cpu["done"]),
                          "every row finished", "< 1 %", median(cpu["old"]) < 1.0))
        out.append(Result("app", what + ", the rows in view under a minute old (an age in seconds)",
                          median(cpu["young"]), "%", median(cpu["done"]), "every row finished"))
        for name in homes:
            print(f"  timer ticks per {IDLE_SECONDS:g} s idle, {name}: {dict((k, n // 2) for k, n in ticks[name].items())}",
                  flush=True)
    finally:
        for home in homes.values():
            home.remove()
    return out + _bench_draws()
