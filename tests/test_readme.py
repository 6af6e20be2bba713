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
