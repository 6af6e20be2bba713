"""``roost`` in a real terminal (tmux), driven with send-keys as a person would, read with capture-pane.

Pilot waits for the app to go idle after every key; a terminal does not, so these tests also
send keys in a burst. Each test gets its own tmux server (a private socket) and an explicit
environment: no COLUMNS/LINES (pytest's readline leaves them behind), truecolor, UTF-8.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import DaemonHarness

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

ROOST = str(Path(sys.executable).parent / "roost")
#: The app in tmux runs on the real clock: its K K window is given seconds no loaded machine uses up.
GENEROUS_WINDOW = "double_press_window = 60\n"


class Tmux:
    """One tmux server on a private socket, running ``roost`` in a 120x40 window."""

    def __init__(self, socket: Path, daemon: DaemonHarness) -> None:
        self.socket = socket
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", str(daemon.home)),
            "LANG": "C.UTF-8",
            "TERM": "xterm-256color",
            "COLORTERM": "truecolor",
            "ROOST_HOME": str(daemon.home),
            "ROOST_CONFIG": str(daemon.config_path),
        }

    def tmux(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-u", "-S", str(self.socket), *args], env=self.env, capture_output=True,
                              text=True, timeout=10)
        if done.returncode:
            raise AssertionError(f"tmux {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout

    def start(self, width: int = 120, height: int = 40) -> None:
        self.tmux("new-session", "-d", "-s", "app", "-x", str(width), "-y", str(height), "-e", "COLORTERM=truecolor",
                  ROOST)
        self.wait_for(lambda screen: "quit" in screen or "? help" in screen, "the agent view's footer")

    def resize(self, width: int, height: int) -> None:
        self.tmux("resize-window", "-t", "app", "-x", str(width), "-y", str(height))

    def keys(self, *keys: str) -> None:
        """Send keys in one go, as a terminal delivers a burst."""
        self.tmux("send-keys", "-t", "app", *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "app", "-l", text)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-t", "app", "-p")

    def wait_for(self, check: Callable[[str], bool], what: str, timeout: float = 15.0) -> str:
        """Poll the screen until ``check`` holds; fail with the last screen."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if check(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; the screen:\n{screen}")
            time.sleep(0.1)

    def wait_text(self, text: str, timeout: float = 15.0) -> str:
        return self.wait_for(lambda screen: text in screen, repr(text), timeout)

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", str(self.socket), "kill-server"], env=self.env, capture_output=True, timeout=10)


@pytest.fixture
def term(daemon: DaemonHarness, tmp_path: Path) -> Iterator[Tmux]:
    tmux = Tmux(tmp_path / "tmux.sock", daemon)
    try:
        yield tmux
    finally:
        tmux.kill()


def cli(daemon: DaemonHarness, *args: str) -> str:
    """Run the real ``roost`` command against the test's daemon."""
    done = subprocess.run([ROOST, *args], env=daemon.env, capture_output=True, text=True, timeout=20,
                          cwd=daemon.home)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_tree_spawned_from_the_cli_shows_up(daemon, term):
    term.start()
    root = cli(daemon, "spawn", "--title", "tree from the cli", "spawn wait-for never\nspawn wait-for never\nwait-for never")
    screen = term.wait_text("2 subagents (2 running)")
    line = next(line for line in screen.splitlines() if "tree from the cli" in line)
    assert root in line and "working" in line
    assert "wait-for never" not in screen, "its subagents are not rows of their own"


def test_a_done_childs_row_leaves_and_the_hint_appears(daemon, term):
    root = daemon.spawn("spawn wait-for child; report done child finished\nspawn wait-for never\nwait-for never", title="parent")
    daemon.wait_for(lambda: len(daemon.children(root)) == 2, what="two children")
    term.start()
    term.wait_text("parent")
    term.keys("Enter")
    term.wait_text("subagents · 2 running")
    daemon.release("child")
    screen = term.wait_text("/subagents to see subagents")
    panel = screen.split("subagents ·", 1)[1]
    assert "wait-for child" not in panel, "the done row left the panel"
    assert "wait-for never" in panel


def test_K_twice_stops_a_tree(daemon, term):
    root = daemon.spawn("spawn*2 wait-for never\nwait-for never", title="to stop")
    daemon.wait_for(lambda: [c["state"] for c in daemon.children(root)] == ["working", "working"],
                    what="two working children")
    daemon.write_config(GENEROUS_WINDOW)
    term.start()
    term.wait_text("2 subagents (2 running)")
    term.keys("K")
    term.wait_text("press K again within 60 s")
    term.keys("K")
    term.wait_text("stopped 3 jobs")
    assert daemon.show(root)["state"] == "stopped"
    assert [c["state"] for c in daemon.children(root)] == ["stopped", "stopped"]


def test_a_message_resumes_a_done_child(daemon, term):
    root = daemon.spawn("spawn report done first pass\nsay parent waits", title="parent")
    child = daemon.wait_for(lambda: daemon.children(root), what="a child")[0]["id"]
    daemon.wait_row(child, lambda r: r["reaped"], timeout=15, what="the child's worker closed")
    term.start()
    term.wait_text("parent")
    term.keys("Enter")
    term.wait_text("message this job")
    term.type("/subagents all")
    term.keys("Enter")
    term.wait_text("all subagents")
    term.keys("m")  # message the selected (done, closed) child from the panel
    term.wait_text("Message report done first pass")
    term.type("say second pass")
    term.keys("Enter")
    term.wait_text("resumed report done first pass with your message")
    daemon.wait_for(lambda: "second pass" in daemon.texts(child), what="the resumed turn")
    assert daemon.show(child)["worker_up"]


