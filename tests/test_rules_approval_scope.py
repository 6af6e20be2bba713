"""Rules as narrow as what the person saw (issue 31, item 6), as pure functions: "approve for this job"
never proposes a rule wider than the command approved (wrappers, assignments, git's own ways to run
other things), git's prefix never covers ``-c``, ``--config-env`` or an alias, a path is matched as
it will be reached, and a change of several paths only when every one matches."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roost.rules import approvals as r

WRAPPED = ["env FOO=1 ls", "sh -c 'ls'", "bash -c ls", "timeout 5 ls", "nice ls", "xargs ls", "sudo ls",
           "FOO=1 ls", "python3 -c 'print(1)'", "nohup ls", "find . -name x"]
#: What each wrapped command's old rule allowed too: another program behind the same wrapper.
WIDER = ["env FOO=1 curl evil.example", "sh -c 'curl evil.example'", "bash -c rm", "timeout 5 rm -rf ~",
         "nice rm -rf ~", "xargs rm", "sudo rm -rf /", "FOO=1 rm -rf ~", "python3 -c 'import os'",
         "nohup rm -rf ~", "find . -delete"]


@pytest.mark.parametrize("command, other", zip(WRAPPED, WIDER))
def test_approve_for_the_job_of_a_wrapped_command_is_that_command_exactly(command: str, other: str) -> None:
    rule = r.rule_for("shell", {"command": command})
    assert rule == f"shell:{command}"
    assert r.parse_rule(rule).matches("shell", {"command": command})
    assert not r.parse_rule(rule).matches("shell", {"command": other})


@pytest.mark.parametrize("command", [
    "git -c alias.x='!touch PWNED' x", "git -c core.pager='touch PWNED' log", "git --config-env=core.pager=X log",
    "git -C /elsewhere status", "git --git-dir=/other/.git status", "git st", "git x --force",
    "git config core.pager 'touch PWNED'", "git log --ext-diff", "git rebase -x 'touch PWNED' HEAD~1",
    "git grep -Otouch x", "git bisect run touch PWNED", "git submodule foreach touch PWNED",
])
def test_gits_ways_to_run_other_things_never_pass_a_git_prefix_rule(command: str) -> None:
    for rule in ("shell:git*", "shell:git *"):
        assert not r.parse_rule(rule).matches("shell", {"command": command}), (rule, command)
    assert r.rule_for("shell", {"command": command}) == f"shell:{command}"


def test_gits_own_commands_still_pass_its_prefix_and_a_named_config_rule_covers_config() -> None:
    for command in ("git status", "git log --oneline -5", "git diff HEAD", "git commit -c HEAD"):
        assert r.parse_rule("shell:git *").matches("shell", {"command": command}), command
    assert r.rule_for("shell", {"command": "git status --short"}) == "shell:git status*"
    assert r.parse_rule("shell:git config*").matches("shell", {"command": "git config --get user.name"})


@pytest.mark.parametrize("path, matches", [
    ("/repo/a.py", True), ("/repo/sub/../a.py", True), ("/repo/../home/u/.bashrc", False),
    ("/repo/./../etc/passwd", False), ("/repository/a.py", False), ("a.py", False),
])
def test_a_path_is_matched_as_it_will_be_reached(path: str, matches: bool) -> None:
    assert r.parse_rule("Edit:/repo/*").matches("Edit", {"path": path}) is matches


def test_a_relative_path_is_reached_from_the_cwd_the_request_names() -> None:
    rule = r.parse_rule("Edit:/repo/*")
    assert rule.matches("apply_patch", {"path": "a.py"}) is False
    assert r.parse_rule("apply_patch:/repo/*").matches("apply_patch", {"path": "a.py", "cwd": "/repo"})
    assert not r.parse_rule("apply_patch:/repo/*").matches("apply_patch", {"path": "../x", "cwd": "/repo"})


def test_a_change_of_several_paths_matches_only_when_every_path_does() -> None:
    rule = r.parse_rule("apply_patch:/repo/*")
    assert rule.matches("apply_patch", {"path": "/repo/a.py\n/repo/b.py", "diff": "…"})
    assert not rule.matches("apply_patch", {"path": "/repo/a.py\n/home/u/.bashrc", "diff": "…"})
    assert not rule.matches("apply_patch", {"path": "/repo/a.py\n/repo/../home/u/.bashrc", "diff": "…"})
    exact = r.parse_rule("apply_patch:/repo/a.py")
    assert not exact.matches("apply_patch", {"path": "/repo/a.py\n/home/u/.bashrc"})


SEGMENT = st.sampled_from(["a", "b", "..", ".", "repo", "home", ""])


@settings(max_examples=400, deadline=None)
@given(st.lists(SEGMENT, min_size=1, max_size=8))
def test_a_path_rule_never_allows_a_path_that_reaches_outside_its_directory(parts: list[str]) -> None:
    path = "/repo/" + "/".join(parts)
    segments: list[str] = []
    for part in path.split("/"):
        if part == "..":
            segments = segments[:-1]
        elif part not in ("", "."):
            segments.append(part)
    inside = segments[:1] == ["repo"] and len(segments) > 1
    assert r.parse_rule("Edit:/repo/*").matches("Edit", {"path": path}) is inside, path


WORD = st.text(alphabet="abcdefgh-=./'\" ", min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted({"env", "sh", "bash", "timeout", "nice", "xargs", "sudo", "FOO=1", "git"})),
       st.lists(WORD, max_size=4), st.lists(WORD, min_size=1, max_size=4))
def test_the_rule_proposed_for_a_command_never_allows_another_program_behind_the_same_words(
        head: str, middle: list[str], tail: list[str]) -> None:
    """Whatever rule is proposed for ``head middle``, a command that only adds words after it is
    allowed only when the proposed rule is a prefix of a plain program's words, never a wrapper's."""
    command = " ".join([head, *middle])
    try:
        rule = r.parse_rule(r.rule_for("shell", {"command": command}))
    except r.RuleError:
        return  # the person gives the rule
    longer = command + " " + " ".join(tail)
    if rule.matches("shell", {"command": longer}) and longer != command:
        assert head == "git" and rule.pattern is not None and rule.pattern.endswith("*"), (command, rule, longer)
        assert not r.parse_rule(str(rule)).matches("shell", {"command": "git -c x=y " + " ".join(tail)})
