"""Why a job is in its state, what it waits for, and what would move it next: the words of
``roost explain`` (roost/daemon/ops/explain.py gathers the facts; this turns them into an answer).

Pure: a function of the job's record, the timeline entries around the change that put it in its
state, what the daemon knows of its worker, its place in the queues and its timers (as epoch
seconds), so every case is tested without a daemon. The state-table kind of that change
(roost/rules/state_table.py) is read from the entries: the ``state`` entry's own words, the entry
after it (a turn's end writes its ``turn_end`` right after its state), the one before it, and the
table's pair of states.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from roost.bounds import cut
from roost.models import Job, State
from roost.rules.approvals import describe
from roost.rules.state_table import ALLOWED

#: How much of a text an explanation quotes (a prompt, a question, a reason).
EXCERPT_MAX = 160
#: The notes a ``state`` entry carries when no approval is pending any more (engine and recovery).
_SETTLED_NOTES = ("no approval is pending any more", "its approvals went with its worker")


@dataclass(frozen=True)
class Wait:
    """Something the job waits for: its kind (``person``, ``message``, ``children``, ``run_slot``,
    ``live_place``, ``host``, ``worker``, ``turn``, ``rate_limit``, ``budget``, ``store``), the words,
    and until when, when a time is known."""

    on: str
    text: str
    until: float | None = None


@dataclass(frozen=True)
class Facts:
    """What the daemon knows of one job, gathered for ``explain``."""

    job: Job
    #: The ``state`` entry that put it in its state (None: it has none yet, a spawn still queued),
    #: the state entry before it, and the entries just before and after it.
    change: dict[str, Any] | None = None
    previous: dict[str, Any] | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    #: The ``spawned`` entry (what a job with no state entry yet was put in ``queued`` by).
    spawned: dict[str, Any] | None = None
    #: Its worker's phase ("" without one) and the turn in flight (run, kind, why it is being cut).
    phase: str = ""
    turn: dict[str, Any] | None = None
    #: Messages waiting in its inbox, and its running descendants.
    inbox: int = 0
    running_children: int = 0
    #: What the run queue says it waits for (``Wait``s: run slot, live place, host), in order.
    queued: tuple[Wait, ...] = ()
    #: Why no new turn of it may start (a budget at its cap), and why the store refused its last change.
    budget: str | None = None
    store: str | None = None
    #: What keeps its worker from being closed (roost/rules/lifecycle.py ``close_blocker``).
    blocker: str | None = None
    #: Its time rules' next moments, epoch seconds: rule name -> when.
    timers: dict[str, float] = field(default_factory=dict)


def rule_of(facts: Facts) -> str | None:
    """The state table's kind of the change that put the job in its state (None: not known)."""
    entry = facts.change
    if entry is None:
        return None
    data = entry["data"]
    new = State(data["state"])
    old = State(facts.previous["data"]["state"]) if facts.previous else (State.QUEUED if facts.spawned else None)
    guess = _guess(old, new, data, _kind(facts.before), _kind(facts.after))
    kinds = ALLOWED.get((old, new), frozenset()) if old is not None else frozenset()
    if old is None or guess in kinds:
        return guess
    return next(iter(kinds)) if len(kinds) == 1 else guess


def _kind(entry: dict[str, Any] | None) -> str:
    return entry["kind"] if entry else ""


def _guess(old: State | None, new: State, data: dict[str, Any], before: str, after: str) -> str:
    simple = {State.QUEUED: "requeued", State.STARTING: "started", State.WORKING: "turn",
              State.RATE_LIMITED: "rate-limited"}
    if new in simple:
        return simple[new]
    if new is State.STOPPED:
        return "archive" if data.get("reason") == "archived" else "stop"
    if "approval" in data:
        return "approval"
    note = str(data.get("note") or "")
    if note.startswith("restarted"):
        return "restart"
    if note in _SETTLED_NOTES:
        return "approval-settled"
    if after == "turn_end" or (new is State.WAITING and "question" in data):
        return "turn-end"
    if new is State.FAILED:
        return "failure"
    if before == "report":
        return "report"
    return "prompt-refused" if old is State.WORKING else "turn-end"


