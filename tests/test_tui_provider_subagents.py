"""Provider-native subagents (Claude Code's ``Task``) in the app: read-only rows of the open job's panel.

Runs the app on the snapshot tests' ``FixedRows`` source (fixed rows, a fixed timeline, events
only when fed), with the job's ``subagent`` entries in its timeline and one more fed live (with the
row the daemon pushes with it, its counts), on a clock moved by hand: a real daemon would need a
Claude Code worker to write such entries (tests/test_claude_driver.py has that).
"""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator

from rich.style import Style

from roost.config import Config
from roost.rules.provider_subagents import READ_ONLY_HINT, is_provider
from roost.tui.agent_view import AgentViewScreen
from roost.tui.app import RoostApp
from roost.tui.job_screen import JobScreen
from roost.tui.looks import Palette
from roost.tui.provider_view import ProviderView
from roost.tui.transcript import entry_text

from test_tui_snapshots import LOGS, NOW, ROOT, ROWS, FixedRows
from tui_helpers import SIZE, notice, panel_labels, press_alone, shown_keys, type_text, until


def sub(seq: int, ident: str, state: str, text: str, title: str, ago: float) -> dict[str, Any]:
    return {"seq": seq, "job": ROOT, "ts": NOW - ago, "kind": "subagent",
            "data": {"id": ident, "title": title, "state": state, "text": text}}


ENTRIES = [
    sub(100, "toolu_01", "working", "count the files under src/", "count the files", ago=30),
    sub(101, "toolu_01", "working", "halfway there", "count the files", ago=20),
    sub(102, "toolu_02", "working", "check the imports", "check imports", ago=25),
    sub(103, "toolu_02", "failed", "no such module", "check imports", ago=5),
    sub(104, "toolu_03", "working", "say hi", "say hi", ago=4),
    sub(105, "toolu_03", "done", "hi", "say hi", ago=3),
]


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def bar_text(screen: JobScreen) -> str:
    return str(screen.jobbar.render())


def with_counts(subagents: int, running: int) -> dict[str, Any]:
    """The root's row as the daemon pushes it once it counted the job's own subagents of ENTRIES."""
    root = next(r for r in ROWS if r["id"] == ROOT)
    return {**root, "provider_subagents": subagents, "provider_running": running}


