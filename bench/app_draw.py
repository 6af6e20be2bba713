"""One app process's draws, for ``bench/app_speed.py``: run as ``python app_draw.py VIEW ROWS RUNS``
with ``ROOST_HOME`` at a running daemon's home and ``PYTHONPATH`` at the code tree to measure (this
tree, or the baseline's, extracted by app_speed.py), so the old and the new code draw the same
rows on the same machine side by side. Prints one JSON object: which ``roost`` ran, and the seconds
of each first draw and each one-row update, each until the app is idle again (painted).

``VIEW`` is ``agent`` (the agent view holding ROWS top-level rows) or ``panel`` (the job screen of
the daemon's first job, whose ROWS subagents the panel lists, in its ``all`` mode).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import time
from typing import Any


class _Clocks:
    """Wall and CPU seconds of each measured step (the app is one thread: its CPU time is what
    the step cost, whatever else the machine runs)."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._start = (0.0, 0.0)

    def start(self) -> None:
        self._start = (time.perf_counter(), time.process_time())

    def stop(self) -> None:
        self.wall.append(time.perf_counter() - self._start[0])
        self.cpu.append(time.process_time() - self._start[1])


def _changed(row: Any, n: int) -> Any:
    """The row with another last line: what a job that said something sends."""
    return dataclasses.replace(row, job=dataclasses.replace(row.job, last_text=f"said something new, {n}"))


async def _update(app: Any, pilot: Any, job: str, n: int, clocks: _Clocks) -> None:
    """One row changed, as a pushed row changes it: the screen told, until idle."""
    from roost.tui.daemon_link import LinkUpdate

    app.link.rows[job] = _changed(app.link.rows[job], n)
    clocks.start()
    app.screen.rows_changed(LinkUpdate(rows={job}))
    await pilot.pause()
    clocks.stop()


async def _agent(app: Any, pilot: Any, wire: list[dict[str, Any]], runs: int) -> dict[str, list[float]]:
    from roost.tui.daemon_link import safe_row

    screen = app.screen
    app.link.rows.clear()
    app.link.rows.update((data["id"], safe_row(data)) for data in wire)
    draws, updates = _Clocks(), _Clocks()
    for n in range(runs):
        screen.table.set_rows([])
        await pilot.pause()
        draws.start()
        screen._sync(None)
        await pilot.pause()
        draws.stop()
        assert screen.table.row_count == len(wire), (screen.table.row_count, len(wire))
        await _update(app, pilot, wire[-1]["id"], n, updates)  # the newest (``list`` is oldest first): in view
    return {"draw": draws.wall, "draw_cpu": draws.cpu, "update": updates.wall, "update_cpu": updates.cpu}


async def _panel(app: Any, pilot: Any, wire: list[dict[str, Any]], runs: int) -> dict[str, list[float]]:
    from roost.tui.daemon_link import LinkUpdate, safe_row
    from roost.tui.job_screen import JobScreen

    root, kids = wire[0], wire[1:]
    await app.push_screen(JobScreen(app.link, app.config, app.clock, root["id"]))
    await pilot.pause()
    screen = app.screen
    screen.panel.mode = "all"
    app.link.rows.update((data["id"], safe_row(data)) for data in wire)
    draws, updates = _Clocks(), _Clocks()
    for n in range(runs):
        screen.panel.show_rows({})  # no rows (the baseline took any iterable of rows)
        await pilot.pause()
        draws.start()
        screen.rows_changed(LinkUpdate(rows={data["id"] for data in wire}))
        await pilot.pause()
        draws.stop()
        assert len(screen.panel.lines) == len(kids), (len(screen.panel.lines), len(kids))
        await _update(app, pilot, kids[0]["id"], n, updates)
    return {"draw": draws.wall, "draw_cpu": draws.cpu, "update": updates.wall, "update_cpu": updates.cpu}


def main(view: str, rows: int, runs: int) -> dict[str, Any]:
    import roost
    from roost.client import Client
    from roost.config import Config
    from roost.paths import resolve
    from roost.tui.app import RoostApp
    from roost.tui.daemon_link import DaemonSource

    paths = resolve(dict(os.environ))
    with Client.connect(paths.socket, client="bench-draw") as client:
        wire = list(client.rows())[: rows + (view == "panel")]

    async def go() -> dict[str, Any]:
        app = RoostApp(DaemonSource(paths), Config())
        async with app.run_test(size=(120, 40)) as pilot:
            while not app.screen.query("#jobs") or app.screen.query_one("#jobs").row_count == 0:
                await pilot.pause(0.05)
            measured = await (_agent if view == "agent" else _panel)(app, pilot, wire, runs)
        return {"roost": os.path.dirname(roost.__file__), **measured}

    return asyncio.run(go())


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
