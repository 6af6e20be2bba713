"""The app's own costs (issue 20): CPU while nothing happens, and drawing a 1,000-row agent view.

Both run the real app headless (``App.run_test``) on a real daemon over seeded records. The idle
figure is the app process's CPU (``time.process_time``) over a stretch with nothing happening,
beside the same app on a store whose rows are all finished (no age grows: no timer at all), and
the timer ticks it took, by timer. The render figure is a full draw of the agent view (every row
added, then the screen painted: until the app is idle again) of 1,000 rows, beside 10 rows.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter

from harness import Daemon, Home, Result, median, seed_records

IDLE_SECONDS = 10.0
IDLE_ROWS = 220


def _rewrite(home: Home, finish: bool = False, older: float = 0.0) -> None:
    """Every seeded record made finished (``finish``: no age grows) or ``older`` seconds older."""
    from roost.daemon.store import Store
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


def _render(d: Daemon, rows: int, runs: int = 5) -> list[float]:
    """Seconds for full draws of the agent view holding ``rows`` rows (all the daemon's records,
    put in the link as if it had sent them), each until the app is idle again."""
    from roost.config import Config
    from roost.tui.app import RoostApp
    from roost.tui.daemon_link import DaemonSource, safe_row

    with d.client() as c:
        wire = list(c.rows())[:rows]

    async def go() -> list[float]:
        app = RoostApp(DaemonSource(d.home.paths), Config())
        out = []
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.screen
            while not screen.query("JobTable") or screen.query_one("JobTable").row_count == 0:
                await pilot.pause(0.05)
            app.link.rows.clear()
            app.link.rows.update((data["id"], safe_row(data)) for data in wire)
            for _ in range(runs):
                screen.table.clear()
                screen._cells.clear()
                await pilot.pause()
                start = time.perf_counter()
                screen._sync(None)
                await pilot.pause()
                out.append(time.perf_counter() - start)
                assert screen.table.row_count == len(wire), (screen.table.row_count, len(wire))
        return out

    return asyncio.run(go())


def bench_app(opts: argparse.Namespace) -> list[Result]:
    """The app idle (CPU, timer ticks) and a full draw of 1,000 rows, each beside a baseline."""
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
    big, small = Home(tag="app-1000"), Home(tag="app-10")
    try:
        seed_records(big, 1000, kids_per_root=0)
        seed_records(small, 10, kids_per_root=0)
        with Daemon(big) as dbig, Daemon(small) as dsmall:
            dbig.start()
            dsmall.start()
            s, b = [], []
            for _ in range(2):
                s += _render(dbig, 1000)
                b += _render(dsmall, 10)
        out.append(Result("app", "agent view: full draw of 1,000 rows until idle (median)", median(s), "s",
                          median(b), "10 rows", "< 50 ms", median(s) < 0.05))
    finally:
        big.remove()
        small.remove()
    return out
