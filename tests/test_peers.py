"""Who may be a person (roost/daemon/server/peers.py), on real processes: a descendant of the daemon never
is, nor a process that carries a worker's mark, nor one that cannot be read; others are. A process
below a known shim (by pid and start time) is that shim's job."""

from __future__ import annotations

import os
import subprocess
import sys

from roost.daemon.server.peers import daemons_own, shim_owner
from roost.proctree import MARK_VAR, read_proc

SLEEP = [sys.executable, "-c", "import time; time.sleep(30)"]


def _child(**env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(SLEEP, env={**{k: v for k, v in os.environ.items() if k != MARK_VAR}, **env})


def test_a_descendant_of_the_daemon_is_never_a_person():
    child = _child()
    try:  # this test process plays the daemon, then its parent does: its child is theirs too
        assert "descends from the daemon" in (daemons_own(child.pid, daemon=os.getpid()) or "")
        assert "descends from the daemon" in (daemons_own(child.pid, daemon=os.getppid()) or "")
    finally:
        child.kill()
        child.wait()


def test_a_process_outside_the_tree_is_a_person_unless_it_carries_a_mark():
    plain, marked = _child(), _child(**{MARK_VAR: "0123abcd"})
    try:
        stranger = 2 ** 22 + 1  # no daemon of theirs: a pid that is no ancestor of either
        assert daemons_own(plain.pid, daemon=stranger) is None
        assert "carries a worker's mark" in (daemons_own(marked.pid, daemon=stranger) or "")
    finally:
        for proc in (plain, marked):
            proc.kill()
            proc.wait()


def test_a_process_that_is_gone_is_not_a_person():
    gone = _child()
    gone.kill()
    gone.wait()
    assert "gone" in (daemons_own(gone.pid, daemon=2 ** 22 + 1) or "")
    assert "gone" in (daemons_own(0) or "")


def test_a_process_below_a_known_shim_is_its_job_by_pid_and_start_time():
    below = f"{sys.executable} -c 'import os, time; print(os.getpid(), flush=True); time.sleep(30)'; :"
    shell = subprocess.Popen(["sh", "-c", below], stdout=subprocess.PIPE)
    try:  # the shell plays a shim; the Python below it, its job's process
        assert shell.stdout is not None
        grandchild = int(shell.stdout.readline())
        shim = read_proc(shell.pid)
        assert shim is not None
        known = {(shell.pid, shim.start): "k3x9"}
        assert shim_owner(grandchild, known) == shim_owner(shell.pid, known) == "k3x9"
        assert shim_owner(grandchild, {(shell.pid, shim.start + 1): "k3x9"}) is None, "another start: another process"
        assert shim_owner(os.getpid(), known) is None, "not below it"
        assert shim_owner(2 ** 22 + 1, known) is None, "gone"
    finally:
        shell.kill()
        shell.wait()