def test_keys_sent_in_a_burst_act_on_the_right_row(daemon, term):
    jobs = [daemon.spawn("wait-for never", title=f"burst {n}") for n in range(3)]
    for job in jobs:
        daemon.wait_state(job, "working")
    daemon.write_config(GENEROUS_WINDOW)
    term.start()
    term.wait_for(lambda screen: all(f"burst {n}" in screen for n in range(3)), "three rows")
    term.keys("j", "j", "K", "K")  # one write: down, down, and the stop pressed twice
    term.wait_text("stopped 1 job")
    states = {job: daemon.show(job)["state"] for job in jobs}
    assert states == {jobs[0]: "stopped", jobs[1]: "working", jobs[2]: "working"}, \
        "the oldest job is the third row, newest first"


# ------------------------------------------------------------------------------------------- bursts
# Each burst is ONE send-keys call: the terminal delivers it to the app in one read, as a fast
# typist or a script does. The daemon's records say nothing happened that was not meant.


def untouched(daemon: DaemonHarness, job: str) -> None:
    row = daemon.show(job)
    assert row["archived_at"] is None and row["state"] != "stopped"
    assert not any(e["kind"] == "message" for e in daemon.timeline(job))


def test_enter_and_text_in_one_burst_types_into_the_opened_job(daemon, term):
    root = daemon.spawn("spawn wait-for never\nwait-for never", title="burst target")
    daemon.wait_for(lambda: daemon.children(root), what="a child")
    term.start()
    term.wait_text("burst target")
    term.keys("Enter", "say hi")
    screen = term.wait_text("say hi")
    assert "message this job" not in screen.split("say hi")[0].splitlines()[-1], "the text is in the composer"
    term.wait_text("subagents · 1 running")
    untouched(daemon, root)
    assert "Archive" not in term.screen()


def test_text_in_one_burst_in_the_panel_goes_to_the_composer(daemon, term):
    root = daemon.spawn("spawn wait-for never\nspawn wait-for never\nwait-for never", title="panel burst")
    daemon.wait_for(lambda: len(daemon.children(root)) == 2, what="two children")
    term.start()
    term.wait_text("panel burst")
    term.keys("Enter")
    term.wait_text("subagents · 2 running")
    for text in ("xray the logs", "make it so"):
        term.keys("Down", text)
        term.wait_text(text)
        assert "Message " not in term.screen(), "m opened no message box"
        term.keys("C-u")
        term.wait_for(lambda screen: text not in screen, "the composer cleared")
    # No event can say a request was NOT sent: the app is another process and its link a connection
    # of its own, so nothing the test asks the daemon is ordered after it. A while for one to
    # arrive is the only way; on a loaded machine it can let a wrong request through, never fail.
    time.sleep(0.5)
    for job in (root, *(c["id"] for c in daemon.children(root))):
        untouched(daemon, job)


def test_text_typed_while_a_confirmation_opens_does_not_answer_it(daemon, term):
    job = daemon.spawn("say keep me", title="keep me")
    daemon.wait_state(job, "idle")
    term.start()
    term.wait_text("keep me")
    term.keys("a", "yes", "Enter")
    term.wait_text("Archive keep me?")
    time.sleep(0.5)  # as above: no event says the typed "yes" and Enter did nothing in another process
    assert "Archive keep me?" in term.screen()
    untouched(daemon, job)
    term.keys("n")
    term.wait_for(lambda screen: "Archive" not in screen, "the question gone")
    untouched(daemon, job)


def test_a_streaming_transcript_can_be_read_back(daemon, term):
    job = daemon.spawn("\n".join(f"say line {n}" for n in range(120)), title="streamer")
    daemon.wait_state(job, "idle")
    term.start()
    term.wait_text("streamer")
    term.keys("Enter")

    def said(line: str) -> Callable[[str], bool]:  # a line the job said (the prompt lists them too)
        return lambda screen: any(row.strip() == line for row in screen.splitlines())

    term.wait_for(said("line 119"), "the tail of the transcript")
    term.keys("PageUp", "PageUp")
    screen = term.wait_for(lambda s: not said("line 119")(s), "the view scrolled up")
    top = screen.splitlines()[1]
    daemon.call("send", job=job, text="work 0.2\n" + "\n".join(f"say fresh {n}" for n in range(5)))
    screen = term.wait_text("↓ ")
    assert "new · End follows" in screen
    daemon.wait_state(job, "idle")
    time.sleep(0.5)  # for the app, another process, to draw the last lines: a miss only passes, never fails
    screen = term.screen()
    assert screen.splitlines()[1] == top, "the lines being read stayed put while more arrived"
    assert not said("fresh 4")(screen)
    term.keys("End")
    # One capture can fall between the tail's frame and the status line's: wait for both.
    term.wait_for(lambda s: said("fresh 4")(s) and "new · End follows" not in s, "the tail again, its hint gone")
