"""What the app looks like (pytest-textual-snapshot), on fixed rows and a fixed clock.

A live daemon gives random ids and real times, so these shots run the app on ``FixedRows``: an
in-memory source with the same interface the app uses for the daemon, fed one fixed set of jobs.
Behaviour is tested against the real daemon in test_tui_pilot.py and test_e2e_tmux.py.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from roost.config import Config
from roost.models import Job, Row, State
from roost.rules.counts import work_counts
from roost.tui.app import RoostApp

NOW = 1_800_000_000.0
ROOT = "r7kp"


def row(job_id: str, title: str, state: State, *, parent: str | None = None, age: float = 60.0,
        since: float = 20.0, up: bool = True, text: str = "", descendants: int = 0, running: int = 0,
        parent_open: bool = True, **job: Any) -> dict[str, Any]:
    """A wire row created ``age`` seconds before NOW, in ``state`` for ``since`` seconds."""
    record = Job(id=job_id, title=title, driver="builtin", cwd="~/src/parser", state=state, state_since=NOW - since,
                 created_at=NOW - age, updated_at=NOW - since, parent=parent, pid=4000 if up else None,
                 reaped=not up, last_text=text, **job)
    return Row(record, parent_open=parent_open, descendants=descendants, running_descendants=running).to_wire()


ROWS = [
    row(ROOT, "refactor the parser", State.WORKING, age=95, text="planning the refactor", descendants=6,
        running=4, usage={"input": 18200, "output": 2400, "context_tokens": 41000, "context_window": 200000}),
    row("c1gr", "read the grammar", State.WORKING, parent=ROOT, age=90, text="reading grammar.ebnf"),
    row("c2ts", "write tests", State.WORKING, parent=ROOT, age=89, text="writing tests for the lexer",
        descendants=2, running=2),
    row("g1fx", "build fixtures", State.WORKING, parent="c2ts", age=80, text="fixtures for 12 cases",
        descendants=1, running=1),
    row("g2sm", "generate samples", State.WORKING, parent="g1fx", age=70, text="sample 7 of 20"),
    row("c3qc", "quick check", State.DONE, parent=ROOT, age=88, since=5, up=False, text="quick check passed"),
    row("c4ln", "lint the grammar", State.FAILED, parent=ROOT, age=87, since=10, up=False,
        text="ruff: 3 errors in parser.py", reason="the turn failed: ruff exited 1"),
    row("c5sp", "old spike", State.DONE, parent=ROOT, age=86, since=70, up=False, text="spike notes written"),
    row("w2rv", "review the release notes", State.WAITING, age=400, since=30,
        text="which version should the notes cover?", descendants=1),
    row("w2c1", "find the changelog", State.DONE, parent="w2rv", age=390, since=300, up=False, text="found it"),
    row("b3db", "migrate the database", State.BLOCKED, age=3600, since=600, up=False,
        text="need credentials for the staging database"),
    row("h4hi", "say hello", State.IDLE, age=7200, since=7100, text="hello from the built-in agent",
        pinned=True),
    row("d5cl", "clean up old branches", State.DONE, age=90000, since=86000, up=False,
        text="deleted 14 merged branches", descendants=1, running=1),
    row("o6or", "prune the cache", State.WORKING, parent="d5cl", age=4000, text="pruned 3.1 GB so far",
        parent_open=False),
    row("f7fl", "flaky build", State.FAILED, age=500, since=480, up=False, text="building…",
        reason="its worker died: exit 2"),
    row("q8qu", "index the docs", State.QUEUED, age=3, since=3, up=False),
    row("s9st", "rewrite the \x1b[31mREADME\x1b[0m", State.STOPPED, age=1000, since=900, up=False,
        text="halfway", reason="stopped by a person"),
]


def entry(seq: int, kind: str, **data: Any) -> dict[str, Any]:
    return {"seq": seq, "job": ROOT, "ts": NOW - 95 + seq, "kind": kind, "data": data}


LOGS = {ROOT: [
    entry(1, "spawned", parent=None, driver="builtin", lifetime="task", by="person"),
    entry(2, "worker", pid=4000, resumed=False),
    entry(3, "prompt", text="refactor the parser: split the lexer out\nkeep the public API", run=1),
    entry(4, "state", state="working"),
    entry(5, "text", text="planning the refactor"),
    *[entry(6 + n, "tool", name="roost_spawn", args={"prompt": title}, result=f"spawned {job_id}", error=False)
      for n, (job_id, title) in enumerate([("c1gr", "read the grammar"), ("c2ts", "write tests"),
                                           ("c3qc", "quick check"), ("c4ln", "lint the grammar")])],
    entry(10, "reports", reports=[{"child": "c3qc", "title": "quick check", "state": "done", "kind": "report",
                                   "text": "quick check passed"}], steer=False),
    entry(11, "text", text="noted: the quick check passed; waiting for the tests"),
    entry(12, "reports", reports=[{"child": "c4ln", "title": "lint the grammar", "state": "failed",
                                   "kind": "report", "text": "ruff: 3 errors in parser.py"}], steer=False),
]}


class FixedRows:
    """An in-memory JobSource: fixed rows and timelines, and events only when fed some.

    Its agent view holds every row (the rules pick what to list) and a job's subtree adds none."""

    def __init__(self, rows: list[dict[str, Any]], logs: dict[str, list[dict[str, Any]]],
                 diffs: dict[str, dict[str, Any]] | None = None) -> None:
        self.rows = rows
        self.logs = logs
        self.diffs = diffs or {}
        self.subs = itertools.count(1)
        self.fed: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    async def connect(self) -> None:
        return None

    async def subscribe(self, what: str, **args: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        items = self.rows if what == "agent_view" else []
        tally = Counter((State(r["state"]), r["parent"] is not None) for r in self.rows)  # as the daemon counts
        return {"sub": next(self.subs), "count": len(items), "more": 0,
                "counts": work_counts(tally, slots_used=0, cap=0).to_wire()}, items

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            yield await self.fed.get()

    def store_notice(self) -> str | None:
        return None

    def sandbox_notice(self) -> str | None:
        return None

    def end_reason(self) -> str:
        return "fixed rows never end"

    async def call(self, op: str, **args: Any) -> Any:
        if op == "logs":
            entries = self.logs.get(args["job"], [])
            return {"entries": entries, "more": False, "oldest": entries[0]["seq"] if entries else None,
                    "newest": entries[-1]["seq"] if entries else None}
        if op == "show":
            return next(r for r in self.rows if r["id"] == args["job"])
        if op == "diff":
            return self.diffs[args["job"]]
        if op in ("attach", "seen", "release", "unsubscribe"):
            return None
        raise AssertionError(f"a snapshot asked the daemon to {op}")

    async def close(self) -> None:
        return None


def fixed_app(theme: str = "textual-dark", select: str | None = None) -> RoostApp:
    return RoostApp(FixedRows(ROWS, LOGS), Config(theme=theme), clock=lambda: NOW, select=select)


def settle(*keys: str) -> Callable[[Pilot], Awaitable[None]]:
    """Wait for the rows, press ``keys``, and stop the text cursor blinking so the shot is stable."""

    async def run(pilot: Pilot) -> None:
        await pilot.pause()
        await pilot.press(*keys)
        await pilot.pause()
        for box in pilot.app.screen.query(Input):
            box.cursor_blink = False
        await pilot.pause()

    return run


SIZES = [pytest.param((120, 40), id="120x40"), pytest.param((80, 24), id="80x24")]


@pytest.mark.parametrize("size", SIZES)
def test_the_agent_view(snap_compare, size):
    assert snap_compare(fixed_app(), run_before=settle(), terminal_size=size)


def test_the_agent_view_in_the_light_theme(snap_compare):
    assert snap_compare(fixed_app("textual-light"), run_before=settle(), terminal_size=(120, 40))


@pytest.mark.parametrize("size", SIZES)
def test_a_job_screen_with_a_three_level_panel_and_the_footer_hint(snap_compare, size):
    assert snap_compare(fixed_app(select=ROOT), run_before=settle("enter"), terminal_size=size)


def test_the_panel_selected_with_down_lists_recently_finished_rows(snap_compare):
    assert snap_compare(fixed_app(select=ROOT), run_before=settle("enter", "down", "down"), terminal_size=(120, 40))


@pytest.mark.parametrize("size", SIZES)
def test_subagents_all(snap_compare, size):
    keys = ("enter", *"/subagents", "space", *"all", "enter")
    assert snap_compare(fixed_app(select=ROOT), run_before=settle(*keys), terminal_size=size)


def test_a_job_screen_in_the_light_theme(snap_compare):
    assert snap_compare(fixed_app("textual-light", select=ROOT), run_before=settle("enter", "down"),
                        terminal_size=(120, 40))


def test_the_peek_pane(snap_compare):
    assert snap_compare(fixed_app(select=ROOT), run_before=settle("space"), terminal_size=(120, 40))


@pytest.mark.parametrize("size", SIZES)
def test_the_help_overlay(snap_compare, size):
    assert snap_compare(fixed_app(), run_before=settle("question_mark"), terminal_size=size)


def test_the_filter_by_state(snap_compare):
    assert snap_compare(fixed_app(), run_before=settle("slash", *"s:failed"), terminal_size=(120, 40))


DIFF_JOB = "wt9k"
DIFF_TEXT = """diff --git a/greeting.py b/greeting.py
index 3b18e51..a8f1c2d 100644
--- a/greeting.py
+++ b/greeting.py
@@ -1,3 +1,4 @@
 def greet(name):
-    return "hi " + name
+    return f"hello, {name}"
+
diff --git a/notes.txt b/notes.txt
new file mode 100644
--- /dev/null
+++ b/notes.txt
@@ -0,0 +1 @@
+say hello, not hi
"""


def test_the_diff_view(snap_compare):
    """`d` on a job that works in a worktree of its own: its files with their counts, and the
    selected file's diff in colour (the daemon's `diff` op, answered here by the fixed source)."""
    rows = [row(DIFF_JOB, "change the greeting", State.DONE, age=300, since=60, up=False, text="greeting changed",
                repo="~/src/app", worktree="~/.local/state/roost/worktrees/wt9k", branch=f"roost/{DIFF_JOB}",
                base="main")]
    page = {"job": DIFF_JOB, "branch": f"roost/{DIFF_JOB}", "base": "main", "size": len(DIFF_TEXT), "offset": 0,
            "files": [{"path": "greeting.py", "added": 2, "deleted": 1}, {"path": "notes.txt", "added": 1, "deleted": 0}],
            "files_more": 0, "text": DIFF_TEXT, "next": None}
    app = RoostApp(FixedRows(rows, {}, {DIFF_JOB: page}), Config(), clock=lambda: NOW, select=DIFF_JOB)
    assert snap_compare(app, run_before=settle("d"), terminal_size=(100, 24))


ASKER = "c8ask"
QUESTION = "Claude Code asks to use Bash: rm -rf build/ && make release"


def test_a_waiting_claude_job_peeked_shows_its_question_and_counts_its_own_subagents(snap_compare):
    """Its row says what it asks (a permission request), not its last words, and counts the
    agent's own subagents (one still runs: a waiting job may still run them); space shows the
    question under its newest entries."""
    rows = [row(ASKER, "release the parser", State.WAITING, age=300, since=40, text="I will rebuild from scratch",
                question=QUESTION, provider_subagents=2, provider_running=1, driver_opts={"kind": "claude"}),
            row("h4hi", "say hello", State.IDLE, age=7200, since=7100, text="hello from the built-in agent")]
    logs = {ASKER: [
        {"seq": 1, "job": ASKER, "ts": NOW - 300, "kind": "prompt", "data": {"text": "release the parser", "run": 1}},
        {"seq": 3, "job": ASKER, "ts": NOW - 60, "kind": "text", "data": {"text": "I will rebuild from scratch"}},
        {"seq": 4, "job": ASKER, "ts": NOW - 40, "kind": "state", "data": {"state": "waiting", "question": QUESTION}},
    ]}
    app = RoostApp(FixedRows(rows, logs), Config(), clock=lambda: NOW, select=ASKER)
    assert snap_compare(app, run_before=settle("space"), terminal_size=(120, 24))
