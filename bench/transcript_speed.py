"""Scrolling a long transcript (issue 20: "under 16 ms a frame"): a job with 10,000 timeline
entries of mixed sizes, opened in the real app (headless ``App.run_test``) on a real daemon.

Each key (PgUp, PgDn, Home, End) and the mouse wheel, many times each: the app's CPU for each frame
it draws and for each press as a whole (its handler, the older page Home or PgUp at the top reads
in from the daemon, every frame until the move settled), beside the same on a job of 100 entries."""

from __future__ import annotations

import argparse
import asyncio
import time

from harness import Daemon, Home, Result, pct, seed_records

#: Entries of the long job, and of the baseline.
ENTRIES = 10_000
BASELINE = 100
#: Presses of each key per run.
PRESSES = 40
FRAME = 0.016


def seed_mixed(home: Home, job_id: str, count: int) -> None:
    """``count`` entries: mostly a line or a paragraph, every 20th a 300-line output (folded),
    every 7th a tool call, every 50th 8 KB of one line (wrapped)."""
    from roost.daemon.storage.store import Store

    store = Store(home.paths.store)
    ts = time.time() - count
    with store.transaction():
        for i in range(count):
            if i % 20 == 0:
                kind, data = "text", {"text": "".join(f"out {i}.{n}: some output of a build\n" for n in range(300))}
            elif i % 50 == 1:
                kind, data = "text", {"text": f"long {i} " + "word " * 1600}
            elif i % 7 == 0:
                kind, data = "tool", {"tool": "shell", "args": {"command": f"grep -rn thing src/{i}"}}
            else:
                kind, data = "text", {"text": f"line {i}: " + "said something about the code. " * (1 + i % 12)}
            store.add_timeline(job_id, kind, data, ts + i * 0.001)
    store.close()


#: The ways of scrolling, as the key (or wheel direction) each sends.
WAYS = {"PgUp": "pageup", "PgDn": "pagedown", "Home": "home", "End": "end", "wheel up": "up", "wheel down": "down"}


def _frames(home: Home, job_id: str, presses: int) -> dict[str, tuple[list[float], list[float]]]:
    """For each way of scrolling: the app's CPU seconds for each press (its handler, any page read
    in, every frame until the move settled) and for each frame drawn (layout and paint of the
    screen: Textual's ``Screen._on_timer_update``). CPU (``time.thread_time``, the app's one
    thread), not wall time: on a shared machine wall time measures the neighbours."""
    from textual import events
    from textual.screen import Screen

    from roost.config import Config
    from roost.tui.app import RoostApp
    from roost.tui.daemon_link import DaemonSource
    from roost.tui.job_screen import JobScreen

    frames: list[float] = []
    original = Screen._on_timer_update

    def timed_update(self: Screen) -> None:  # type: ignore[type-arg]
        start = time.thread_time()
        original(self)
        frames.append(time.thread_time() - start)

    async def go() -> dict[str, tuple[list[float], list[float]]]:
        app = RoostApp(DaemonSource(home.paths), Config())
        out: dict[str, tuple[list[float], list[float]]] = {}
        async with app.run_test(size=(120, 40)) as pilot:
            while not app.screen.query("JobTable") or app.screen.query_one("JobTable").row_count == 0:
                await pilot.pause(0.05)
            screen = JobScreen(app.link, app.config, app.clock, job_id)
            await app.push_screen(screen)
            while not screen.loaded:
                await pilot.pause(0.05)
            await pilot.pause()
            log = screen.transcript

            async def press(way: str) -> None:
                key = WAYS[way]
                if way.startswith("wheel"):
                    kind = events.MouseScrollUp if key == "up" else events.MouseScrollDown
                    log.post_message(kind(log, 1, 1, 0, -1 if key == "up" else 1, 0, False, False, False))
                else:
                    app.post_message(events.Key(key, None))
                await pilot.wait_for_animation()
                await pilot.pause(0.05)
                await pilot.wait_for_animation()

            order = ["PgUp"] * presses + ["PgDn"] * presses + ["Home", "End"] * (presses // 4) \
                + ["wheel up"] * presses + ["wheel down"] * presses
            for way in order:
                frames.clear()
                start = time.thread_time()
                await press(way)
                spent = time.thread_time() - start
                per_press, per_frame = out.setdefault(way, ([], []))
                per_press.append(spent)
                per_frame.extend(frames)
        return out

    Screen._on_timer_update = timed_update  # type: ignore[method-assign]
    try:
        return asyncio.run(go())
    finally:
        Screen._on_timer_update = original  # type: ignore[method-assign]


def bench_transcript(opts: argparse.Namespace) -> list[Result]:
    """Frames while scrolling a 10,000-entry transcript, beside a 100-entry one."""
    homes = {"big": Home(tag="transcript-10k"), "small": Home(tag="transcript-100")}
    out: list[Result] = []
    try:
        frames: dict[str, dict[str, list[float]]] = {}
        for name, home in homes.items():
            job = seed_records(home, 1, kids_per_root=0)[0]
            seed_mixed(home, job, ENTRIES if name == "big" else BASELINE)
            with Daemon(home) as d:
                d.start()
                frames[name] = _frames(home, job, PRESSES)
        for way, (presses, drawn) in frames["big"].items():
            base_presses, base_drawn = frames["small"][way]
            out.append(Result("transcript", f"{ENTRIES:,}-entry transcript, {way}: app CPU per frame (p95)",
                              pct(drawn, 95), "s", pct(base_drawn, 95), f"{BASELINE} entries", "< 16 ms",
                              pct(drawn, 95) < FRAME))
            out.append(Result("transcript", f"{ENTRIES:,}-entry transcript, {way}: app CPU per press, every frame "
                              "and page read in (p95)", pct(presses, 95), "s", pct(base_presses, 95),
                              f"{BASELINE} entries"))
            print(f"  {way}: {len(drawn) / len(presses):.1f} frames a press, frame max {max(drawn) * 1000:.1f} ms, "
                  f"press max {max(presses) * 1000:.1f} ms", flush=True)
    finally:
        for home in homes.values():
            home.remove()
    return out
