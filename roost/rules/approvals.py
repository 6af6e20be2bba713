"""The approval rules: what a job's policy decides about a permission request, what an allow rule
matches, how a child's policy is bounded by its parent's, how big a request may be, and when an
unanswered one times out. Pure functions (the clock passed in); the daemon's approvals module
applies them. docs/agents.md#approvals explains them to people.

A policy is a list of *levels*, the root job's first and the job's own last: each level a mode
(``ask``, ``deny`` or ``allow``) and its allow rules. Each level gives a verdict on a request —
``allow`` for a mode of allow or a matching rule, else its mode — and the strictest verdict wins
(deny, then ask, then allow). So a child can never be looser than its parent: its own ``allow`` or
its own rules count only where every level above allows too.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from roost.models import cut_middle
from roost.rules import command_words as words
from roost.protocol import APPROVAL_MODES

MODES = APPROVAL_MODES
#: Verdicts from the strictest down: the strictest verdict of a policy's levels is its decision.
_STRICTNESS = {"deny": 0, "ask": 1, "allow": 2}
#: How many bytes of JSON an approval's ``what`` keeps (its strings cut in the middle past it).
WHAT_MAX = 8 * 1024
#: How many keys of ``what`` are kept, and the longest tool name, id, description or subagent kept.
WHAT_KEYS = 16
WORD_MAX = 200
DESCRIPTION_MAX = 2000
REASON_MAX = 2000
#: The most characters of a request's whole text one ``approval_text`` page carries (escaped, well
#: under MAX_FRAME).
TEXT_PAGE = 128 * 1024
#: How many approvals one job may have pending; one more is denied at once, saying so.
PENDING_MAX = 8
#: How many allow rules one policy level (or a job's granted rules) holds, and how long one may be.
RULES_MAX = 32
RULE_MAX = 500
#: Characters after which a prefix rule (``git status*``) no longer matches a command: what would
#: chain, pipe, redirect or substitute another command after the one the rule names.
SHELL_CONTROL = re.compile(r"[;&|<>`$()\n\r]")
#: The key of ``what`` a rule's pattern is matched against, by the kind of request.
SUBJECT_KEYS = ("command", "path", "url")


class RuleError(ValueError):
    """An allow rule that cannot be read; the message says what was expected."""


@dataclass(frozen=True)
class Rule:
    """``TOOL`` (any use of the tool) or ``TOOL:PATTERN``: PATTERN is the command, path or URL
    exactly, or, ending in ``*``, a prefix of it (for a command, with nothing after the prefix that
    chains or redirects another command)."""

    tool: str
    pattern: str | None

    def __str__(self) -> str:
        return self.tool if self.pattern is None else f"{self.tool}:{self.pattern}"

    @property
    def wildcard(self) -> bool:
        """Whether it covers more than one exact request (the tool alone, or a prefix)."""
        return self.pattern is None or self.pattern.endswith("*")

    def matches(self, tool: str, what: Mapping[str, Any], whole: bool = True) -> bool:
        """Whether it allows this request. A request not kept whole (too long to store and show) is
        never allowed by a wildcard: the person reads it first. A command's prefix never covers what
        chains another command after it, nor git's ways to run what the rule does not say; a path is
        matched as it will be reached (``..`` taken out), and a change of several paths (one a line)
        only when every one of them matches."""
        if tool != self.tool or (self.wildcard and not whole):
            return False
        if self.pattern is None:
            return True
        subject = request_subject(what)
        if subject is None:
            return False
        key, value = subject
        if key == "path":
            return self._paths(value.split("\n"), what.get("cwd"))
        if not self.pattern.endswith("*"):
            return value == self.pattern
        prefix = self.pattern[:-1]
        if not value.startswith(prefix):
            return False
        if key != "command":
            return True
        return not (SHELL_CONTROL.search(value[len(prefix):]) or words.words(value) is None
                    or words.git_widened(value, prefix))

    def _paths(self, paths: list[str], cwd: Any) -> bool:
        base, pattern = cwd if isinstance(cwd, str) else None, self.pattern or ""
        reached = [words.normal_path(p, base) for p in paths]
        if not pattern.endswith("*"):
            return reached == [words.normal_path(p, base) for p in pattern.split("\n")]
        prefix = pattern[:-1]
        if prefix.endswith("/"):  # normpath would take the slash that makes it a directory
            prefix = words.normal_path(prefix, base).rstrip("/") + "/"
        return all(p.startswith(prefix) for p in reached)


def parse_rule(text: str) -> Rule:
    """One allow rule from its text; RuleError saying what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise RuleError("an allow rule is TOOL or TOOL:PATTERN (e.g. 'shell:git status', 'Bash:npm test*'), "
                        f"got {text!r}")
    if len(text) > RULE_MAX:
        raise RuleError(f"an allow rule is at most {RULE_MAX} characters, got {len(text)}")
    tool, sep, pattern = text.partition(":")
    tool = tool.strip()
    if not tool or any(c.isspace() for c in tool):
        raise RuleError(f"allow rule {text!r}: the tool before ':' is one word (e.g. 'shell', 'Bash', 'Edit')")
    if sep and not pattern:
        raise RuleError(f"allow rule {text!r}: nothing after ':'; give a pattern, or the tool alone for any use")
    if sep and "*" in pattern[:-1]:
        raise RuleError(f"allow rule {text!r}: '*' may only end a pattern (a prefix), not stand inside it")
    return Rule(tool, pattern if sep else None)


