"""Who may call what: one rule for every operation of the client protocol, checked in one place
(the handlers' dispatch) before any handler runs. docs/protocols.md#authority is this table in words.

A caller is a **person** (a connection with no job identity, of this user, from a process outside
the daemon's own tree: roost/daemon/server/peers.py) or a **job** (a connection that proved a job with its
token; on a host's socket, only a job placed on that host). A job reaches a target job only within
its rule's reach; a person reaches every job.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from roost.protocol import OPS, SUBSCRIPTIONS, ErrorCode, ProtocolError

if TYPE_CHECKING:
    from roost.daemon.storage.index import JobIndex


class Reach(enum.Enum):
    """How far a job's call may reach; the value is how docs and errors say it."""

    #: Jobs may not call it at all: it is a person's.
    NONE = "no job"
    #: It acts on the calling job itself (no target argument).
    SELF = "itself"
    #: The target is the calling job or one of its descendants (its subtree).
    SUBTREE = "its subtree"
    #: The target is one of the calling job's descendants, never the job itself.
    BELOW = "its descendants"
    #: The target is in the calling job's subtree or is one of its ancestors.
    FAMILY = "its subtree and its ancestors"
    #: It touches nothing of another job (hello, the daemon's status, the connection's own state).
    ANY = "any caller"


@dataclass(frozen=True)
class Rule:
    """Who may call one operation: whether a person may, how far a job reaches, and which
    argument names the job acted on (a job that leaves it out means itself)."""

    jobs: Reach
    target: str | None = None
    person: bool = True

    def callers(self) -> str:
        """The rule in words, for docs and the table's test."""
        people = "a person" if self.person else ""
        job = "" if self.jobs is Reach.NONE else (
            "any job" if self.jobs is Reach.ANY else f"a job, on {self.jobs.value}")
        return " or ".join(part for part in (people, job) if part)


_PERSON = Rule(Reach.NONE)
_MINE = Rule(Reach.SUBTREE, "job")
#: Every operation's rule; ``subscribe``'s depends on what is subscribed to (``subscribe WHAT``).
RULES: dict[str, Rule] = {
    "hello": Rule(Reach.ANY),
    "spawn": Rule(Reach.SELF),  # a job's child is always its own (the parent argument is ignored)
    "send": _MINE,
    "stop": _MINE,
    "close": _MINE,
    "pin": _MINE,
    "unpin": _MINE,
    "label": _MINE,
    "archive": _MINE,
    "detach": Rule(Reach.BELOW, "job"),  # a job never detaches itself out of its tree (and its budget)
    "rename": _MINE,
    "unarchive": _MINE,
    "merge": _MINE,
    "fork": _MINE,  # a job's fork is its own child, like its spawns
    "report": Rule(Reach.SELF, person=False),
    "answer_approval": _PERSON,  # no job answers an approval: not the asking one, its parent or its children
    "approval_text": _PERSON,  # what the person reads before answering
    "show": Rule(Reach.FAMILY, "job"),
    "children": _MINE,
    "list": Rule(Reach.SUBTREE, "under"),
    "logs": _MINE,
    "diff": _MINE,
    "search": Rule(Reach.SUBTREE, "under"),  # a job's search sees its own subtree's timelines only
    "subscribe agent_view": _PERSON,
    "subscribe subtree": _MINE,
    "subscribe timeline": _MINE,
    "unsubscribe": Rule(Reach.ANY),
    "attach": _PERSON,
    "release": Rule(Reach.ANY),
    "seen": _PERSON,  # what a person has looked at: no job can see for them
    "status": Rule(Reach.ANY),
    "acknowledge": _PERSON,
    "usage": Rule(Reach.SUBTREE, "job"),  # a job sees its own subtree's spend; a person's, every job's
    "budget": _PERSON,  # what a tree may spend: no job raises its own cap (or its parent's)
    "reload": _PERSON,
    "shutdown": _PERSON,
    "worktrees": _PERSON,
    "worktrees_prune": _PERSON,
}


def rule_key(op: str, args: dict[str, Any]) -> str:
    """The table's key for a request: the op, or ``subscribe WHAT``."""
    return f"{op} {args.get('what')}" if op == "subscribe" else op


def table_keys() -> set[str]:
    """The keys the table must have: one per operation, one per subscription kind."""
    return {key for op in OPS for key in ([f"subscribe {w}" for w in SUBSCRIPTIONS] if op == "subscribe" else [op])}


def check(op: str, args: dict[str, Any], caller: str | None, index: JobIndex) -> None:
    """Raise ``auth`` unless ``caller`` (a job id, None for a person) may call ``op`` with ``args``.
    A job's call that names no target is about the job itself: its argument is filled in."""
    rule = RULES[rule_key(op, args)]
    if caller is None:
        if not rule.person:
            raise ProtocolError(ErrorCode.AUTH, f"{op} is for jobs: call it from a worker (ROOST_JOB_ID is not set)")
        return
    if rule.jobs is Reach.NONE:
        raise ProtocolError(ErrorCode.AUTH, f"{op} is for a person only: job {caller} may not call it (no job may)")
    if rule.target is None or rule.jobs is Reach.ANY:
        return
    target = args.get(rule.target) or caller
    args[rule.target] = target
    index.require(target)
    if rule.jobs is Reach.BELOW and target == caller:
        raise ProtocolError(ErrorCode.AUTH, f"job {caller} may not {op} itself: a job reaches {rule.jobs.value} "
                                            f"(only a person, or an ancestor, may)")
    if index.under(target, caller) or (rule.jobs is Reach.FAMILY and index.under(caller, target)):
        return
    raise ProtocolError(ErrorCode.AUTH, f"job {caller} may not {op} job {target}: a job reaches {rule.jobs.value}, "
                                        f"and {target} is outside it (only a person, or the job's owner, may)")
