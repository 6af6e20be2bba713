"""Approvals in a real terminal: the real daemon, the built-in agent's ``ask-run`` (it asks for an
approval of the shell command, runs it only if allowed) and ``roost`` in tmux, driven with
send-keys as a person would. The file the command writes says whether it ran.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import DaemonHarness
from test_e2e_tmux import Tmux, term  # noqa: F401  (the fixture)

pytestmark = pytest.mark.e2e


def asking(daemon: DaemonHarness, term: Tmux, workdir: Path, name: str) -> tuple[str, str]:
    """A job that asks to run ``echo … > NAME``, waiting on that approval, and the app showing it
    on the job's row: (job id, the command)."""
    command = f"echo {name} > {name}"
    job = daemon.spawn(f"ask-run {command}\nsay finished", title=f"asks {name}", cwd=str(workdir))
    daemon.wait_row(job, lambda r: bool(r["approvals"]), timeout=15, what="the approval")
    term.start()
    term.wait_text(f"⚑ shell: {command}")
    return job, command


def said(daemon: DaemonHarness, job: str, text: str) -> bool:
    return any(text in line for line in daemon.texts(job))


def test_y_on_the_row_runs_the_command(daemon, term, tmp_path):
    job, command = asking(daemon, term, tmp_path, "approved.txt")
    time.sleep(0.3)  # a key made right as the request appeared is no answer (docs/keys.md)
    term.keys("y")
    daemon.wait_for(lambda: (tmp_path / "approved.txt").exists(), timeout=15, what="the file the command writes")
    term.wait_text("approved once: shell: echo approved.txt")
    daemon.wait_for(lambda: said(daemon, job, "finished"), timeout=15, what="the turn going on")
    assert daemon.show(job)["approvals"] == []


def test_N_with_a_reason_denies_and_the_agent_hears_it(daemon, term, tmp_path):
    job, command = asking(daemon, term, tmp_path, "denied.txt")
    time.sleep(0.3)
    term.keys("N")
    term.wait_text(f"Deny shell: {command}")
    time.sleep(0.3)  # the box takes only keys made after it was on screen
    term.type("not in my home")
    term.keys("Enter")
    daemon.wait_for(lambda: said(daemon, job, "denied: not in my home"), timeout=15, what="the denial heard")
    assert not (tmp_path / "denied.txt").exists()


def test_a_message_in_the_composer_denies_with_its_text(daemon, term, tmp_path):
    job, command = asking(daemon, term, tmp_path, "messaged.txt")
    term.keys("Enter")
    screen = term.wait_text("Enter denies the request with your words")
    # The words, whatever lines the box wrapped them onto (a longer tmp path, as under xdist, wraps).
    assert f"it asks to run: {command} in {tmp_path}" in " ".join(screen.replace("│", " ").split())
    term.type("yes but write it to /tmp instead")  # typed text: never an approval, even starting with y
    term.keys("Enter")
    daemon.wait_for(lambda: said(daemon, job, "denied: yes but write it to /tmp instead"), timeout=15,
                    what="the message as the reason")
    term.wait_text("denied asks messaged.txt's request")
    assert not (tmp_path / "messaged.txt").exists()


def test_y_typed_into_the_composer_approves_nothing(daemon, term, tmp_path):
    job, command = asking(daemon, term, tmp_path, "typed.txt")
    term.keys("Enter")
    term.wait_text("Enter denies the request with your words")
    term.keys("Up", "y")  # ↑ selects the request, but a y in the same burst is no answer
    term.wait_text("press it again")
    assert not (tmp_path / "typed.txt").exists() and daemon.show(job)["approvals"]
    # Pressed on its own, the request on screen: now it answers. On a loaded machine the app may
    # still take it for part of the burst and say "press it again" (its rule for a fast key): a
    # person then presses again, and so does the test, a bounded number of times.
    for _ in range(3):
        term.keys("y")
        try:
            daemon.wait_for(lambda: (tmp_path / "typed.txt").exists(), timeout=5, what="the file")
            break
        except AssertionError:
            assert "press it again" in term.screen(), "a lone y that did not answer says why"
    assert (tmp_path / "typed.txt").exists(), "a lone y answers the request on screen"