def parse_rules(texts: Iterable[str]) -> tuple[Rule, ...]:
    """Every rule of a list, at most RULES_MAX of them; RuleError for the first bad one."""
    rules = tuple(parse_rule(t) for t in texts)
    if len(rules) > RULES_MAX:
        raise RuleError(f"at most {RULES_MAX} allow rules, got {len(rules)}")
    return rules


def request_subject(what: Mapping[str, Any]) -> tuple[str, str] | None:
    """What a rule's pattern is matched against: the command, path or URL of a request (key, text)."""
    for key in SUBJECT_KEYS:
        value = what.get(key)
        if isinstance(value, str):
            return key, value
    return None


def rule_for(tool: str, what: Mapping[str, Any]) -> str:
    """The rule "approve for this job" adds unless the person edits it, never wider than what the
    person saw: the same tool with the same command prefix (the program and its next word unless that
    is an option: ``git status*``), the same path or URL, or the tool alone for a request with none
    of those. A command that does not start with a plain word, that runs another command through its
    arguments (``env``, ``sh -c``, ``timeout``, ``sudo``, ``VAR=x cmd`` …) or that git would widen
    (``git -c``, an alias) gets a rule for exactly itself; RuleError when even that cannot be written
    (a ``*`` in it, or too long): the person gives the rule."""
    subject = request_subject(what)
    if subject is None:
        return tool
    key, value = subject
    plain = [w for w in value.split()[:2] if not SHELL_CONTROL.search(w) and "*" not in w]
    if (key != "command" or not plain or not value.startswith(plain[0]) or words.wrapped(value)
            or words.git_widened(value, "")):
        if "*" in value or len(value) + len(tool) + 1 > RULE_MAX:
            raise RuleError(f"no rule covers exactly {value[:200]!r} (it holds '*' or is over {RULE_MAX} "
                            "characters): give the rule to add")
        return f"{tool}:{value}"
    head = plain[:2] if len(plain) > 1 and not plain[1].startswith("-") and value.split()[1] == plain[1] else plain[:1]
    return f"{tool}:{' '.join(head)}*"


# -- policies ------------------------------------------------------------------------------------------
def level(mode: str, rules: Sequence[str]) -> dict[str, Any]:
    """One level of a policy as a record keeps it."""
    if mode not in MODES:
        raise RuleError(f"approvals must be one of {', '.join(MODES)}, got {mode!r}")
    return {"mode": mode, "rules": [str(r) for r in parse_rules(rules)]}


def child_policy(parent: Sequence[Mapping[str, Any]], mode: str | None, rules: Sequence[str]) -> list[dict[str, Any]]:
    """A new job's policy: its parent's levels and one of its own (``mode`` defaults to ask). A root
    job's policy is its own level alone."""
    return [*(dict(lv) for lv in parent), level(mode or "ask", rules)]


@dataclass(frozen=True)
class Decision:
    """What a policy says about one request: ``allow``, ``deny`` or ``ask``, and why (the rule that
    allowed it, or the mode that decided)."""

    verdict: str
    why: str


