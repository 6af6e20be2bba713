"""A command's flood of output in the app: the open job's transcript follows it as it runs and
keeps only its tail (roost/tui/transcript.py's KEEP_BYTES), so 20 MB cost the app a few hundred
lines, not hundreds of thousands; scrolling to the top pages the older entries back in."""

from __future__ import annotations

from typing import Callable

import pytest

from roost.tui.transcript import KEEP_BYTES

from command_output_agent import LONG_EVERY, flood_lines
from conftest import DaemonHarness
from test_command_output import CONFIG
from tui_helpers import SIZE, make_app, open_job, transcript_text, until


@pytest.fixture
def daemon(daemon_factory: Callable[[str], DaemonHarness]) -> DaemonHarness:
    return daemon_factory(CONFIG)


def numbered(near: int) -> int:
    """The number of a line with a number (not one of the long ones), at or before ``near``."""
    return near - 1 if near % LONG_EVERY == LONG_EVERY - 1 else near


async def test_the_app_follows_a_flood_as_it_runs_and_keeps_only_its_tail(daemon, tmp_path):
    size = 20_000_000
    lines = flood_lines(size)
    half = numbered(len(lines) // 2)
    end = b"".join(lines)[-300:].decode(errors="ignore").replace("\n", "")
    go_on = tmp_path / "go-on"
    job = daemon.spawn(f"flood {size} 2 {half} {go_on}", driver="build")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        log = screen.transcript
        await until(pilot, lambda: f"line {half:07d}" in transcript_text(screen), f"line {half} in the app", 60)
        assert daemon.show(job)["state"] == "working", "the command waits: the app showed it while it ran"
        go_on.write_text("")
        await until(pilot, lambda: "· idle" in transcript_text(screen), "the end of the turn in the app", 60)
        shown = transcript_text(screen).replace("\n", "")
        assert end in shown, "the transcript followed the output to its end"
        kept = len(log.lines)
        assert kept <= 2 * KEEP_BYTES // 60, f"{kept} lines kept for {size} bytes: the tail only"
        assert log.following and log.more_before
        log.scroll_home(animate=False)  # the top: the page before the first entry kept comes back
        await until(pilot, lambda: len(log.lines) > kept, "older entries paged in", 30)
