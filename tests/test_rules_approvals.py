"""The approval rules as pure functions: allow rules, policies and their inheritance, the bounds of a
request, the timeout."""

from __future__ import annotations

import json

import pytest

from roost.config import ConfigError, parse_config
from roost.rules import approvals as r

CMD = {"command": "git status --short", "cwd": "/repo"}


@pytest.mark.parametrize("text, tool, what, matches", [
    ("shell", "shell", CMD, True),
    ("shell", "Bash", CMD, False),
    ("shell:git status --short", "shell", CMD, True),
    ("shell:git status", "shell", CMD, False),  # no '*': exactly the command
    ("shell:git status*", "shell", CMD, True),
    ("shell:git status*", "shell", {"command": "git status; rm -rf ~"}, False),
    ("shell:git status*", "shell", {"command": "git status && curl x | sh"}, False),
    ("shell:git status*", "shell", {"command": "git status > out"}, False),
    ("shell:git status*", "shell", {"command": "git status $(rm x)"}, False),
    ("shell:git status*", "shell", {"command": "git status\nrm x"}, False),
    ("shell:git*", "shell", {"command": "gitk"}, True),  # a prefix is a prefix: say 'git *' for the word
    ("Edit:/repo/a.py", "Edit", {"path": "/repo/a.py", "diff": "…"}, True),
    ("Edit:/repo/*", "Edit", {"path": "/repo/a.py; x"}, True),  # only commands are shell text
    ("WebFetch:https://docs.python.org/*", "WebFetch", {"url": "https://docs.python.org/3/"}, True),
    ("Task:x", "Task", {"input": {"x": 1}}, False),  # nothing to match a pattern against
])
def test_what_an_allow_rule_matches(text: str, tool: str, what: dict, matches: bool) -> None:
    assert r.parse_rule(text).matches(tool, what) is matches


@pytest.mark.parametrize("text, says", [
    ("", "TOOL or TOOL:PATTERN"), ("shell:", "nothing after ':'"), ("two words:x", "one word"),
    ("shell:a*b", "'*' may only end"), ("x" * (r.RULE_MAX + 1), f"at most {r.RULE_MAX}"),
])
def test_a_bad_rule_is_refused_saying_what_a_rule_is(text: str, says: str) -> None:
    with pytest.raises(r.RuleError, match=says):
        r.parse_rule(text)


def test_at_most_rules_max_rules_a_level() -> None:
    assert len(r.parse_rules(["shell"] * r.RULES_MAX)) == r.RULES_MAX
    with pytest.raises(r.RuleError, match=f"at most {r.RULES_MAX}"):
        r.parse_rules(["shell"] * (r.RULES_MAX + 1))


@pytest.mark.parametrize("tool, what, rule", [
    ("shell", CMD, "shell:git status*"),
    ("shell", {"command": "ls -la"}, "shell:ls*"),
    ("shell", {"command": "rm -rf build"}, "shell:rm*"),
    ("shell", {"command": "cat a;rm b"}, "shell:cat*"),  # the prefix never covers what follows `;`
    ("shell", {"command": "ls *.py"}, "shell:ls*"),
    ("shell", {"command": "$(curl x)"}, "shell:$(curl x)"),  # exactly itself, never any command
    ("Edit", {"path": "/repo/a.py", "diff": "…"}, "Edit:/repo/a.py"),
    ("Task", {"input": {}}, "Task"),
])
def test_the_rule_approve_for_the_job_adds(tool: str, what: dict, rule: str) -> None:
    assert r.rule_for(tool, what) == rule
    assert r.parse_rule(rule).matches(tool, what) or ";" in what["command"]


def test_no_rule_is_made_up_for_a_command_it_cannot_cover_exactly() -> None:
    with pytest.raises(r.RuleError, match="give the rule"):
        r.rule_for("shell", {"command": "$(ls *)"})


def test_the_strictest_level_decides_and_a_child_is_never_looser() -> None:
    ask_root = r.child_policy([], "ask", ["shell:ls*"])
    assert r.decide(ask_root, [], "shell", {"command": "ls -la"}).verdict == "allow"
    assert r.decide(ask_root, [], "shell", CMD).verdict == "ask"
    child = r.child_policy(ask_root, "allow", ["shell:git*"])
    assert r.decide(child, [], "shell", CMD).verdict == "ask"  # its own rule, not its parent's
    assert r.decide(child, [], "shell", {"command": "ls"}).verdict == "allow"
    denied = r.decide(r.child_policy(r.child_policy([], "deny", []), "allow", []), [], "shell", CMD)
    assert denied == r.Decision("deny", "approvals = 'deny' (its root's policy)")
    assert r.decide([], [], "shell", CMD).verdict == "ask"  # a record with no policy asks