def decide(policy: Sequence[Mapping[str, Any]], granted: Sequence[str], tool: str,
           what: Mapping[str, Any], whole: bool = True) -> Decision:
    """The policy's decision on a request, ``what`` as the agent will run it, whole. A rule a person
    granted for this job allows at once; else each level gives its verdict and the strictest one
    wins. ``whole`` off (the request is too long to store and show whole): no wildcard rule allows
    it, so the person is asked, and told why."""
    for text in granted:
        if _matches(text, tool, what, whole):
            return Decision("allow", f"rule {text!r} a person granted for this job")
    said: list[tuple[str, str]] = []
    for depth, lv in enumerate(policy):
        mode = str(lv.get("mode", "ask"))
        rule = next((r for r in lv.get("rules", ()) if _matches(r, tool, what, whole)), None)
        here = "allow" if mode == "allow" or rule is not None else mode if mode in MODES else "deny"
        whose = "its own" if depth == len(policy) - 1 else "an ancestor's" if depth else "its root's"
        said.append((here, f"rule {rule!r} ({whose} policy)" if mode != "allow" and rule is not None
                     else f"approvals = {mode!r} ({whose} policy)"))
    if not said:
        return Decision("ask", "no policy recorded")
    strictest = min(_STRICTNESS[v] for v, _ in said)
    deciding = [s for s in said if _STRICTNESS[s[0]] == strictest]
    verdict, why = deciding[-1] if deciding[0][0] == "allow" else deciding[0]
    if verdict == "ask" and not whole and any(_matches(r, tool, what) for r in _every_rule(policy, granted)):
        why = f"{why}; a rule would allow it, but it is too long to show whole, so a person reads it first"
    return Decision(verdict, why)


def _every_rule(policy: Sequence[Mapping[str, Any]], granted: Sequence[str]) -> list[str]:
    return [*granted, *(r for lv in policy for r in lv.get("rules", ()))]


def _matches(text: str, tool: str, what: Mapping[str, Any], whole: bool = True) -> bool:
    try:
        return parse_rule(text).matches(tool, what, whole)
    except RuleError:  # a record written by another version: a rule it cannot read allows nothing
        return False


def carried(approvals: Sequence[Mapping[str, Any]], adapter: Any) -> bool:
    """Whether a restarted daemon can take over a worker's pending approvals: each one's request is in
    its adapter's snapshot whole (``pending``: the agent's id -> its input), so it is asked again
    under the same id and answered as asked. No approval pending: nothing to carry."""
    if not approvals:
        return True
    kept = adapter.get("pending") if isinstance(adapter, dict) else None
    return isinstance(kept, dict) and all(isinstance(kept.get(str(a.get("wid"))), dict) for a in approvals)


# -- what people read ------------------------------------------------------------------------------------
def describe(entry: Mapping[str, Any]) -> str:
    """One approval on one line, exactly what would run: ``shell: echo hi > f (in /repo)``, ``Edit:
    /repo/a.py``, ``WebFetch: https://…``, or the tool and its input."""
    tool, what = str(entry.get("tool", "?")), entry.get("what") or {}
    subject = request_subject(what)
    gone = hidden(what)
    full = f"`roost approvals --full {entry.get('id', 'ID')}` shows all"
    long = f" [too long to show whole: {gone}; {full}]" if gone else ""
    if subject is None:
        return f"{tool}: {json.dumps(what.get('input', what), ensure_ascii=False)}{long}"
    key, value = subject
    where = what.get("cwd")
    return f"{tool}: {value}" + (f" (in {where})" if key == "command" and isinstance(where, str) else "") + long


def entry_text(data: Mapping[str, Any]) -> str:
    """An ``approval`` timeline entry as words: ``ap-x asks shell: … (the model says: …)`` or ``ap-x
    allowed by a person (rule …)``, ``ap-x denied by a stop: stopped by a person``."""
    head = f"{data.get('id', '?')} {describe(data)}"
    if data.get("asked"):
        said = f" (the model says: {data['description']})" if data.get("description") else ""
        again = " again: its worker outlived the daemon's restart, nothing it asked ran" if data.get("again") else ""
        return f"asks {head}{said}{again}"
    verb = {"allow": "allowed", "deny": "denied"}.get(str(data.get("decision")), str(data.get("decision")))
    rule = f" (rule {data['rule']})" if data.get("rule") else ""
    reason = f": {data['reason']}" if data.get("reason") else ""
    return f"{verb} {head} by {data.get('by', '?')}{rule}{reason}"


