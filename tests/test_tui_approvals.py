"""Approvals in the app, in process: what a waiting job's approval shows (row, panel, peek, the job
screen's block) at 60, 80 and 100 columns, the keys that answer it, and the rules that keep text
from ever approving (a burst, a paste, the composer's focus, a key typed ahead of the request).

The app runs on ``FixedRows`` fed rows, as the snapshot tests do; ``Answering`` records what the
app asks the daemon, so each test asserts on the very call (the approval id it names) or on its
absence. tests/test_e2e_tmux.py runs the same keys against the real daemon and built-in agent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from textual import events
from textual.pilot import Pilot

from roost.config import Config
from roost.models import State
from roost.tui.agent_view import AgentViewScreen
from roost.tui.app import RoostApp
from roost.tui.approval_keys import ANSWER_GRACE
from roost.tui.approval_text import BLOCK_CHARS
from roost.tui.composer import DENY_HINT
from roost.tui.dialogs import AnswerBox
from roost.tui.help_screen import key_lines
from roost.tui.job_screen import JobScreen

from test_tui_snapshots import LOGS, NOW, ROOT, ROWS, FixedRows, row
from tui_helpers import answer, burst, cell, keys_of, notice, press_alone, until

JOB = "a1ap"
COMMAND = "echo pwned > pwned.txt && rm -rf build/"
CWD = "/home/me/src/parser"
SHELL = {"id": "ap-shell", "tool": "shell", "what": {"command": COMMAND, "cwd": CWD},
         "description": "List the files", "asked_at": NOW - 12}
EDIT = {"id": "ap-edit", "tool": "Edit", "asked_at": NOW - 5,
        "what": {"path": f"{CWD}/lexer.py", "diff": "--- a/lexer.py\n+++ b/lexer.py\n@@ -1,2 +1,2 @@\n-import re\n"
                 "+import regex as re\n keep = 1\n" + "".join(f"+line {n}\n" for n in range(20))}}
FETCH = {"id": "ap-fetch", "tool": "WebFetch", "what": {"url": "https://example.com/spec"}, "asked_at": NOW - 3}


def waiting(*approvals: dict[str, Any], job: str = JOB, **fields: Any) -> dict[str, Any]:
    return row(job, "clean the build", State.WAITING, age=100, since=12, text="about to clean",
               approvals=list(approvals), **fields)


async def settled(pilot: Pilot, app: RoostApp) -> None:
    """Until no key waits out its single-press window and every request it made has run: then
    whatever the keys were going to do is done (the event, not a guess at how long it takes)."""
    await pilot.pause()
    await until(pilot, lambda: app.router._pending is None
                and not any(w.group == "requests" and not w.is_finished for w in app.workers),
                "the keys handled and their requests made")


class Answering(FixedRows):
    """Fixed rows that take the calls a person's keys make, and keep them."""

    def __init__(self, rows: list[dict[str, Any]], logs: dict[str, list[dict[str, Any]]] = LOGS) -> None:
        super().__init__(rows, logs)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call(self, op: str, **args: Any) -> Any:
        if op in ("answer_approval", "send"):
            self.calls.append((op, args))
            return {"outcome": "denied", "job": args.get("job")} if op == "send" else {}
        return await super().call(op, **args)

    def feed(self, data: dict[str, Any]) -> None:
        """A pushed row, as the daemon sends one on the agent view's subscription (the first)."""
        self.fed.put_nowait({"event": "row", "sub": 1, "row": data})

    def answers(self) -> list[dict[str, Any]]:
        return [args for op, args in self.calls if op == "answer_approval"]


def app_on(source: Answering, select: str = JOB) -> RoostApp:
    return RoostApp(source, Config(theme="textual-dark"), clock=lambda: NOW, select=select)


