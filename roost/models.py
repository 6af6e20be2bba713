"""Job records and the rows clients see: the shapes every part of roost agrees on."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any

from roost.bounds import bound_record


class State(str, enum.Enum):
    """Where a job is in its life (docs/lifecycle.md draws the transitions)."""

    QUEUED = "queued"
    STARTING = "starting"
    WORKING = "working"
    WAITING = "waiting"
    IDLE = "idle"
    DONE = "done"
    BLOCKED = "blocked"
    #: A turn the provider bounced with a usage limit or a 429: its messages wait for the reset.
    RATE_LIMITED = "rate_limited"
    STOPPED = "stopped"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


#: "Running": a job that still works, will work (queued) or waits for someone. Live work that
#: must never go unseen, that keeps its parent's worker open, and that a parent's
#: "N subagents (k running)" counts. ``blocked`` is not running: it handed back and needs a person.
ACTIVE_STATES = frozenset({State.QUEUED, State.STARTING, State.WORKING, State.WAITING, State.RATE_LIMITED})
#: States in which a turn is in flight or about to be (a stop has something to cut short).
TURN_STATES = frozenset({State.QUEUED, State.STARTING, State.WORKING})
#: States a job can be stopped from: a turn in flight, or a question nobody answered yet.
STOPPABLE_STATES = frozenset({State.QUEUED, State.STARTING, State.WORKING, State.WAITING, State.BLOCKED,
                              State.RATE_LIMITED})
#: States whose rows say why (a failure's reason, who stopped it): ``Job.reason``.
REASONED_STATES = frozenset({State.FAILED, State.STOPPED})
#: States that mean "this job needs a person".
NEEDS_INPUT_STATES = frozenset({State.WAITING, State.BLOCKED})
#: States a turn ends in that a person has not seen until they open the job (``Job.unseen``).
UNSEEN_STATES = frozenset({State.IDLE, State.DONE, State.FAILED})
#: States a job stays in until a person acts (answers, sends, archives): the agent view lists them
#: whatever its window.
NEEDS_PERSON_STATES = frozenset({State.FAILED, State.BLOCKED, State.WAITING})
#: States in which a job's run is over (its age stops growing; the panel lets it go after a while).
FINISHED_STATES = frozenset({State.DONE, State.FAILED, State.STOPPED})
#: States from which a job's worker starts again by itself when there is something for it: a person
#: opens it, or messages still wait for it when the daemon starts. Not a stopped or failed job: a
#: person's message restarts those. A rate-limited one's new worker still waits for the reset.
RESUMABLE_STATES = frozenset({State.IDLE, State.DONE, State.WAITING, State.BLOCKED, State.RATE_LIMITED})

LIFETIMES = ("task", "workflow", "session")
#: How much of a job's last text a row carries (the peek line); ``show`` gives all of it.
PEEK_MAX = 200
#: How much of a waiting job's question its record keeps, cut in the middle (its ``state`` entry keeps
#: ENTRY_MAX characters of it, cut the same way).
QUESTION_MAX = 4000
#: Record fields a row leaves out: what no view shows and only ``show`` needs.
_FULL_ONLY = ("driver_opts", "session", "fork_of", "approval_back", "approval_policy", "approval_grants")


@dataclass(slots=True)
class Job:
    """One job's durable record, as the store keeps it (times are epoch seconds)."""

    id: str
    title: str
    driver: str
    cwd: str
    state: State = State.STARTING
    state_since: float = 0.0
    created_at: float = 0.0
    updated_at: float = 0.0
    parent: str | None = None
    session: str | None = None
    #: The driver profile it was spawned with. Records loaded from the store share equal ones:
    #: replace it, never change it in place.
    driver_opts: dict[str, Any] = field(default_factory=dict)
    reaped: bool = False
    pinned: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    pid: int | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    lifetime: str = "task"
    archived_at: float | None = None
    last_text: str = ""
    depth: int = 0
    #: Why it is failed or stopped, or what a queued spawn waits for ("" in any other state): what its rows show.
    reason: str = ""
    #: The main checkout of the git repository its worktree was made from (None: no worktree of its own).
    repo: str | None = None
    #: Its own git worktree (also its cwd); None once removed, or when it has none of its own.
    worktree: str | None = None
    #: The branch its worktree is on (kept after the worktree is removed while the branch lives).
    branch: str | None = None
    #: What the branch was made from and merges into: a branch name, or a commit when HEAD was detached.
    base: str | None = None
    #: The ``[hosts.NAME]`` its worker runs on; "" is this machine (docs/hosts.md).
    host: str = ""
    #: What its last ``waiting`` turn asked (at most QUESTION_MAX characters). Kept through a turn
    #: that only took in reports (the job waits again on the same question); rows carry it only
    #: while the job is ``waiting``.
    question: str = ""
    #: Its provider-native subagents (Claude Code's ``Task``): how many its timeline names, and
    #: how many of those its last word about says ``working`` (the daemon counts them as it
    #: records their ``subagent`` entries; roost/daemon/storage/index.py).
    provider_subagents: int = 0
    provider_running: int = 0
    #: Its pending approvals (permission requests its agent waits on), oldest first: each
    #: ``{"id", "tool", "what", "description"?, "subagent"?, "asked_at"}`` (docs/protocols.md). Kept
    #: in the record so a restart of the daemon settles them, saying so. Replace it, never change it
    #: in place.
    approvals: list[dict[str, Any]] = field(default_factory=list)
    #: The state it goes back to once its last approval is settled ("" while none is pending).
    approval_back: str = ""
    #: Its approval policy: one level per ancestor and its own last, each ``{"mode", "rules"}``
    #: (roost/rules/approvals.py); and the allow rules a person granted it ("approve for this job").
    approval_policy: list[dict[str, Any]] = field(default_factory=list)
    approval_grants: list[str] = field(default_factory=list)
    #: The session a fork's first start forks with its agent's own fork (Claude Code, Codex); unused
    #: once the job has a session of its own.
    fork_of: str | None = None
    #: Its turn ended (``UNSEEN_STATES``) while no person had it open, and no person opened it
    #: since: the app marks it and its jump key visits it (roost/rules/attention.py). Kept by the
    #: daemon, so every client agrees; a person's ``seen`` clears it.
    unseen: bool = False
    #: While ``rate_limited``: when the limit resets (epoch seconds; the agent's word, else the
    #: daemon's back-off) and the agent's words for it. None and "" in any other state.
    limited_until: float | None = None
    limited_words: str = ""
    #: What the agent says it is doing about a failed model call (a ``retrying`` or a retried
    #: ``limited`` event's words): its row shows it until the next real event clears it.
    notice: str = ""
    #: While its worker runs: what a daemon that re-adopts it needs (the last line of the worker's
    #: applied, its phase, the turn in flight; roost/daemon/engine/slot.py ``live_of``). Replaced whole.
    live: dict[str, Any] | None = None
    #: A stall flag on its turn (roost/rules/stalls.py: "stalled", "not_started"; "" when none) and the
    #: words its row shows for it, as of the flag: not a state, the next event clears it.
    stall: str = ""
    stall_words: str = ""

    def stoppable(self) -> bool:
        """Whether a stop has something to stop: a turn in flight, a question, or (in any state) subagents
        of its agent's own that still run (a Claude Code background subagent after its parent's turn)."""
        return self.archived_at is None and (self.state in STOPPABLE_STATES or self.provider_running > 0)

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON-able data (state as its string). Copies the dict fields
        one level deep, which is all they have; dataclasses.asdict's deep copy was most of the
        cost of a row (bench/run.py rows)."""
        data = {name: getattr(self, name) for name in JOB_FIELDS}
        data["state"] = self.state.value
        for name in ("driver_opts", "labels", "usage"):
            data[name] = dict(data[name])
        for name in ("approvals", "approval_policy", "approval_grants"):
            data[name] = list(data[name])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Job":
        """Rebuild a record, ignoring keys this version does not know (a row's derived ones)."""
        values = dict(data) if data.keys() <= JOB_KEYS else {k: v for k, v in data.items() if k in JOB_KEYS}
        values["state"] = STATES_BY_VALUE.get(values.get("state", "starting")) or State(values["state"])
        return cls(**values)

    @property
    def worker_up(self) -> bool:
        """Whether a worker process is running for this job: the one definition the daemon, the
        rules and the app all use (the daemon clears ``pid`` and sets ``reaped`` when it ends)."""
        return worker_is_up(self.pid, self.reaped)


def worker_is_up(pid: int | None, reaped: bool) -> bool:
    """``Job.worker_up`` of a record's values (a listing builds rows of records it never loads)."""
    return pid is not None and not reaped


#: A record's fields in ``Job``'s order, as a set, and its states by their values: what reading a
#: stored record checks it against (here and roost/daemon/storage/records.py).
JOB_FIELDS = tuple(f.name for f in fields(Job))
JOB_KEYS = frozenset(JOB_FIELDS)
STATES_BY_VALUE = {s.value: s for s in State}


def peek_text(text: str) -> str:
    """What a row carries of a job's last text: its last non-empty line, whitespace collapsed,
    at most PEEK_MAX characters (the views cut it further to their width)."""
    for line in reversed(text.splitlines()):
        line = " ".join(line.split())
        if line:
            return line if len(line) <= PEEK_MAX else line[:PEEK_MAX - 1] + "…"
    return ""


def cut_middle(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: a longer one keeps its start and its end, cut in
    the middle with "…". What a question keeps: its start says what it asks about (the tool, the
    file), its end is the question itself."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    return text[:head] + "…" + text[len(text) - (limit - 1 - head):]


def question_line(text: str) -> str:
    """What a slim row carries of a question: all of it on one line, whitespace collapsed, cut
    in the middle to at most PEEK_MAX characters."""
    return cut_middle(" ".join(text.split()), PEEK_MAX)


@dataclass
class Row:
    """A job as clients see it: the record plus what the daemon derives for views.

    ``parent_open`` is true when something live holds the parent (its worker is up, or a client
    has it open); a root job's is always true.
    """

    job: Job
    parent_open: bool = True
    attached: bool = False
    descendants: int = 0
    running_descendants: int = 0

    # Short accessors keep the rules readable.
    @property
    def id(self) -> str:
        return self.job.id

    @property
    def parent(self) -> str | None:
        return self.job.parent

    @property
    def state(self) -> State:
        return self.job.state

    def to_wire(self, full: bool = False) -> dict[str, Any]:
        """The row as the daemon sends it (``wire_row`` of the record)."""
        return wire_row(self.job.to_dict(), self.parent_open, self.attached, self.descendants,
                        self.running_descendants, full)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> "Row":
        """Parse a pushed row back into a Row."""
        return cls(
            job=Job.from_dict(data),
            parent_open=bool(data.get("parent_open", True)),
            attached=bool(data.get("attached", False)),
            descendants=int(data.get("descendants", 0)),
            running_descendants=int(data.get("running_descendants", 0)),
        )


def wire_row(data: dict[str, Any], parent_open: bool, attached: bool, descendants: int,
             running_descendants: int, full: bool = False) -> dict[str, Any]:
    """A record (``Job.to_dict``'s shape, changed in place) as the daemon sends it: its fields plus
    the derived ones. A slim row (the default: lists and pushes) leaves out what no view shows and
    cuts the last text to the peek line, so a row's size does not grow with what the agent said.
    The question is there only while the job waits, and its provider subagents run only while its
    worker is up (they are that process's: Claude Code runs background ones while its job is idle).
    Taking the record's data, not a ``Job``, lets a listing build rows of records it never loads."""
    bound_record(data)  # a record from before the caps (or written around them) still fits a frame
    data.pop("live", None)  # the daemon's own, for re-adopting the worker (records before it have none)
    # Waiting on a question: not when it waits on approvals only (its question is an older turn's then).
    waiting = data["state"] == State.WAITING.value and (not data["approvals"]
                                                        or data["approval_back"] == State.WAITING.value)
    if not full:
        for name in _FULL_ONLY:
            del data[name]
        data["last_text"] = peek_text(data["last_text"])
        data["reason"] = peek_text(data["reason"])
    data["question"] = (data["question"] if full else question_line(data["question"])) if waiting else ""
    up = worker_is_up(data["pid"], data["reaped"])
    if not up:
        data["provider_running"] = 0
    data.update(parent_open=parent_open, attached=attached, descendants=descendants,
                running_descendants=running_descendants, worker_up=up)
    return data


_EPOCH = datetime(1970, 1, 1)


def iso(ts: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC (what `roost ls --json` prints)."""
    if ts is None:
        return None
    return (_EPOCH + timedelta(seconds=ts)).isoformat() + "Z"  # 2x faster than fromtimestamp(tz=utc)


def record_json(row_data: dict[str, Any]) -> dict[str, Any]:
    """A wire row with its timestamps as ISO 8601 UTC, for people and scripts. A record's times
    are often one moment (made, changed and in its state since then): each is written once."""
    out = dict(row_data)
    made: dict[float | None, str | None] = {}
    for key in ("state_since", "created_at", "updated_at", "archived_at"):
        if key in out:
            ts = out[key]
            text = made.get(ts)
            out[key] = text if text is not None else made.setdefault(ts, iso(ts))
    return out