def test_a_rule_a_person_granted_allows_whatever_the_levels_say() -> None:
    policy = r.child_policy(r.child_policy([], "deny", []), "ask", [])
    decision = r.decide(policy, ["shell:git status*"], "shell", CMD)
    assert decision.verdict == "allow" and "a person granted" in decision.why


def test_a_child_policy_refuses_a_mode_it_does_not_know() -> None:
    with pytest.raises(r.RuleError, match="ask, deny, allow"):
        r.child_policy([], "always", [])


def test_what_is_kept_as_it_is_up_to_its_bound() -> None:
    what = {"command": "x" * (r.WHAT_MAX - 40), "cwd": "/r"}
    assert len(json.dumps(what).encode()) <= r.WHAT_MAX
    assert r.bound_what(what) == what


@pytest.mark.parametrize("size", [r.WHAT_MAX, 10 * r.WHAT_MAX, 900_000])
def test_what_past_its_bound_is_cut_in_the_middle_saying_how_much(size: int) -> None:
    what = {"path": "/repo/a.py", "diff": "+" * size + "END"}
    kept = r.bound_what(what)
    assert len(json.dumps(kept, ensure_ascii=False).encode()) <= r.WHAT_MAX
    assert kept["path"] == "/repo/a.py" and kept["diff"].endswith("END") and kept["cut"] > 0
    assert len(kept["diff"]) + kept["cut"] >= len(what["diff"])


def test_what_that_is_not_an_object_or_has_many_keys_is_bounded_too() -> None:
    assert r.bound_what(["a"]) == {"input": ["a"]}
    many = r.bound_what({f"k{i}": i for i in range(r.WHAT_KEYS + 5)})
    assert len(many) == r.WHAT_KEYS + 1 and many["cut_keys"] == 5 and "cut" not in many
    nested = r.bound_what({"input": {"text": "y" * (3 * r.WHAT_MAX)}})
    assert isinstance(nested["input"], str) and len(json.dumps(nested).encode()) <= r.WHAT_MAX


def test_the_timeout_counts_from_the_asked_time_and_zero_never_comes() -> None:
    assert r.timeout_at(100.0, 60) == 160.0 and r.timeout_at(100.0, 0) is None
    assert r.next_timeout([100.0, 50.0], 60) == 110.0 and r.next_timeout([], 60) is None
    assert r.timed_out({"b": 100.0, "a": 50.0, "c": 150.0}, 60, 160.0) == ["a", "b"]
    assert r.timed_out({"a": 50.0}, 0, 10 ** 9) == []


def test_what_people_read_of_an_approval() -> None:
    entry = {"id": "ap-x", "tool": "shell", "what": {"command": "echo hi > f", "cwd": "/repo"}}
    assert r.describe(entry) == "shell: echo hi > f (in /repo)"
    assert r.pending_line([entry, entry]) == "approve? shell: echo hi > f (in /repo) (+1 more)"
    assert r.entry_text({**entry, "asked": True, "description": "List files"}) == \
        "asks ap-x shell: echo hi > f (in /repo) (the model says: List files)"
    assert r.entry_text({**entry, "decision": "deny", "by": "a stop", "reason": "stopped by a person"}) == \
        "denied ap-x shell: echo hi > f (in /repo) by a stop: stopped by a person"


@pytest.mark.parametrize("text, key, says", [
    ('[drivers.x]\nkind = "builtin"\napprovals = "alow"\n', "drivers.x.approvals", "did you mean 'allow'"),
    ('[drivers.x]\nkind = "builtin"\napproval_rules = ["shell:"]\n', "drivers.x.approval_rules", "nothing after"),
    ('[drivers.x]\nkind = "builtin"\napproval_rules = "shell"\n', "drivers.x.approval_rules", "array of strings"),
    ("approval_timeout = -1\n", "approval_timeout", "seconds >= 0"),
    ('approval_timout = 5\n', "approval_timout", "did you mean 'approval_timeout'"),
])
def test_a_policy_key_with_a_typo_is_refused_with_its_file_and_key(text: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(text, "/cfg/roost.toml")
    assert exc.value.file == "/cfg/roost.toml" and exc.value.key == key and says in exc.value.message


def test_a_profiles_policy_and_the_default_timeout() -> None:
    cfg = parse_config('[drivers.x]\nkind = "builtin"\napprovals = "deny"\napproval_rules = ["shell:ls*"]\n', "f")
    assert (cfg.driver("x").approvals, cfg.driver("x").approval_rules) == ("deny", ("shell:ls*",))
    assert cfg.approval_timeout == 3600.0 and cfg.driver("builtin").approvals is None
