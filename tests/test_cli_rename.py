"""`roost rename`, `roost unarchive` and `roost ls --archived`, as a person runs them against a real daemon."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from conftest import DaemonHarness


@pytest.fixture
def roost(daemon: DaemonHarness) -> Any:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "roost.cli", *args], env=daemon.env, capture_output=True,
                              text=True, timeout=60)

    return run


def test_rename_gives_a_job_a_new_title(daemon: DaemonHarness, roost: Any) -> None:
    job = daemon.spawn("say hi", title="first try")
    proc = roost("rename", job, "  fix   the login\tbug ")
    assert (proc.returncode, proc.stdout) == (0, f"renamed {job}\n")
    assert daemon.show(job)["title"] == "fix the login bug"  # the daemon keeps it on one line
    assert "fix the login bug" in roost("ls").stdout


def test_rename_refusals_say_why(daemon: DaemonHarness, roost: Any) -> None:
    job = daemon.spawn("say hi")
    unknown = roost("rename", "zzzz", "x")
    assert unknown.returncode == 2 and "zzzz" in unknown.stderr and not unknown.stdout
    empty = roost("rename", job, "   ")
    assert empty.returncode == 1 and "title" in empty.stderr
    assert roost("rename", job).returncode == 2  # click: TITLE is missing


def test_ls_archived_lists_only_archived_jobs_and_unarchive_brings_a_tree_back(
        daemon: DaemonHarness, roost: Any) -> None:
    parent = daemon.spawn("spawn say from the child\nwait-children", title="the parent")
    kept = daemon.spawn("say still here", title="kept")
    daemon.wait_for(lambda: daemon.children(parent), what="the child")
    (child,) = [r["id"] for r in daemon.children(parent)]
    daemon.wait_state(parent, "idle", "done")
    assert roost("ls", "--archived").stdout == "nothing is archived\n"
    assert roost("archive", parent).returncode == 0

    listing = roost("ls", "--archived").stdout.splitlines()
    # roost ls prints the app's two marks, then the id
    assert [line.split()[2] for line in listing] == [parent, child]
    assert listing[1].startswith("  ")  # the child under its parent
    assert kept not in roost("ls", "--archived", "--all").stdout
    records = json.loads(roost("ls", "--archived", "--json").stdout)
    assert sorted(r["id"] for r in records) == sorted([parent, child]) and all(r["archived_at"] for r in records)
    assert parent not in roost("ls").stdout

    proc = roost("unarchive", parent)
    assert (proc.returncode, proc.stdout) == (0, f"unarchived {parent} and 1 below it\n")
    assert roost("ls", "--archived").stdout == "nothing is archived\n"
    shown = roost("ls").stdout
    assert parent in shown and child in shown
    assert daemon.show(child)["archived_at"] is None


def test_unarchive_of_an_unknown_job_is_refused(roost: Any) -> None:
    proc = roost("unarchive", "zzzz")
    assert proc.returncode == 2 and "zzzz" in proc.stderr