async def ready(pilot: Pilot, app: RoostApp, job: str = JOB) -> AgentViewScreen:
    screen = await until(pilot, lambda: isinstance(app.screen, AgentViewScreen) and job in app.screen.table.rows
                         and app.screen.table.selected_id() == job and app.screen, f"{job} selected")
    await pilot.pause(ANSWER_GRACE + 0.05)  # the request has been on screen long enough to be read
    return screen


@asynccontextmanager
async def running(*rows: dict[str, Any], size: tuple[int, int] = (100, 30)) -> AsyncIterator[
        tuple[Pilot, RoostApp, Answering]]:
    """The app on ``rows``, the first selected and its request on screen long enough to answer."""
    source = Answering(list(rows))
    app = app_on(source, select=rows[0]["id"])
    async with app.run_test(size=size) as pilot:
        await ready(pilot, app, rows[0]["id"])
        yield pilot, app, source


async def open_it(pilot: Pilot, app: RoostApp) -> JobScreen:
    await pilot.press("enter")
    screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen.loaded and app.screen,
                         "the job screen")
    await until(pilot, lambda: screen.approval_block.shown is not None, "the approval block")
    return screen


def agent_view(app: RoostApp) -> AgentViewScreen:
    assert isinstance(app.screen, AgentViewScreen)
    return app.screen


def peek_text(app: RoostApp) -> str:
    return str(app.screen.query_one("#peek").render())


def footer_keys(app: RoostApp) -> dict[str, str]:
    return {key: b.binding.description for key, b in app.screen.active_bindings.items() if b.enabled and b.binding.show}


# -- what it shows -----------------------------------------------------------------------------------
@pytest.mark.parametrize("width", [60, 80, 100])
async def test_the_row_shows_the_mark_tool_and_command_cut_to_fit_and_the_top_bar_counts(width):
    async with running(waiting(SHELL, EDIT), *ROWS[:2], size=(width, 30)) as (pilot, app, _):
        screen = agent_view(app)
        shown = cell(app, JOB, "activity")
        column = next(c for c in screen.table.columns if c.key == "activity")
        assert shown.startswith("⚑ shell: echo") and shown.endswith(" (+1)"), shown
        assert len(shown) <= column.width
        assert sum(c.width + 2 for c in screen.table.columns) + 2 <= width, "every column on screen"
        assert COMMAND.startswith(shown.removeprefix("⚑ shell: ").removesuffix(" (+1)").rstrip("…"))
        assert "⚑ 2 approvals" in str(screen.topbar.render()) or width < 80  # 60 columns cut the bar
        assert {"y": "approve", "Y": "approve for job", "N": "deny"}.items() <= footer_keys(app).items()
        assert {("y", "approve"), ("Y", "approve for job"), ("N", "deny")} <= set(key_lines(screen)), "in ?"


@pytest.mark.parametrize("width", [60, 80, 100])
async def test_peek_says_exactly_what_it_asks_to_run_with_the_models_words_marked(width):
    rows = [waiting(SHELL), waiting(EDIT, job="e2ed"), waiting(FETCH, job="f3fe")]
    async with running(*rows, size=(width, 40)) as (pilot, app, _):
        screen = agent_view(app)
        await pilot.press("space")

        async def peek(job: str) -> str:
            screen.table.move_cursor(row=screen.table.get_row_index(job))
            text = await until(pilot, lambda: f"[{job}]" in str(screen.peek.border_title) and "it asks"
                               in peek_text(app) and peek_text(app), f"the peek of {job}")
            return " ".join(text.split())

        flat = await peek(JOB)
        assert f"⚑ shell · it asks to run: {COMMAND} in {CWD}" in flat
        assert "the model says: “List the files”" in flat
        flat = await peek("e2ed")
        assert f"⚑ Edit · it asks to edit: {CWD}/lexer.py" in flat and "-import re +import regex as re" in flat
        assert "+line 5" not in flat and "more lines of the diff" in flat, "peek shows the diff's first lines"
        assert "it asks to fetch: https://example.com/spec" in await peek("f3fe")


