"""The app's memory under a flood (issue 20: "an app left open for 20 minutes while a flood ran held
250 MB"; it must stay bounded over an hour). Accelerated: a command job prints an hour's worth of
output as fast as the daemon takes it — 1,000,000 lines, what a build printing 300 lines a second
writes in an hour — while the real app (headless ``App.run_test``) has that job open and follows
it, a second job floods beside it on the agent view, and the app's RSS (``/proc/self/status``
VmRSS) is sampled every second. Bounded means it plateaus: the last sample against the one when a
tenth of the flood had streamed, and the transcript's held entries against its bound."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from harness import Daemon, Home, Result

#: Lines the followed job prints, and how often the app's RSS is read (seconds).
LINES = 1_000_000
SAMPLE_EVERY = 1.0
#: The command: numbered lines of 60 characters, each flushed, as fast as the pipe takes them; a
#: pause of a millisecond every 50 lines makes many entries of a few lines, as a chatty agent does,
#: not a few of 64 KiB: the count of entries is what a leak would grow with.
FLOOD = ("python3 -c \"import sys, time\nfor i in range({n}):\n sys.stdout.write(f'flood {{i}} ' + 'x' * 50 + chr(10))"
         "\n sys.stdout.flush()\n i % 50 or time.sleep(0.001)\"")
CONFIG = '[drivers.sh]\nkind = "command"\ncommand = ["sh", "-c", "{prompt}"]\n'


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def _flood(home: Home, d: Daemon, lines: int) -> tuple[list[tuple[int, int]], int, int]:
    """(entries streamed, RSS KB) samples while the app follows a job printing ``lines``; and the
    transcript's held entries and bytes at the end."""
    from roost.config import Config
    from roost.tui.app import RoostApp
    from roost.tui.daemon_link import DaemonSource
    from roost.tui.entry_text import weight
    from roost.tui.job_screen import JobScreen

    with d.client() as c:
        job = c.call("spawn", prompt=FLOOD.format(n=lines), cwd=str(home.work), driver="sh", title="flood")["id"]
        c.call("spawn", prompt=FLOOD.format(n=lines // 4), cwd=str(home.work), driver="sh", title="beside")

    async def go() -> tuple[list[tuple[int, int]], int, int]:
        app = RoostApp(DaemonSource(home.paths), Config())
        samples: list[tuple[int, int]] = []
        async with app.run_test(size=(120, 40)) as pilot:
            while job not in app.link.rows:
                await pilot.pause(0.05)
            screen = JobScreen(app.link, app.config, app.clock, job)
            await app.push_screen(screen)
            while not screen.loaded:
                await pilot.pause(0.05)
            log = screen.transcript
            while True:
                await pilot.pause(SAMPLE_EVERY)
                samples.append((log.last_seq, rss_kb()))
                row = app.link.rows.get(job)
                if row is not None and row.state.value not in ("queued", "starting", "working"):
                    break
            await pilot.pause(SAMPLE_EVERY)
            samples.append((log.last_seq, rss_kb()))
            held = len(log._entries)
            bytes_held = sum(map(weight, log._entries))
        return samples, held, bytes_held

    return asyncio.run(go())


def bench_app_memory(opts: argparse.Namespace) -> list[Result]:
    """The app's RSS while it follows an hour's worth of output (accelerated): it plateaus."""
    home = Home(CONFIG, tag="app-memory")
    try:
        with Daemon(home) as d:
            d.start()
            started = time.monotonic()
            samples, held, bytes_held = _flood(home, d, opts.flood_lines)
            took = time.monotonic() - started
    finally:
        home.remove()
    last_seq = samples[-1][0]
    tenth = next(rss for seq, rss in samples if seq >= last_seq / 10)
    peak, last = max(rss for _, rss in samples), samples[-1][1]
    print(f"  {opts.flood_lines:,} lines in {took:.0f} s: {last_seq:,} entries; RSS MB at each tenth: "
          + ", ".join(f"{next(r for s, r in samples if s >= last_seq * k / 10) / 1024:.0f}" for k in range(1, 11))
          + f"; peak {peak / 1024:.0f} MB; transcript holds {held} entries, {bytes_held / 1024:.0f} KiB", flush=True)
    return [Result("app_memory", f"app RSS after an hour's output ({opts.flood_lines:,} lines, {last_seq:,} entries)"
                   " streamed to the open job", last / 1024, "MB", tenth / 1024, "after a tenth of it",
                   "plateau: ≤ 1.25 × a tenth in", last <= 1.25 * tenth)]