def _quote(text: Any) -> str:
    return cut(" ".join(str(text).split()), EXCERPT_MAX)


def _who(by: Any) -> str:
    return "a person" if by in (None, "", "person") else ("the daemon" if by == "daemon" else f"job {by}")


def cause(facts: Facts) -> dict[str, Any]:
    """What put the job in its state: the rule (a state-table kind), in words, when and by whom."""
    job = facts.job
    if facts.change is None:
        spawned = facts.spawned or {}
        by = (spawned.get("data") or {}).get("by")
        text = f"spawned by {_who(by)}: a spawn is queued until the run queue lets it start"
        return {"rule": "spawn", "text": text, "at": spawned.get("ts", job.created_at), "by": by or "person"}
    data = facts.change["data"]
    rule = rule_of(facts)
    return {"rule": rule, "text": _cause_text(rule, data, facts), "at": facts.change["ts"],
            "by": data.get("by"), "entry": facts.change["seq"]}


def _cause_text(rule: str | None, data: dict[str, Any], facts: Facts) -> str:
    before, after = facts.before or {}, facts.after or {}
    reason = data.get("reason")
    if rule == "turn-end":
        end = after.get("data", {}) if after.get("kind") == "turn_end" else {}
        if "question" in data:
            return f"its turn ended with a question: {_quote(data['question'])}"
        if end.get("error") or reason:
            return f"its turn failed: {_quote(end.get('error') or reason)}"
        said = end.get("report") or end.get("note") or end.get("outcome") or "ok"
        return f"its turn ended ({said})"
    if rule == "turn":
        if data.get("note"):
            return str(data["note"])
        prompt = before.get("data", {}).get("text") if before.get("kind") == "prompt" else None
        return f"a turn began on: {_quote(prompt)}" if prompt else "a turn began"
    words = {
        "started": "the run queue let it start: its worker's process runs",
        "requeued": f"it went back to the queue: {reason}",
        "rate-limited": f"the provider bounced its turn with a usage limit: {_quote(data.get('words') or '')}",
        "approval": f"its agent asked for approval {data.get('approval')}",
        "approval-settled": str(data.get("note") or "no approval is pending any more"),
        "restart": "a person's message restarted it",
        "stop": str(reason or f"stopped by {_who(data.get('by'))}"),
        "archive": "it was archived during its turn",
        "failure": f"it failed: {_quote(reason or 'no reason given')}",
        "report": "its own report, outside a turn",
        "prompt-refused": "its worker refused the prompt: it is back where it was",
    }
    return words.get(rule or "", f"its state became {data.get('state')}")