def whole_text(tool: str, what: Mapping[str, Any]) -> str:
    """A request whole, as a person reads it before answering: the tool, then each part of it (the
    command, its cwd, the path, the diff, …) under its name, nothing cut."""
    parts = [f"tool: {tool}"]
    for key, value in what.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
        parts.append(f"{key}:\n{text}" if "\n" in text else f"{key}: {text}")
    return "\n".join(parts) + "\n"


def pending_line(approvals: Sequence[Mapping[str, Any]]) -> str:
    """What a waiting job's row says of its pending approvals: the first, and how many more."""
    if not approvals:
        return ""
    more = f" (+{len(approvals) - 1} more)" if len(approvals) > 1 else ""
    return f"approve? {describe(approvals[0])}{more}"


# -- bounds ---------------------------------------------------------------------------------------------
def bound_what(what: Any) -> dict[str, Any]:
    """A request's ``what`` as the daemon keeps and shows it (the rules decide on the whole one): a
    JSON object of at most WHAT_KEYS keys and WHAT_MAX bytes of JSON, its longest strings cut in the
    middle until it fits (anything nested becomes its JSON text first), with ``cut`` saying exactly
    how many characters and ``cut_keys`` how many keys were left out."""
    what = as_what(what)
    out = {str(key)[:WORD_MAX]: value for key, value in list(what.items())[:WHAT_KEYS]}
    keys = len(what) - len(out)
    cut = 0
    if not keys and _size(out) <= WHAT_MAX:
        return out
    budget = WHAT_MAX - len(', "cut": , "cut_keys": ') - 40  # room for the counts
    if _size(out) > budget:
        out = {k: v if isinstance(v, (str, int, float, bool, type(None))) else json.dumps(v, ensure_ascii=False)
               for k, v in out.items()}
    while (excess := _size(out) - budget) > 0:
        key = max((k for k, v in out.items() if isinstance(v, str)), key=lambda k: len(out[k]), default=None)
        if key is None or len(out[key]) <= 16:
            break  # only short strings left: each key was cut to WORD_MAX, so it is bounded anyway
        text = out[key]
        out[key] = cut_middle(text, max(8, len(text) - excess - 3))  # "…" is 3 bytes
        cut += len(text) - len(out[key]) + 1
    return {**out, **({"cut": cut} if cut else {}), **({"cut_keys": keys} if keys else {})}


def as_what(what: Any) -> dict[str, Any]:
    """A request's ``what`` as an object (anything else is its ``input``)."""
    return what if isinstance(what, dict) else {"input": what}


def is_whole(kept: Mapping[str, Any]) -> bool:
    """Whether ``bound_what`` kept a request whole (nothing of it hidden)."""
    return not kept.get("cut") and not kept.get("cut_keys")


def hidden(kept: Mapping[str, Any]) -> str:
    """How much of a kept request is hidden, in words ("" when nothing is)."""
    parts = [f"{kept['cut']:,} characters" if kept.get("cut") else "",
             f"{kept['cut_keys']} keys" if kept.get("cut_keys") else ""]
    said = " and ".join(p for p in parts if p)
    return f"{said} of it hidden" if said else ""


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


def word(value: Any, limit: int = WORD_MAX) -> str | None:
    """A tool name, id, description or subagent as kept: a string cut to ``limit``, or None."""
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value)
    return cut_middle(text, limit)


# -- time -------------------------------------------------------------------------------------------------
def timeout_at(asked_at: float, timeout: float) -> float | None:
    """When an approval asked at ``asked_at`` (the engine's monotonic clock) is denied unanswered:
    ``approval_timeout`` later, or never when it is 0."""
    return None if timeout <= 0 else asked_at + timeout


def next_timeout(asked: Iterable[float], timeout: float) -> float | None:
    """The first moment one of a job's pending approvals times out, or None."""
    times = [t for a in asked if (t := timeout_at(a, timeout)) is not None]
    return min(times) if times else None


def timed_out(asked: Mapping[str, float], timeout: float, now: float) -> list[str]:
    """The approvals (id → asked time) whose time ran out at ``now``, oldest first."""
    due = [(a, key) for key, a in asked.items() if (t := timeout_at(a, timeout)) is not None and now >= t]
    return [key for _, key in sorted(due)]
