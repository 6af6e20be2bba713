"""`roost diff` of 40 MB of changes: git runs once for the state, every page comes from that, the
whole diff prints in under 5 s and the daemon's memory does not grow with it (docs/performance.md)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import DaemonHarness
from tests.gitrepo import make_repo

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

#: Bytes of the untracked file: 40 MB of 80-byte lines.
BIG = 40 * 1024 * 1024


def peak_kb(pid: int) -> int:
    """The process's peak resident size (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_40_mb_diff_prints_in_under_5_s_from_one_git_run(roost_home: Path, tmp_path: Path) -> None:
    calls = tmp_path / "git-calls.log"
    wrapper = tmp_path / "bin"
    wrapper.mkdir()
    (wrapper / "git").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{calls}"\nexec "{shutil.which("git")}" "$@"\n')
    (wrapper / "git").chmod(0o755)
    daemon = DaemonHarness(roost_home)
    daemon.env["PATH"] = f"{wrapper}:{daemon.env['PATH']}"
    daemon.write_config("")
    daemon.start()
    try:
        repo = make_repo(tmp_path / "repo", {"README": "hello\n"})
        job = daemon.wait_state(daemon.spawn("say hi", cwd=str(repo), worktree=True), "idle")
        line = b"%07d " + b"x" * 71 + b"\n"
        Path(job["worktree"], "big.log").write_bytes(b"".join(line % i for i in range(BIG // 80)))
        assert daemon.proc is not None
        before = peak_kb(daemon.proc.pid)
        calls.write_text("")
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "roost.cli", "diff", job["id"]], env=daemon.env,
                             capture_output=True, check=True).stdout
        took = time.perf_counter() - start
        grew_mb = (peak_kb(daemon.proc.pid) - before) / 1024
        assert len(out) > BIG and out.count(b"\n+0") == BIG // 80
        patches = [c for c in calls.read_text().splitlines() if " diff " in f" {c} "]
        assert len(patches) == 1, patches  # once for the state, not once per 128 KiB page
        assert took < 5.0, f"roost diff of {len(out) >> 20} MB took {took:.1f}s"
        assert grew_mb < 16, f"the daemon's peak RSS grew by {grew_mb:.0f} MB"
        print(f"\n40 MB diff: {took:.2f}s, daemon peak RSS +{grew_mb:.1f} MB")
    finally:
        daemon.stop()
