"""The transcript's window counts real bytes (a 5,000-line output stays after its job ends, folded),
and the wheel stops following before the view moves (output streaming in does not pull it back)."""

from __future__ import annotations

from textual import events

from roost.tui.entry_text import weight
from roost.tui.transcript import KEEP_BYTES

from tui_helpers import SIZE, make_app, open_job, transcript_text, until


async def test_a_5000_line_output_stays_in_the_window_after_its_job_ended(daemon):
    job = daemon.spawn("run seq 1 5000", title="numbers")
    daemon.wait_state(job, "idle")
    output = next(e for e in daemon.timeline(job) if e["kind"] == "text" and "5000" in e["data"]["text"])
    assert weight(output) < KEEP_BYTES, "24 KB of text weighs 24 KB (at 16 bytes a line it weighed 80 KB)"
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        await until(pilot, lambda: "· idle" in transcript_text(screen), "the end of the turn")
        text = transcript_text(screen)
        assert "1\n2\n3\n" in text and "\n5000\n" in text and "4,920 lines folded" in text
        assert "\n2500\n" not in text, "the middle is folded"
        await pilot.press("ctrl+o")
        await until(pilot, lambda: "\n2500\n" in transcript_text(screen), "the output unfolded")


async def test_the_wheel_holds_the_view_while_output_streams(daemon):
    job = daemon.spawn("\n".join(f"say line {n}" for n in range(80)), title="reader")
    daemon.wait_state(job, "idle")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, job)
        log = screen.transcript
        await until(pilot, lambda: "line 79" in transcript_text(screen) and log.max_scroll_y > 0, "the tail")
        # the wheel, then at once the lines a turn adds
        log.post_message(events.MouseScrollUp(log, 1, 1, 0, -1, 0, False, False, False))
        daemon.call("send", job=job, text="\n".join(f"say fresh {n}" for n in range(5)))
        await until(pilot, lambda: log.unread >= 5, "the new lines counted below the view")
        assert not log.following and log.scroll_y < log.max_scroll_y
        assert screen.status.hint.startswith(f"↓ {log.unread} new")
        await pilot.press("end")
        await until(pilot, lambda: log.following and log.unread == 0, "following again")
