"""`roost diff` of a job's worktree with ``--diff-mb`` MB of untracked changes (issue 18): the whole
CLI run to a file, cold (the daemon makes the snapshot: one git run) and warm (the pages come
from the snapshot), beside `git diff` of the same change to a file (what git alone costs); the
daemon's peak RSS growth over the runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from pathlib import Path

from harness import Daemon, Home, Result, median, timed


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def _repo(where: Path) -> Path:
    repo = where / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("hello\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-qm", "first")
    return repo


def _git_alone(worktree: Path) -> float:
    """`git diff` of the worktree's changes, its untracked files as intent-to-add in a copy of its index."""
    index = worktree.parent / "bench.index"
    shutil.copyfile(worktree / _git(worktree, "rev-parse", "--git-path", "index").strip(), index)
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    _git(worktree, "add", "-N", "--all", env=env)
    return timed(["git", "-C", str(worktree), "diff", "HEAD"], env)


def bench_diff(opts: argparse.Namespace) -> list[Result]:
    """`roost diff` of --diff-mb MB of changes, cold and warm, beside `git diff` of the same."""
    if shutil.which("git") is None:
        print("  diff skipped: no git", flush=True)
        return []
    home = Home(tag="diff")
    try:
        with Daemon(home) as d:
            d.start()
            repo = _repo(home.work)
            with d.client() as client:
                job = client.call("spawn", prompt="say hi", cwd=str(repo), worktree=True)
                while client.call("show", job=job["id"])["state"] != "idle":
                    time.sleep(0.05)
            worktree = Path(job["worktree"])
            line = b"%07d " + b"x" * 71 + b"\n"
            size = opts.diff_mb * 1024 * 1024
            cold, warm, alone = [], [], []
            hwm = d.hwm_kb()
            for run in range(opts.diff_runs):
                (worktree / "big.log").write_bytes(b"".join(line % (i + run) for i in range(size // 80)))
                with open(os.devnull, "wb") as sink:
                    cold.append(timed(home.cli("diff", job["id"]), home.env, stdout=sink))
                    warm.append(timed(home.cli("diff", job["id"]), home.env, stdout=sink))
                alone.append(_git_alone(worktree))
            grew = (d.hwm_kb() - hwm) / 1024
    finally:
        home.remove()
    mb = opts.diff_mb
    return [
        Result("diff", f"`roost diff`, {mb} MB untracked, cold (one git run, then every page)", median(cold), "s",
               median(alone), "`git diff` of the same to /dev/null", "< 5 s", median(cold) < 5),
        Result("diff", f"`roost diff`, {mb} MB, warm (every page from the snapshot)", median(warm), "s",
               median(alone), "`git diff` of the same"),
        Result("diff", f"daemon peak RSS growth over {opts.diff_runs} cold and warm runs", grew, "MB",
               target="bounded (< 16 MB)", met=grew < 16),
    ]