def waits(facts: Facts) -> list[Wait]:
    """What the job waits for, most pressing first (nothing: an empty list)."""
    job = facts.job
    out: list[Wait] = []
    if facts.store:
        out.append(Wait("store", f"the store to take writes again: {facts.store}"))
    state = job.state
    if job.archived_at is not None:
        return out
    if state is State.QUEUED:
        out.extend(facts.queued or [Wait("run_slot", job.reason or "its start, let go by the run queue")])
    elif state is State.STARTING:
        out.append(Wait("worker", "its worker to start and answer (then its prompt goes)"))
    elif state is State.WORKING:
        run = (facts.turn or {}).get("run")
        ending = (facts.turn or {}).get("ending")
        out.append(Wait("turn", f"its turn{f' (run {run})' if run else ''} to end"
                                + (f": being cut short ({ending})" if ending else "")))
    elif state is State.WAITING:
        for approval in job.approvals:
            aid = approval.get("id")
            out.append(Wait("person", f"a person to answer approval {aid}: {describe(approval)} "
                                      f"(roost approve {aid} / roost deny {aid})", facts.timers.get("approval_timeout")))
        if not job.approvals:
            out.append(Wait("person", f"a person's answer to its question: {_quote(job.question)} "
                                      f"(roost send {job.id} TEXT)"))
    elif state is State.RATE_LIMITED:
        out.append(Wait("rate_limit", f"the usage limit to reset{': ' + _quote(job.limited_words) if job.limited_words else ''}",
                        job.limited_until))
    elif state is State.BLOCKED:
        out.append(Wait("person", f"a person: it reported blocked (roost send {job.id} TEXT)"))
    elif state in (State.IDLE, State.DONE):
        out.append(Wait("message", f"a message (roost send {job.id} TEXT), or its children's reports"))
    else:  # stopped, failed
        out.append(Wait("person", f"a person's message to start it again (roost send {job.id} TEXT)"))
    if facts.running_children:
        out.append(Wait("children", f"{facts.running_children} running subagent"
                                    f"{'' if facts.running_children == 1 else 's'} of its own"))
    if facts.inbox and state is not State.QUEUED:
        out.append(Wait("turn", f"{facts.inbox} message{'' if facts.inbox == 1 else 's'} waiting in its inbox "
                                "for its next turn"))
    if facts.budget:
        out.append(Wait("budget", f"a raised budget: no new turn of it may start ({facts.budget})"))
    return out


#: What each of the time rules does when its moment comes.
_TIMER_WORDS = {
    "auto_close": "subagent auto-close closes its worker (subagent_auto_close_delay)",
    "reap": "the idle reaper closes its worker (idle_timeout)",
    "hold": "the held reports of its children are steered into its turn (report_hold_max)",
    "approval_timeout": "its oldest pending approval times out, denied (approval_timeout)",
    "limit": "the rate limit resets and its bounced turn goes again",
    "stall": "a stall bound of its turn passes (stall_after, max_turn_time)",
}

#: What a person, its agent or the daemon can do to each state (besides the timers).
_MOVES = {
    State.QUEUED: "it starts when a run slot or place frees (a turn ends, a worker exits, a stop) or the cap is "
                  "raised (roost daemon reload); roost stop ends it",
    State.STARTING: "working once its worker answers and takes its prompt; failed if it cannot start",
    State.WORKING: "its turn's end makes it idle, done, blocked, waiting or failed; roost stop cuts it short",
    State.WAITING: "an answer (or roost approve / deny) lets its turn go on; roost stop stops it",
    State.RATE_LIMITED: "the reset, or a person's message, lets its turn go again; roost stop stops it",
    State.IDLE: "a message starts a turn (resuming its worker if closed)",
    State.DONE: "a message starts a turn (resuming its worker if closed)",
    State.BLOCKED: "a message starts a turn",
    State.STOPPED: "a person's message restarts it (idle, then the turn)",
    State.FAILED: "a person's message resumes it from its session",
}


def moves(facts: Facts) -> list[dict[str, Any]]:
    """What would move the job next: its timers, soonest first, then what someone can do."""
    out: list[dict[str, Any]] = [{"text": _TIMER_WORDS.get(name, name), "at": at, "rule": name}
                                 for name, at in sorted(facts.timers.items(), key=lambda item: item[1])]
    if facts.job.archived_at is not None:
        out.append({"text": "it is archived: roost unarchive brings it back", "at": None})
    else:
        out.append({"text": _MOVES[facts.job.state], "at": None})
    if facts.phase and facts.blocker and facts.blocker != "no worker":
        out.append({"text": f"its worker stays up while {facts.blocker}", "at": None})
    return out


def explain(facts: Facts) -> dict[str, Any]:
    """The ``explain`` operation's answer."""
    job = facts.job
    return {"job": job.id, "title": job.title, "state": job.state.value, "since": job.state_since,
            "reason": job.reason, "worker": facts.phase or None, "cause": cause(facts),
            "waits": [{"on": w.on, "text": w.text, "until": w.until} for w in waits(facts)],
            "next": moves(facts)}
