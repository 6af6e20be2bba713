"""Which state changes a job may make, and for what kind of reason: the lifecycle as a table.

The engine's one function that changes a job's state (``Engine.set_state``, and recovery's) asks
``check`` first, so a change the table does not have is an error a test sees, not a record that
quietly says something impossible. docs/lifecycle.md prints the same rows (a test compares them).
"""

from __future__ import annotations

from roost.models import State

Q, S, WK, WT, I, D, B, ST, F, RL = (State.QUEUED, State.STARTING, State.WORKING, State.WAITING, State.IDLE,
                                    State.DONE, State.BLOCKED, State.STOPPED, State.FAILED, State.RATE_LIMITED)
#: Every state but these.
ALL = frozenset(State)


def _but(*states: State) -> frozenset[State]:
    return ALL - set(states)


#: The rows: kind of reason -> (the states it may leave, the states it may enter). One kind names
#: one cause, wherever in the engine it happens.
ROWS: dict[str, tuple[frozenset[State], frozenset[State]]] = {
    # its worker's process runs (a queued spawn starts)
    "started": (frozenset({Q}), frozenset({S})),
    # a prompt (a message, children's reports) or a turn of the agent's own begins
    "turn": (_but(WK, ST), frozenset({WK})),
    # the worker refused the prompt: the job is back where it was
    "prompt-refused": (frozenset({WK}), _but(WK, ST)),
    # the turn ended: by its report, with a question, or failed
    "turn-end": (frozenset({WK, WT}), frozenset({I, D, B, WT, F})),
    # the provider bounced the turn with a usage limit or a 429: its message waits for the reset
    "rate-limited": (frozenset({WK}), frozenset({RL})),
    # the job's own report outside a turn (a shell tool after the fact)
    "report": (_but(ST), frozenset({I, D, B})),
    # its agent asks for an approval, or any change while one is pending (it stays waiting)
    "approval": (_but(WT, ST), frozenset({WT})),
    # no approval is pending any more: the state it had before
    "approval-settled": (frozenset({WT}), _but(WT, ST)),
    # a person's message to a stopped job
    "restart": (frozenset({ST}), frozenset({I})),
    # a stop, by a person or its owner (from idle, done or failed too while subagents of its agent's
    # own still run: ``Job.stoppable``); an archive of a job that ran
    "stop": (_but(ST), frozenset({ST})),
    "archive": (frozenset({Q, S, WK, WT, B, RL}), frozenset({ST})),
    # its worker could not start, died, was closed mid-turn, or went with the last daemon;
    # a change the store refused left a turn nothing runs
    "failure": (_but(F, ST), frozenset({F})),
    # the daemon restarted before its worker was up: it waits for its place again
    "requeued": (frozenset({S}), frozenset({Q})),
}

#: The same table by pair of states: (from, to) -> the kinds of reason that make that change.
ALLOWED: dict[tuple[State, State], frozenset[str]] = {}
for _kind, (_froms, _tos) in ROWS.items():
    for _old in _froms:
        for _new in _tos - {_old}:
            ALLOWED[(_old, _new)] = ALLOWED.get((_old, _new), frozenset()) | {_kind}


class IllegalTransition(RuntimeError):
    """A state change the table does not allow: a bug in the engine, never a person's error."""


def check(job_id: str, old: State, new: State, kind: str) -> None:
    """Raise ``IllegalTransition`` unless ``kind`` may move a job from ``old`` to ``new``."""
    if kind not in ROWS:
        raise IllegalTransition(f"job {job_id}: {kind!r} is not a kind of state change ({', '.join(ROWS)})")
    if kind not in ALLOWED.get((old, new), frozenset()):
        raise IllegalTransition(f"job {job_id}: {old.value} -> {new.value} is not allowed for {kind!r} "
                                f"(allowed from {old.value}: "
                                f"{', '.join(sorted(n.value for (o, n), k in ALLOWED.items() if o == old and kind in k)) or 'nothing'})")
