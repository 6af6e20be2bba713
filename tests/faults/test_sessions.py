"""A damaged session file costs only its bad lines (issue 9, item 3), and a session file is
owner-only whatever the umask (item 7): through real resumes of the built-in agent."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from conftest import DaemonHarness

#: Lines a crash, a disk error or another program could leave: not UTF-8, JSON that is not an
#: object, entries with fields of the wrong type, a line cut short.
BAD_LINES = [b"\xff\xfe not utf-8 \x80", b"[1, 2]", b'"a string"', b"null", b'{"role": "user", "text": 5}',
             b'{"type": "pending", "lines": [1, 2]}', b'{"role": "assistant", "te']


def closed_after(daemon, prompt: str, state: str) -> tuple[str, Path]:
    """A job that ran ``prompt`` to ``state`` and whose worker was closed: its next message resumes it."""
    job = daemon.spawn(prompt)
    daemon.wait_state(job, state)
    assert daemon.call("close", job=job)["closed"]
    row = daemon.wait_row(job, lambda r: not r["worker_up"], what="the worker to close")
    return job, Path(row["session"])


def damage(session: Path) -> None:
    with open(session, "ab") as fh:
        fh.write(b"\n".join(BAD_LINES))  # the last one without its newline, as a crash leaves it


def test_a_resume_skips_the_bad_lines_keeps_the_rest_and_says_so_in_the_log(daemon):
    job, session = closed_after(daemon, "say first words", "idle")
    damage(session)
    assert daemon.call("send", job=job, text="recall")["outcome"] == "resumed"
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"].startswith("earlier prompts"))
    assert daemon.texts(job)[-1] == "earlier prompts: say first words", "the history before the damage"
    log = daemon.paths.job_log(job).read_text(errors="replace")
    assert f"skipped {len(BAD_LINES)} unreadable lines of {session}" in log


def test_an_open_question_survives_damage_after_it(daemon):
    job, session = closed_after(daemon, "ask which branch?\nsay merging", "waiting")
    damage(session)
    daemon.call("send", job=job, text="main")
    daemon.wait_state(job, "idle")
    assert daemon.texts(job)[-2:] == ["thanks, continuing with: main", "merging"]


def test_the_session_file_is_created_owner_only_whatever_the_umask(roost_home):
    daemon = DaemonHarness(roost_home)
    daemon.write_config("")  # before the umask changes: a config others may write is refused
    old = os.umask(0)  # the daemon and its workers inherit it
    try:
        daemon.start()
    finally:
        os.umask(old)
    try:
        job = daemon.spawn("say private")
        row = daemon.wait_state(job, "idle")
        assert stat.S_IMODE(os.stat(row["session"]).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(Path(row["session"]).parent).st_mode) == 0o700
    finally:
        daemon.stop()
