"""Nothing lost on the way to the screen, and Esc is Esc — in a real terminal (tmux), at the sizes a
person uses: a 5,000-line output is still there after its job ends, and Home and PgUp reach its
start; scrolling back while a flood streams on a loaded machine holds, with ``↓ N new``, until End;
Esc then a key in one burst is Esc, then the key; a resize wraps the transcript again."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from conftest import DaemonHarness
from test_e2e_tmux import Tmux, term  # noqa: F401  (the fixture)

#: A command job that prints without end: a numbered line at a time, a short pause every 10.
FLOOD = 'i=0; while :; do i=$((i+1)); echo "flood $i"; [ $((i % 10)) = 0 ] && sleep 0.02; done'


@pytest.fixture
def daemon(daemon_factory: Callable[[str], DaemonHarness]) -> DaemonHarness:
    return daemon_factory('[drivers.sh]\nkind = "command"\ncommand = ["sh", "-c", "{prompt}"]\n')


@pytest.fixture
def busy() -> Iterator[None]:
    """The machine loaded: two processes that spin a core each for as long as the test runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def rows(screen: str) -> list[str]:
    return [row.strip() for row in screen.splitlines()]


def said(line: str) -> Callable[[str], bool]:
    """A line of the transcript, whole."""
    return lambda screen: line in rows(screen)


def open_only_job(term: Tmux, title: str, width: int, height: int) -> None:
    term.start(width, height)
    term.wait_text(title)
    term.keys("Enter")
    term.wait_text("message this job")


#: The sizes a person uses, each defect tested at every one (issue 20's done-when).
SIZES = [(60, 20), (80, 24), (200, 50)]
SIZE_IDS = [f"{w}x{h}" for w, h in SIZES]


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_a_5000_line_output_is_shown_after_its_job_ended(daemon, term, size):
    job = daemon.spawn("run seq 1 5000", title="numbers")
    daemon.wait_state(job, "idle")
    open_only_job(term, "numbers", *size)
    screen = term.wait_for(said("5000"), "the output's last line, after the job ended")
    assert "· idle" in screen
    term.keys("Home")
    screen = term.wait_for(said("1"), "the output's first line (Home)")
    assert said("2")(screen) and not said("5000")(screen)

    term.keys("End")
    term.wait_for(said("5000"), "the end again")
    folded = False
    def numbers_in_view(screen: str) -> list[str]:
        return [row for row in rows(screen) if row.isdigit()]

    for _ in range(20):  # PgUp, a page at a time, reaches the start too, past the fold
        # a page moved when the output's lines in view did (the job bar's age ticks on its own)
        before = numbers_in_view(term.screen())
        term.keys("PageUp")
        screen = settled(term, term.wait_for(lambda now: numbers_in_view(now) != before or said("1")(now), "a page up"))
        folded = folded or "4,920 lines folded" in screen  # 5,000 lines: their first and last 40 shown
        if said("1")(screen) and said("2")(screen):
            break
    else:
        raise AssertionError(f"PgUp never reached the output's first line:\n{screen}")
    for _ in range(10 if not folded else 0):  # a capture between two pages may have missed it: down again
        before = numbers_in_view(term.screen())
        term.keys("PageDown")
        screen = settled(term, term.wait_for(lambda now: numbers_in_view(now) != before or said("5000")(now),
                                             "a page down"))
        folded = "4,920 lines folded" in screen
        if folded or said("5000")(screen):
            break
    assert folded, "the fold line said how many lines it folds"

    term.keys("C-o")  # unfolded: every line is there
    term.wait_for(lambda now: "lines folded" not in now, "the output unfolded")
    term.keys("End")
    term.wait_for(said("5000"), "the end of the unfolded output")
    for _ in range(20):
        before = numbers_in_view(term.screen())
        term.keys("PageUp")
        screen = term.wait_for(lambda now: numbers_in_view(now) != before, "a page up in the unfolded output")
        if any(41 <= int(n) <= 4960 for n in numbers_in_view(screen)):
            return  # a line that was folded away (a capture may fall between two pages: any of them will do)
    raise AssertionError(f"the unfolded output does not show its middle lines:\n{screen}")


