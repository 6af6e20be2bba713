"""Quotas with a real daemon and real workers (issue 31, item 11): a job that spawns from its own
shell is held to its tree's caps; binary output costs the store a note, not six bytes a byte; a
job's output past max_timeline_bytes keeps its newest part. docs/reliability.md#quotas."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from test_attacks import attack_line

MB = 1024 * 1024
SHELL = f"""
[drivers.sh]
kind = "command"
command = ["sh", "-c", "{{prompt}}"]
"""


def _output_stored(daemon, job: str) -> int:
    """Bytes of the job's output entries in the store file, read beside the daemon."""
    with sqlite3.connect(f"file:{daemon.paths.store}?mode=ro", uri=True) as db:
        return db.execute("SELECT COALESCE(SUM(LENGTH(CAST(data AS BLOB))), 0) FROM timeline WHERE job=? "
                          "AND kind IN ('text', 'tool', 'note', 'error')", (job,)).fetchone()[0]


@pytest.mark.parametrize("key, refused", [
    ("max_spawns_per_minute", "spawned 4 jobs in the last 60 s, its cap (max_spawns_per_minute = 4)"),
    ("max_tree_jobs", "holds 4 jobs, its cap (max_tree_jobs = 4)"),
])
def test_a_job_spawning_from_its_own_shell_is_held_to_its_trees_cap(daemon_factory, tmp_path, key, refused):
    other = "max_tree_jobs" if key == "max_spawns_per_minute" else "max_spawns_per_minute"
    daemon = daemon_factory(f"{key} = 4\n{other} = 0\n")
    outs = [tmp_path / f"spawn{n}" for n in range(7)]
    script = "\n".join([*(attack_line(out, "spawn", {"prompt": "say hi", "cwd": str(tmp_path)}) for out in outs),
                        "say tried"])
    job = daemon.spawn(script, cwd=str(tmp_path))
    row = daemon.wait_state(job, "idle", "failed", timeout=60)
    assert row["state"] == "idle", row["reason"]
    said = [out.read_text() for out in outs]
    taken = 4 if key == "max_spawns_per_minute" else 3  # the tree's root is one of its 4 jobs
    assert said[:taken] == ["ok\n"] * taken
    for text in said[taken:]:
        assert text.startswith(f"quota: spawn refused: the tree of {job} ") and refused in text, text
    assert len(daemon.call("children", job=job)["rows"]) == taken


def test_binary_output_is_one_note_of_its_size_and_the_text_around_it_stays(daemon_factory):
    daemon = daemon_factory(SHELL)
    size = 8 * MB
    job = daemon.spawn(f"echo before; head -c {size} /dev/zero; echo after", driver="sh")
    row = daemon.wait_state(job, "idle", "failed", timeout=60)
    assert row["state"] == "idle", row["reason"]
    entries = daemon.timeline(job)
    assert "".join(daemon.texts(job)).split() == ["before", "after"]
    notes = [e["data"]["message"] for e in entries if e["kind"] == "note"]
    assert notes == [f"{size} bytes of binary output (not kept: mostly control characters or bytes that are not UTF-8)"]
    assert _output_stored(daemon, job) < 4096  # was 6 bytes a NUL: 48 MB


def test_output_past_max_timeline_bytes_keeps_the_newest_and_a_note_says_what_went(daemon_factory):
    daemon = daemon_factory(f"max_timeline_bytes = {MB}\n" + SHELL)
    job = daemon.spawn("seq -w 1 400000", driver="sh")  # 2.8 MB of lines of 7 characters
    row = daemon.wait_state(job, "idle", "failed", timeout=120)
    assert row["state"] == "idle", row["reason"]
    assert _output_stored(daemon, job) <= MB
    text = "".join(daemon.texts(job))
    assert text.endswith("399999\n400000\n")
    first = int(text.split("\n")[1])  # the first whole line kept
    assert first > 200000 and text[text.index("\n") + 1:] == "".join(f"{n:06d}\n" for n in range(first, 400001))
    notes = [e["data"]["message"] for e in daemon.timeline(job) if e["kind"] == "note"]
    assert notes and all("reached its bound of 1048576 bytes (max_timeline_bytes)" in n for n in notes)
    assert "spawned" in {e["kind"] for e in daemon.timeline(job)}
