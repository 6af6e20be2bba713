"""What an operation module is made of: its name, its arguments, who may call it, and what it does;
and what the server hands it when a request comes (``Context``, ``Request``).

The vocabulary of authority (``Reach``, ``Rule``) is here, below the server, because each operation
module names its own rule; roost/daemon/server/authority.py checks rules (in one place) and holds the
table of the operations not moved into modules yet.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from roost.protocol import Arg

if TYPE_CHECKING:
    from roost.daemon.server.connection import Connection
    from roost.daemon.supervisor import Supervisor


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


#: The rules most operations have: a person's only, and a job's on its own subtree.
PERSON = Rule(Reach.NONE)
MINE = Rule(Reach.SUBTREE, "job")


@dataclass
class Context:
    """What an operation needs besides the request: the supervisor, the daemon's own facts for
    ``status``, a way to stop the daemon (soon: the reply goes out first) and to read its config
    file again."""

    supervisor: Supervisor
    facts: Callable[[], dict[str, Any]]
    stop: Callable[[bool], None]
    reload: Callable[[], dict[str, Any]]
    #: How many open connections said hello as a job (``max_connections_per_job`` bounds them).
    job_connections: Callable[[str], int]


@dataclass
class Request:
    conn: Connection
    id: Any
    op: str
    args: dict[str, Any]

    @property
    def caller(self) -> str | None:
        """The job this connection speaks for, or None for a person."""
        return self.conn.job


#: What runs a request: it returns the reply's result, or an awaitable of it.
Run = Callable[[Context, Request], Any]


@dataclass(frozen=True)
class Operation:
    """One operation of the client protocol, whole. ``args`` is checked before anything runs (each
    value's type and bound, roost/protocol.py ``Arg``), then ``rule`` (roost/daemon/server/authority.py
    ``check``), then ``run``."""

    name: str
    args: dict[str, Arg]
    rule: Rule
    run: Run
