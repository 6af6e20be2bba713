"""README's quick start is what CI runs: the test command there and in .ci/run are the same."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    section = ROOT.joinpath("README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_the_quick_start_is_exactly_two_commands():
    commands = quick_start_commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands)
    assert commands[0].endswith("roost demo")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_word_for_word():
    ci = ROOT.joinpath(".ci", "run").read_text().splitlines()
    assert quick_start_commands()[1] in ci


def worktree_example() -> list[str]:
    """README's worktree example, its commands as written (comments dropped)."""
    section = ROOT.joinpath("README.md").read_text().split("Parallel agents on one repository", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line.split("#", 1)[0].rstrip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def test_the_worktree_example_runs_as_written(daemon, tmp_path):
    """It spawned a job that left its file uncommitted, and `roost merge` refused it."""
    import json
    import subprocess
    import sys

    from gitrepo import git, make_repo

    make_repo(tmp_path / "my-repo", {"README": "a repo\n"})
    lines = worktree_example()
    spawn_end = next(i for i, line in enumerate(lines) if line.endswith("')"))
    roost_bin = str(Path(sys.executable).parent)
    env = {**daemon.env, "PATH": f"{roost_bin}:{daemon.env.get('PATH', '/usr/bin:/bin')}"}

    def sh(script: str) -> str:
        done = subprocess.run(["sh", "-ec", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, f"{script}\nexited {done.returncode}: {done.stderr}"
        return done.stdout

    job = sh("\n".join(lines[: spawn_end + 1]) + '\necho "$id"').strip().splitlines()[-1]
    daemon.wait_state(job, "idle")
    rest = [line for line in lines[spawn_end + 1:] if not line.startswith(("roost archive", "roost unarchive"))]
    out = sh(f"cd my-repo\nid={job}\n" + "\n".join(rest))
    assert "notes.txt" in out, out
    assert git(tmp_path / "my-repo", "show", "main:notes.txt") == "hello\n"
    assert json.loads(sh(f"roost show {job} --json"))["state"] == "idle"
