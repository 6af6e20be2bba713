"""The app at 60, 80, 100 and 200 columns in a real terminal (tmux): what must stay on screen does.

At every width a failed job's row keeps its id, its state and the start of its reason (the
title gives way first), the top bar keeps "failed", the footer shows only keys that fit whole
and ``?``, the job bar keeps the subagent count, and the panel shows each row's id.
"""

from __future__ import annotations

import re

import pytest

from test_e2e_tmux import ROOST, Tmux, cli, term  # noqa: F401  (term is a fixture)

SIZES = [(60, 20), (80, 24), (100, 30), (200, 50)]
TITLE = "a rather long title that names the whole job"
REASON = "the turn failed: wrongly formatted lockfile"


def start_at(term: Tmux, width: int, height: int) -> None:
    term.tmux("new-session", "-d", "-s", "app", "-x", str(width), "-y", str(height), "-e", "COLORTERM=truecolor",
              ROOST)
    term.wait_for(lambda screen: "? help" in screen, "the footer's ? help")


def footer_words(screen: str) -> list[str]:
    return screen.rstrip("\n").splitlines()[-1].split()


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_a_failure_keeps_its_id_state_and_reason_at_every_width(daemon_factory, tmp_path, width, height):
    daemon = daemon_factory("max_running_jobs = 1\n")
    asking = daemon.spawn("ask which lockfile?", title="asks")
    daemon.wait_for(lambda: daemon.call("show", job=asking)["state"] == "waiting", what="the question")
    failed = cli(daemon, "spawn", "--title", TITLE, f"fail {REASON}")
    daemon.wait_for(lambda: daemon.call("show", job=failed)["state"] == "failed", what="the job to fail")
    for _ in range(3):  # one works, two wait for the cap: a top bar longer than 60 columns
        daemon.spawn("work 600", title="busy")
    term = Tmux(tmp_path / "tmux.sock", daemon)
    try:
        _check_failure_row(term, failed, width, height)
    finally:
        term.kill()


def _check_failure_row(term: Tmux, failed: str, width: int, height: int) -> None:
    start_at(term, width, height)
    screen = term.wait_text(failed)
    line = next(line for line in screen.splitlines() if failed in line)
    assert "✗" in line, line
    assert REASON[:20] in line, f"the reason's start is cut: {line!r}"
    assert len(line.rstrip()) <= width
    assert "1 failed" in screen.splitlines()[0] and "1 needs you" in screen.splitlines()[0], screen.splitlines()[0]
    words = footer_words(screen)
    assert "? help" in " ".join(words), words
    known = {"⏎", "open", "n", "new", "m", "message", "/", "filter", "space", "peek", "K", "stop", "tree", "a", "archive", ":",
             "command", "q", "quit", "w", "next", "needing", "you", "p", "pin", "r", "rename", "A", "archived",
             "d", "diff", "?", "help"}
    assert set(words) <= known, f"a key cut mid-word: {words}"


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_job_bar_keeps_its_count_and_the_panel_its_ids(daemon, term, width, height):
    root = daemon.spawn("spawn*3 work 600\nwork 600", title=TITLE)
    daemon.wait_for(lambda: len(daemon.children(root)) == 3, what="three children")
    children = [row["id"] for row in daemon.children(root)]
    start_at(term, width, height)
    term.wait_text(root)
    term.keys("Enter")
    screen = term.wait_for(lambda s: "3 subagents (3 running)" in s and all(c in s for c in children),
                           "the job bar's count and the panel's ids")
    bar = next(line for line in screen.splitlines() if "3 subagents (3 running)" in line)
    assert root in bar and "working" in bar, bar
    panel = [line for line in screen.splitlines() if "work 600" in line and "working" in line]
    assert sorted(re.search(r"\b([a-z2-9]{4,8})\b\s+work 600", line).group(1) for line in panel) == sorted(children)
