"""What needs you is never hidden, in a real terminal (tmux): failures older than the agent view's
listing window, the filter reaching every record, and desktop notifications as the bytes the app
writes (tmux pipe-pane), wrapped for tmux's passthrough, held while focused, one per interval."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import DaemonHarness, seeded_daemon
from test_e2e_tmux import ROOST, Tmux, pytestmark  # noqa: F401  (the e2e marks and skip)

from roost.models import Job, State

T0 = 1_790_000_000.0
JOBS = 324
FAILED = 3


class SizedTmux(Tmux):
    """The app in a window of the given size."""

    def __init__(self, socket: Path, daemon: DaemonHarness, size: tuple[int, int]) -> None:
        super().__init__(socket, daemon)
        self.size = size

    def start(self) -> None:
        width, height = self.size
        self.tmux("new-session", "-d", "-s", "app", "-x", str(width), "-y", str(height), "-e",
                  "COLORTERM=truecolor", ROOST)
        self.wait_for(lambda screen: "roost" in screen and "·" in screen, "the agent view's top bar")


def seed(home: Path) -> list[Job]:
    """JOBS top-level records: the FAILED oldest failed, the rest done (oldest first)."""
    return [Job(id=f"s{n:04d}", title=f"seeded {n}", driver="builtin", cwd=str(home),
                state=State.FAILED if n < FAILED else State.DONE, reason="exit 2" if n < FAILED else "",
                state_since=T0 + n, created_at=T0 + n, updated_at=T0 + n, reaped=True) for n in range(JOBS)]


@pytest.fixture
def seeded(roost_home: Path) -> Iterator[tuple[DaemonHarness, list[str], list[str]]]:
    """The daemon on JOBS records written with the store's API before it started (no agent runs);
    with the failed ids and the done ones, oldest first."""
    records = seed(roost_home)
    ids = [record.id for record in records]
    harness = seeded_daemon(roost_home, records)
    try:
        yield harness, ids[:FAILED], ids[FAILED:]
    finally:
        harness.stop()


def listed(screen: str) -> list[str]:
    """The rows the agent view shows (lines that hold a seeded id)."""
    return [line for line in screen.splitlines() if " s0" in line and ("✓" in line or "✗" in line)]


def cleared(screen: str) -> bool:
    """Whether the agent view lists rows of every kind again (the filter left more than one)."""
    return sum("✓" in line for line in listed(screen)) > 2  # done rows (a narrow state column keeps only its symbol)


@pytest.mark.parametrize("size", [(60, 20), (80, 24), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_failures_older_than_the_window_are_counted_listed_and_found(seeded, tmp_path, size):
    daemon, failed, done = seeded
    term = SizedTmux(tmp_path / "tmux.sock", daemon, size)
    try:
        term.start()
        term.wait_text(f"{FAILED} failed")
        old = done[0]  # the oldest done job: left out of the window, only the daemon's search finds it
        assert old not in term.screen()
        term.keys("/")
        term.type("s:failed")
        screen = term.wait_for(lambda s: all(job_id in s for job_id in failed), "the three failed rows")
        assert not any(job_id in screen for job_id in done[-5:]), "only failed rows are left"
        term.keys("Escape", "Escape")
        term.wait_for(cleared, "the filter cleared")
        for job_id in (failed[0], old):
            term.keys("/")
            term.type(job_id)
            term.wait_for(lambda s, j=job_id: j in s.split("\n", 1)[1] and len(listed(s)) == 1,
                          f"{job_id}'s row alone")
            term.keys("Escape", "Escape")
            term.wait_for(cleared, "the filter cleared")
    finally:
        term.kill()


def test_notifications_are_wrapped_for_tmux_held_while_focused_and_rate_limited(daemon_factory, tmp_path):
    daemon = daemon_factory('notify = ["needs_input", "failed"]\nnotify_via = ["osc9", "osc777", "bell"]\n'
                            "notify_interval = 3600\n")
    term = Tmux(tmp_path / "tmux.sock", daemon)
    out = tmp_path / "pane.out"
    try:
        term.start()
        term.tmux("pipe-pane", "-O", "-t", "app", f"cat >> {out}")

        def sent() -> bytes:
            return out.read_bytes() if out.exists() else b""

        term.keys("\x1b[I", "/")  # the terminal says the app has the focus (focus reporting's FocusIn)
        term.wait_text("keep filter")
        term.keys("Escape")
        term.wait_for(lambda s: "keep filter" not in s, "the filter box closed")
        focused = daemon.spawn("fail on purpose", title="while focused")
        term.wait_text("while focused")
        term.wait_for(lambda s: "1 failed" in s, "the failed row")
        assert b"\x1bPtmux;" not in sent() and b"\x07" not in sent().replace(b"\x1b]", b""), \
            "nothing while the app has the focus"
        def cursor_row() -> str:  # the row with its colours: the cursor's look says whether the table has the focus
            return next(line for line in term.tmux("capture-pane", "-t", "app", "-p", "-e").splitlines()
                        if "while focused" in line)

        looked = cursor_row()
        term.keys("\x1b[O")  # FocusOut: the person looks elsewhere; Textual takes the focus from the table
        term.wait_for(lambda s: cursor_row() != looked, "the blurred table's cursor")
        first = daemon.spawn("fail broken on purpose", title="breaker")
        wrapped = f"\x1bPtmux;\x1b\x1b]9;breaker [{first}] failed".encode()
        deadline = time.monotonic() + 15
        while wrapped not in sent():
            assert time.monotonic() < deadline, f"no OSC 9 in tmux passthrough; the app wrote {sent()[-400:]!r}"
            time.sleep(0.1)
        data = sent()
        assert f"\x1bPtmux;\x1b\x1b]777;notify;roost;breaker [{first}] failed".encode() in data
        assert data.count(b"\x1bPtmux;") == 2, "one notification: OSC 9 and OSC 777 once each"
        second = daemon.spawn("ask which branch?", title="asker")
        daemon.wait_state(second, "waiting")
        term.wait_for(lambda s: "1 needs you" in s, "the waiting row")
        assert sent().count(b"\x1bPtmux;") == 2, "within notify_interval: no second notification"
        assert focused
    finally:
        term.kill()


def test_ctrl_n_on_a_job_screen_opens_the_next_job_that_needs_you(daemon, tmp_path):
    """The jump key worked on the agent view only; on a job screen ``w`` is a letter of the message."""
    asker = daemon.spawn("ask which branch?", title="the asker")
    daemon.wait_state(asker, "waiting")
    busy = daemon.spawn("wait-for never", title="the busy one")
    daemon.wait_state(busy, "working")
    term = Tmux(tmp_path / "tmux.sock", daemon)
    try:
        term.start(80, 24)
        term.wait_text("the busy one")
        term.keys("Enter")  # the newest row: the busy one
        term.wait_for(lambda s: s.splitlines()[0].lstrip().startswith("the busy one"), "its job screen")
        term.type("w")
        term.keys("C-n")
        screen = term.wait_for(lambda s: s.splitlines()[0].lstrip().startswith("the asker"), "the asker's job screen")
        assert "question: the asker" in screen
        term.keys("Escape")
        term.wait_for(lambda s: "message this job" not in s, "back on the agent view")
        assert not any(e["kind"] == "message" for e in daemon.timeline(busy)), "the w was never sent"
    finally:
        term.kill()