@pytest.mark.parametrize("width", [60, 80, 100])
async def test_the_job_screen_shows_the_whole_request_above_the_composer_and_what_enter_does(width):
    long = "python3 -c 'print(1)' " + " ".join(f"--flag-{n}" for n in range(60))
    asks = waiting({**SHELL, "what": {"command": long, "cwd": CWD}}, EDIT)
    async with running(asks, size=(width, 40)) as (pilot, app, _):
        screen = await open_it(pilot, app)
        body = " ".join(str(screen.approval_block.body.render()).split())
        assert f"it asks to run: {long} in {CWD}" in body, "the whole command, not cut"
        assert "the model says: “List the files”" in body
        assert "1 more after it" in screen.approval_block.border_title
        assert screen.composer.border_title == DENY_HINT
        assert screen.approval_block.region.y + screen.approval_block.region.height <= screen.composer.region.y
        assert footer_keys(app).get("up") == "answer the request"
        await pilot.press("up")
        assert {("y", "approve"), ("Y", "approve for job"), ("N", "deny")} <= set(key_lines(screen)), "in ?"


async def test_the_panel_shows_a_subagents_request_and_answers_it():
    child = {**SHELL, "id": "ap-child", "what": {"command": "make clean", "cwd": CWD}}
    rows = [ROWS[0], row("c9ap", "rebuild it", State.WAITING, parent=ROOT, age=50, since=12, approvals=[child]),
            *ROWS[1:4]]
    source = Answering(rows)
    app = app_on(source, select=ROOT)
    async with app.run_test(size=(80, 30)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, AgentViewScreen) and app.screen.table.selected_id() == ROOT,
                    "the root selected")
        await pilot.press("enter")
        screen = await until(pilot, lambda: isinstance(app.screen, JobScreen) and app.screen.loaded and app.screen,
                             "the job screen")
        await pilot.press("down")
        while screen.panel.cursor != "c9ap":
            await pilot.press("down")
        rendered = str(screen.panel.render())
        assert "⚑ shell: make clean" in rendered
        assert footer_keys(app).get("y") == "approve"
        await pilot.pause(ANSWER_GRACE)
        await press_alone(pilot, "y")
        assert source.answers() == [{"approval": "ap-child", "decision": "once"}]


async def test_a_request_of_the_agents_own_subagent_shows_on_its_row_and_is_answered_there():
    asks = {**SHELL, "id": "ap-task", "tool": "Bash", "what": {"command": "ls -la", "cwd": CWD}, "subagent": "toolu_1"}
    said = {"seq": 1, "job": JOB, "ts": NOW - 30, "kind": "subagent",
            "data": {"id": "toolu_1", "title": "explore the repo", "state": "working", "text": "looking around"}}
    source = Answering([waiting(asks)], logs={JOB: [said]})
    app = app_on(source)
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot, app)
        screen = await open_it(pilot, app)
        body = " ".join(str(screen.approval_block.body.render()).split())
        assert "asked by the agent's own subagent explore the repo [toolu_1]" in body
        await until(pilot, lambda: screen.panel.lines, "the subagent's row")
        await pilot.press("down")
        assert screen.panel.cursor == "toolu_1"
        assert "⚑ Bash: ls -la" in str(screen.panel.render()), "on the subagent's row, not read-only"
        await pilot.pause(ANSWER_GRACE)
        await press_alone(pilot, "N")
        box = await until(pilot, lambda: isinstance(app.screen, AnswerBox) and app.screen, "the reason box")
        await answer(pilot, "enter")
        await until(pilot, lambda: source.answers(), "the answer")
        assert source.answers() == [{"approval": "ap-task", "decision": "deny"}]
        assert app.screen is not box


# -- the keys ---------------------------------------------------------------------------------------------
async def test_y_approves_once_the_approval_on_the_selected_row():
    async with running(waiting(SHELL, EDIT), *ROWS[:2]) as (pilot, app, source):
        await press_alone(pilot, "y")
        await until(pilot, lambda: source.answers(), "the answer")
        assert source.answers() == [{"approval": "ap-shell", "decision": "once"}]
        assert notice(app) == f"approved once: shell: {COMMAND}"


