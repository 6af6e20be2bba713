"""The search screen in a real terminal (tmux) at 60x20, 80x24 and 200x50: ``S``, words, Enter, and
Enter on a result opens its job at that entry. Read with capture-pane until the screen shows it."""

from __future__ import annotations

import shutil

import pytest

from test_e2e_tmux import ROOST, term  # noqa: F401  (the fixture)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]


@pytest.mark.parametrize("size", [(60, 20), (80, 24), (200, 50)], ids=["60x20", "80x24", "200x50"])
def test_S_finds_a_word_in_a_transcript_and_enter_opens_the_job_there(daemon, term, size):
    width, height = size
    filler = "\n".join(f"say filler {i}" for i in range(60))
    job = daemon.spawn(f"{filler}\nsay the bittern booms\nsay after it", title="marsh")
    daemon.spawn("say nothing here", title="other")
    daemon.wait_state(job, "idle", "done")
    term.tmux("new-session", "-d", "-s", "app", "-x", str(width), "-y", str(height), "-e", "COLORTERM=truecolor",
              ROOST)
    term.wait_text("marsh")
    term.keys("S")
    term.wait_text("search every transcript")
    term.type("bittern")
    term.keys("Enter")
    screen = term.wait_text("result")
    rows = [line for line in screen.splitlines() if job in line]
    assert rows and all("bittern" in line for line in rows), screen
    term.keys("Enter")
    screen = term.wait_for(lambda s: "search 'bittern'" not in s and "the bittern booms" in s,
                           "the job opened at the entry")
    assert "filler 0" not in screen and "filler 10" not in screen, "it opens at the entry, not the tail's start"
    assert "filler 56" in screen or "filler 57" in screen, "a few entries above the one found"
    term.keys("Escape")
    term.wait_text("search 'bittern'")
