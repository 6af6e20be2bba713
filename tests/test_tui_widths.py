"""The width rules without a terminal: the agent view's columns and the footer's keys."""

from __future__ import annotations

import pytest

from roost.tui.fit_footer import fitting
from roost.tui.job_table import ACTIVITY_MIN, table_columns


@pytest.mark.parametrize("width", [60, 80, 100, 200])
@pytest.mark.parametrize("usage", [False, True])
def test_the_title_gives_way_before_the_id_state_and_activity(width, usage):
    columns = {c.key: c.width for c in table_columns(width, usage)}
    assert sum(w + 2 for w in columns.values()) + 2 <= width, "the table fits the terminal"
    assert columns["id"] == 6 and columns["state"] >= 3
    assert columns["activity"] >= ACTIVITY_MIN, "the reason's start stays"
    assert columns["activity"] >= columns["title"] or columns["title"] == 32


def test_a_narrower_table_shortens_the_title_first():
    """At 60 columns the title had 20 cells while the activity column got what was left."""
    at = {width: {c.key: c.width for c in table_columns(width, False)} for width in (60, 80, 100, 200)}
    assert at[60]["title"] < at[80]["title"] <= at[100]["title"] <= at[200]["title"] == 32
    assert at[60]["activity"] == ACTIVITY_MIN


def test_the_footer_shows_whole_keys_and_always_help():
    keys = [(8, False), (12, False), (7, True), (10, False), (4, False)]
    assert fitting(keys, 100) == [True] * 5
    assert fitting(keys, 27) == [True, True, True, False, False]
    assert fitting(keys, 20) == [True, False, True, False, False], "the footer keeps its order: none after a gap"
    assert fitting(keys, 3) == [False, False, True, False, False], "? stays even when nothing else fits"


async def test_a_long_notice_is_shown_whole_at_60_columns(daemon):
    """A notice wider than the status line lost its end (…), and the hint took room from it."""
    from tui_helpers import make_app, until

    long = "could not stop lint the grammar and everything below it: the daemon said no such job"
    app = make_app(daemon)
    async with app.run_test(size=(60, 20)) as pilot:
        status = app.screen.query_one("#status")
        status.hint = "↓ 3 new · End follows"
        await pilot.pause()
        status.say(long, error=True)
        await until(pilot, lambda: status.notice == long and status.size.height == 2, "the notice on two lines")
        shown = " ".join(line.text.strip() for line in status.render_lines(status.region.reset_offset))
        assert long in " ".join(shown.split()), shown
        status.say("stopped 1 job")
        await until(pilot, lambda: status.size.height == 1, "a short notice on one line")
        assert "↓ 3 new · End follows" in "".join(line.text for line in status.render_lines(status.region.reset_offset))


async def test_the_help_notes_wrap_whole_at_60_columns(daemon):
    """The filter's help was one line cut at the box's edge."""
    from roost.tui.filter_box import FILTER_HELP
    from roost.tui.help_screen import HelpScreen
    from tui_helpers import make_app, until

    app = make_app(daemon)
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
        note = next(label for label in app.screen.query(".dialog-help") if "filter:" in str(label.render()))
        lines = [strip.text.strip() for strip in note.render_lines(note.region.reset_offset)]
        assert " ".join(lines) == FILTER_HELP and len(lines) > 1