async def test_Y_shows_the_rule_it_adds_and_sends_the_rule_as_edited():
    async with running(waiting(SHELL)) as (pilot, app, source):
        await press_alone(pilot, "Y")
        box = await until(pilot, lambda: isinstance(app.screen, AnswerBox) and app.screen, "the rule box")
        assert box.box.value == "shell:echo pwned*", "pre-filled with what the daemon would add"
        await pilot.pause(ANSWER_GRACE)
        box.box.value = "shell:echo*"
        await pilot.press("enter")
        await until(pilot, lambda: source.answers(), "the answer")
        assert source.answers() == [{"approval": "ap-shell", "decision": "job", "rule": "shell:echo*"}]


async def test_N_denies_with_the_reason_typed_or_none_and_esc_answers_nothing():
    async with running(waiting(SHELL)) as (pilot, app, source):
        await press_alone(pilot, "N")
        await until(pilot, lambda: isinstance(app.screen, AnswerBox), "the reason box")
        await answer(pilot, "escape")
        await until(pilot, lambda: isinstance(app.screen, AgentViewScreen), "the agent view again")
        assert source.answers() == []
        await pilot.pause(ANSWER_GRACE + 0.05)
        await press_alone(pilot, "N")
        await until(pilot, lambda: isinstance(app.screen, AnswerBox), "the reason box")
        await pilot.pause(ANSWER_GRACE)
        await pilot.press(*keys_of("not in the repo"), "enter")
        await pilot.pause(ANSWER_GRACE + 0.05)
        await press_alone(pilot, "N")
        await until(pilot, lambda: isinstance(app.screen, AnswerBox), "the reason box")
        await answer(pilot, "enter")
        await until(pilot, lambda: len(source.answers()) == 2, "both answers")
        assert source.answers() == [{"approval": "ap-shell", "decision": "deny", "reason": "not in the repo"},
                                    {"approval": "ap-shell", "decision": "deny"}]


async def test_in_the_job_screen_y_is_text_in_the_composer_and_answers_from_the_block():
    async with running(waiting(SHELL)) as (pilot, app, source):
        screen = await open_it(pilot, app)
        await press_alone(pilot, "y")
        assert screen.composer.value == "y" and source.answers() == [], "the composer has the focus: y is text"
        await pilot.press("ctrl+u", "up")
        assert app.focused is screen.approval_block
        assert "y approve · Y approve for this job · N deny" in screen.approval_block.border_title
        await pilot.pause(ANSWER_GRACE)
        await press_alone(pilot, "y")
        await until(pilot, lambda: source.answers(), "the answer")
        assert source.answers() == [{"approval": "ap-shell", "decision": "once"}]


async def test_a_message_typed_in_the_composer_is_sent_and_the_daemons_denial_is_said():
    async with running(waiting(SHELL)) as (pilot, app, source):
        await open_it(pilot, app)
        await pilot.press(*keys_of("use the tmp dir instead"), "enter")
        await until(pilot, lambda: source.calls, "the message")
        assert source.calls == [("send", {"job": JOB, "text": "use the tmp dir instead"})]
        assert "denied clean the build's request" in notice(app)


# -- text never approves -------------------------------------------------------------------------------------
async def test_text_pasted_into_the_composer_with_y_in_it_approves_nothing():
    async with running(waiting(SHELL)) as (pilot, app, source):
        screen = await open_it(pilot, app)
        app.post_message(events.Paste("y Y yes N"))
        await until(pilot, lambda: "yes" in screen.composer.value, "the paste in the composer")
        await settled(pilot, app)
        assert source.calls == [] and app.screen is screen