def untouched(daemon: DaemonHarness, job: str) -> None:
    """The job got nothing but its first prompt: no message, no turn."""
    timeline = daemon.timeline(job)
    assert [e for e in timeline if e["kind"] in ("message", "prompt")][1:] == []
    assert not any(e["kind"] == "message" for e in timeline)


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_esc_then_a_key_in_one_burst_is_esc_then_the_key(daemon, term, size):
    job = daemon.spawn("say ready", title="target")  # short: 60 columns cut a title to 9 cells
    daemon.wait_state(job, "idle")
    open_only_job(term, "target", *size)

    term.keys("Escape", "g")  # one write: Esc, then g on the agent view (its first row)
    term.wait_for(lambda screen: "message this job" not in screen and "target" in screen, "the agent view")
    term.keys("Enter")
    screen = term.wait_text("message this job")
    assert not re.search(r"^\W*g\W*$", screen, re.M), "no g was left in the composer"

    term.keys("Escape", "g", "Down", "Enter")  # Esc, the first row, down (one row: stays), open it
    screen = term.wait_text("message this job")
    assert "^g" not in screen
    term.keys("Escape")
    term.wait_for(lambda now: "message this job" not in now, "the agent view")
    untouched(daemon, job)
    assert daemon.show(job)["state"] == "idle"


def settled(term: Tmux, screen: str) -> str:
    """The screen once a move has been drawn whole: the output's lines the same in two captures in a row
    (a capture can land while a page is half drawn, and the fold line be missed between two pages)."""
    for _ in range(50):
        now = term.screen()
        if re.findall(r"^\s*\d+\s*$", now, re.M) == re.findall(r"^\s*\d+\s*$", screen, re.M):
            return now
        screen = now
        time.sleep(0.05)
    return screen


def flood_lines(screen: str) -> list[str]:
    """The flood's line numbers in view, top first."""
    return re.findall(r"^\s*flood (\d+)\b", screen, re.M)


def scrolled_back_holds(term: Tmux, keys: tuple[str, ...]) -> None:
    """Scroll back with ``keys`` while the flood streams: ``↓ N new`` shows and N grows while the
    lines in view stay where they are; End follows the tail again."""
    term.keys(*keys)
    def counted(now: str) -> int:
        found = re.search(r"↓ (\d+) new", now)
        return int(found[1]) if found else -1

    first = counted(term.wait_for(lambda now: counted(now) >= 0, f"↓ N new after {' '.join(keys)}", 120))
    # The transcript stops following when the key is read, before the view moves: read the view
    # once more lines were counted below it (the move is drawn by then), not at the first "↓".
    screen = term.wait_for(lambda now: counted(now) >= first + 50, "lines counted below the moved view", 120)
    view, before = flood_lines(screen), screen
    counted_then = counted(screen)
    screen = term.wait_for(lambda now: counted(now) >= counted_then + 200, "more lines counted below", 120)
    assert flood_lines(screen) == view, f"the lines read stayed put\n{before}\n=====\n{screen}"
    newest = max(int(n) for n in re.findall(r"flood (\d+)", screen))
    term.keys("End")
    term.wait_for(lambda now: "↓ " not in now and max(map(int, re.findall(r"flood (\d+)", now)), default=0)
                  > newest + 200, f"the tail followed again after {' '.join(keys)}", 120)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("size, ways", [((60, 20), [("Home",)]), ((80, 24), [("PageUp",), ("Home",)]),
                                        ((200, 50), [("PageUp",)])], ids=SIZE_IDS)
def test_scrolling_back_while_a_flood_streams_holds_on_a_loaded_machine(daemon, term, busy, size, ways):
    """Both ways back at 80x24; one each at the other sizes (the flood is the suite's slowest test)."""
    job = daemon.spawn(FLOOD, title="flood", driver="sh")
    open_only_job(term, "flood", *size)
    term.wait_for(lambda screen: re.search(r"flood \d{4,}", screen) is not None, "the flood streaming", 60)
    for keys in ways:
        scrolled_back_holds(term, keys)
    daemon.call("stop", job=job)


def test_the_transcript_wraps_again_after_a_resize(daemon, term):
    words = " ".join(f"word{n}" for n in range(24))
    job = daemon.spawn(f"say {words} spawned-id-{'x' * 8}", title="wide")
    daemon.wait_state(job, "idle")
    open_only_job(term, "wide", 200, 50)
    term.wait_text(f"spawned-id-{'x' * 8}")
    term.resize(60, 20)
    screen = term.wait_for(lambda now: f"spawned-id-{'x' * 8}" in now and len(now.splitlines()[0]) <= 60,
                           "the line wrapped to 60 columns, whole")
    assert "word23" in screen
    term.resize(200, 50)
    term.wait_for(lambda now: any("word0" in row and "spawned-id" in row for row in now.splitlines()),
                  "the line on one row again")