class Stoppable(FixedRows):
    """Fixed rows that take a stop, saying it stopped the job and its agent's own running subagents."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.stops: list[dict[str, Any]] = []

    async def call(self, op: str, **args: Any) -> Any:
        if op != "stop":
            return await super().call(op, **args)
        self.stops.append(args)
        return {"stopped": 1, "ids": [args["job"]], "subagents": 1, "already": False}


def home_activity(app: RoostApp) -> str:
    return app.screen.table.get_cell(ROOT, "activity").plain


async def test_provider_subagents_are_read_only_rows_of_the_panel_counted_and_aging_out():
    clock = Clock()
    rows = [with_counts(3, 1) if r["id"] == ROOT else r for r in ROWS]
    source = Stoppable(rows, {ROOT: [*LOGS[ROOT], *ENTRIES]})
    app = RoostApp(source, Config(), clock=clock, select=ROOT)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        # home counts them as the job screen does: the row's 6 roost subagents and the agent's own 3
        assert home_activity(app).startswith("9 subagents (5 running)")
        await pilot.press("enter")
        screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen, "the job screen")
        await until(pilot, lambda: screen.loaded, "the transcript")
        panel = screen.panel
        # working and failed rows show, the done one left at once (the hint says where it is)
        labels = panel_labels(screen)
        assert "count the files" in labels and "check imports" in labels and "say hi" not in labels
        assert screen.status.hint == "/subagents to see subagents"
        # the row's own 6 roost subagents (4 running) and the agent's own 3 (1 running)
        assert "9 subagents (5 running)" in bar_text(screen)
        # /subagents lists the done one too; the rows are the provider's, children of the job
        await pilot.press("down")
        assert "say hi" in panel_labels(screen)
        own = [line for line in panel.lines if is_provider(line.row)]
        assert [line.row.id for line in own] == ["toolu_01", "toolu_02", "toolu_03"]
        assert all(line.depth == 1 for line in own)
        panel.cursor = "toolu_01"
        await pilot.pause()
        keys = shown_keys(app)
        assert "m" not in keys and "r" not in keys and "enter" in keys  # no composer, no rename
        assert screen.status.hint == READ_ONLY_HINT
        # x on a running provider row stops it through its parent, the job whose agent runs it
        await press_alone(pilot, "x")
        await until(pilot, lambda: source.stops, "the stop asked")
        assert source.stops == [{"job": ROOT}]
        await until(pilot, lambda: "stopped count the files, with the other subagents" in notice(app), "the notice")
        assert "count the files" in panel_labels(screen)
        # opened: a read-only view of its entries, live
        await pilot.press("enter")
        view = await until(pilot, lambda: isinstance(app.screen, ProviderView) and app.screen, "the provider view")
        assert not view.query("Composer")  # read-only: nothing to write in
        assert any("asked: count the files under src/" in line for line in view.lines())
        assert any("said: halfway there" in line for line in view.lines())
        source.fed.put_nowait({"event": "timeline", "sub": 2,
                               "entry": sub(106, "toolu_01", "done", "42 files", "count the files", ago=0)})
        source.fed.put_nowait({"event": "row", "sub": 1, "row": with_counts(3, 0)})  # what the daemon pushes with it
        await until(pilot, lambda: any("✓ done: 42 files" in line for line in view.lines()), "the live end")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen, "back to the job")
        await until(pilot, lambda: "9 subagents (4 running)" in bar_text(screen), "the count without the one done")
        assert sum(line.row.state.value == "working" for line in panel.lines if is_provider(line.row)) == 0
        # 30 s on: the finished rows leave /subagents too (the roost rows' lifetimes run the same)
        await pilot.press("escape")
        clock.now += 31
        screen.tick()
        await pilot.pause()
        await pilot.press("down")
        assert not any(is_provider(line.row) for line in panel.lines)
        # /subagents all still lists them
        screen.action_enter_panel("all")
        await pilot.pause()
        assert len([line for line in panel.lines if is_provider(line.row)]) == 3
        await pilot.press("escape", "escape")
        await until(pilot, lambda: isinstance(app.screen, AgentViewScreen), "home")
        assert home_activity(app).startswith("9 subagents (4 running)")


def test_the_parents_transcript_reads_each_subagent_entry_as_one_short_line() -> None:
    red, grey = Style(color="red"), Style(color="grey50")
    palette = Palette(text=Style(), muted=grey, primary=Style(), warning=Style(), error=red, success=Style())
    started = entry_text(sub(1, "toolu_9", "working", "read\nevery file " + "x" * 500, "survey", ago=1), palette)
    done = entry_text(sub(2, "toolu_9", "done", "42 files", "survey", ago=0), palette)
    failed = entry_text(sub(3, "toolu_8", "failed", "\x1b[2Jbroke", "t" * 300, ago=0), palette)
    assert started is not None and done is not None and failed is not None
    assert started.plain.startswith("⑂ survey …: read every file x") and len(started.plain) < 200
    assert "\n" not in started.plain and started.style == grey
    assert done.plain == "⑂ survey ✓ done: 42 files"
    assert failed.style == red and "✗ failed" in failed.plain and "\x1b" not in failed.plain
    assert len(failed.plain) < 200



@contextlib.asynccontextmanager
async def idle_parent_screen() -> AsyncIterator[tuple[Any, Stoppable, RoostApp]]:
    """The job screen of an idle job whose agent's own subagent still runs; its source takes stops."""
    root = {**with_counts(1, 1), "state": "idle", "descendants": 0, "running": 0}
    source = Stoppable([root], {ROOT: [*LOGS[ROOT], ENTRIES[0]]})
    app = RoostApp(source, Config(), clock=Clock(), select=ROOT)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("enter")
        screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen, "the job screen")
        await until(pilot, lambda: screen.loaded, "the transcript")
        yield pilot, source, app


async def test_subagents_stop_stops_the_parent_while_only_its_agents_own_subagents_run():
    async with idle_parent_screen() as (pilot, source, app):
        await type_text(pilot, "/subagents stop")
        await pilot.press("enter")
        await until(pilot, lambda: source.stops, "the stop asked")
        assert source.stops == [{"job": ROOT}], "its agent's own subagent stops with it: not 'no subagent is running'"
        await until(pilot, lambda: "stopped 1 subagent" in notice(app), "what the stop did")


async def test_slash_stop_says_it_stopped_the_agents_own_subagents_too():
    async with idle_parent_screen() as (pilot, source, app):
        await type_text(pilot, "/stop")
        await pilot.press("enter")
        await until(pilot, lambda: "stopped this job and 1 subagent of its agent's own" in notice(app), "the notice")