async def test_a_burst_of_text_in_the_block_or_on_the_row_approves_nothing():
    async with running(waiting(SHELL)) as (pilot, app, source):
        await burst(pilot, app, *keys_of("yes"))
        await burst(pilot, app, "Y", "N", "y")
        await settled(pilot, app)
        assert source.calls == [] and isinstance(app.screen, AgentViewScreen)
        screen = await open_it(pilot, app)
        await pilot.press("up")
        await pilot.pause(ANSWER_GRACE)
        await burst(pilot, app, *keys_of("yes do it"))
        await until(pilot, lambda: screen.composer.value == "yes do it", "the text in the composer")
        assert app.focused is screen.composer
        await settled(pilot, app)
        assert source.calls == []


async def test_y_in_the_agent_views_filter_line_is_text():
    async with running(waiting(SHELL)) as (pilot, app, source):
        screen = agent_view(app)
        await pilot.press("slash")
        await pilot.pause(ANSWER_GRACE)
        await press_alone(pilot, "y")
        assert screen.filter_box.value == "y" and source.answers() == []
        assert "y" not in footer_keys(app)


async def test_a_y_right_behind_the_key_that_selected_the_block_is_no_answer():
    async with running(waiting(SHELL)) as (pilot, app, source):
        screen = await open_it(pilot, app)
        await burst(pilot, app, *keys_of("ok"), "up", "y")
        await until(pilot, lambda: screen.composer.value == "oky", "the y as text, behind the text typed")
        assert source.answers() == [] and app.focused is screen.composer
        await pilot.press("ctrl+u")
        await pilot.pause(0.3)
        await burst(pilot, app, "up", "y")  # no text before it: the y is no answer, the block just got the focus
        await until(pilot, lambda: "press it again" in notice(app), "the notice")
        assert source.answers() == [] and app.focused is screen.approval_block


async def test_a_key_answers_the_approval_on_screen_when_it_was_pressed_never_a_later_one():
    async with running(waiting(SHELL)) as (pilot, app, source):
        screen = agent_view(app)
        await pilot.press("y")  # acts once the single-press window has passed: meanwhile the request changes
        source.feed(waiting({**SHELL, "id": "ap-later", "what": {"command": "rm -rf /", "cwd": CWD}}))
        await until(pilot, lambda: cell(app, JOB, "activity").startswith("⚑ shell: rm"), "the later request")
        await until(pilot, lambda: source.answers(), "the answer")
        assert source.answers() == [{"approval": "ap-shell", "decision": "once"}], "the one on screen at the press"
        assert screen.shown.at(JOB, float("inf"))[0].id == "ap-later"


async def test_a_key_typed_ahead_of_a_request_is_no_answer_to_it():
    async with running(row(JOB, "clean the build", State.WORKING, age=100, since=12)) as (pilot, app, source):
        app.post_message(events.Key("y", "y"))  # made now, before the request exists
        source.feed(waiting(SHELL))
        await until(pilot, lambda: cell(app, JOB, "activity").startswith("⚑"), "the request")
        await settled(pilot, app)
        assert source.answers() == []


async def test_keys_typed_ahead_into_the_rule_box_do_not_send_it():
    async with running(waiting(SHELL)) as (pilot, app, source):
        await burst(pilot, app, "Y", "enter")
        box = await until(pilot, lambda: isinstance(app.screen, AnswerBox) and app.screen, "the rule box")
        await pilot.pause(0.3)
        assert app.screen is box and source.answers() == []


# -- bounds ---------------------------------------------------------------------------------------------
async def test_a_huge_request_is_shown_cut_at_the_blocks_bound_saying_so():
    huge = "x" * (BLOCK_CHARS * 3)
    async with running(waiting({**SHELL, "what": {"command": huge, "cwd": CWD}})) as (pilot, app, _):
        screen = await open_it(pilot, app)
        body = str(screen.approval_block.body.render())
        assert len(body) < BLOCK_CHARS + 200
        left = len(f"it asks to run: {huge} in {CWD}") - BLOCK_CHARS
        assert body.endswith(f"… {left:,} more characters not shown here\nthe model says: “List the files”")
