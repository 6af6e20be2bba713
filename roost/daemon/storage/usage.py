"""The usage table: every model call a job's agent reported, once, with the day it was spent, and
the budgets set on jobs. A call is keyed by (job, call id), so an agent that reports a call again
(Codex after a stop or a resume, a driver after a restart) adds nothing: the figures roost shows
are sums of these rows, never of deltas added twice (docs/agents.md#usage).

Like ``search.py`` it works on the store's connection inside the store's transactions; only the
daemon calls it.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from roost.worker_protocol import TOKEN_KINDS

#: The longest call id and model name kept (an agent's ids are far shorter; a longer one is cut).
CALL_ID_MAX = 200
MODEL_MAX = 200

_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage_calls (
    job TEXT NOT NULL,
    call TEXT NOT NULL,
    root TEXT NOT NULL,
    day TEXT NOT NULL,
    ts REAL NOT NULL,
    model TEXT NOT NULL,
    input INTEGER NOT NULL,
    output INTEGER NOT NULL,
    cache_read INTEGER NOT NULL,
    cache_write INTEGER NOT NULL,
    cost REAL,
    estimate INTEGER NOT NULL,
    PRIMARY KEY (job, call)
);
CREATE INDEX IF NOT EXISTS usage_day ON usage_calls(day, root);
CREATE TABLE IF NOT EXISTS budgets (
    job TEXT PRIMARY KEY,
    usd REAL,
    tokens INTEGER,
    level TEXT NOT NULL DEFAULT 'ok'
);
"""


def create(db: sqlite3.Connection) -> None:
    for stmt in _SCHEMA.split(";"):
        if stmt.strip():
            db.execute(stmt)


def day_of(ts: float) -> str:
    """The local calendar day of ``ts`` (``2026-12-02``): what "today" means to the person."""
    return time.strftime("%Y-%m-%d", time.localtime(ts))


@dataclass(frozen=True)
class Call:
    """One model call as the daemon keeps it; ``estimate`` when its cost came from the config's prices."""

    job: str
    call: str
    model: str
    tokens: dict[str, int]
    cost: float | None
    estimate: bool
    #: The root of the job's tree when it was spent ("": the job is a root): `usage` groups by it.
    root: str = ""


class UsageTable:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def add(self, call: Call, ts: float) -> bool:
        """Keep ``call`` unless its id was kept for that job already; True when it was new."""
        cur = self._db.execute(
            "INSERT OR IGNORE INTO usage_calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (call.job, call.call[:CALL_ID_MAX], call.root or call.job, day_of(ts), ts, call.model[:MODEL_MAX],
             *(int(call.tokens.get(k) or 0) for k in TOKEN_KINDS), call.cost, int(call.estimate)))
        return cur.rowcount == 1

    def calls(self, job: str, limit: int = 200) -> list[dict[str, Any]]:
        """A job's newest calls, newest first."""
        rows = self._db.execute("SELECT * FROM usage_calls WHERE job = ? ORDER BY ts DESC LIMIT ?", (job, limit))
        return [dict(r) for r in rows]

    def by_day_and(self, column: str, first_day: str, last_day: str,
                   root: str | None = None) -> dict[tuple[str, str], dict[str, Any]]:
        """The sums per (day, root) or (day, job) — ``column`` — of the calls from ``first_day`` to
        ``last_day`` (of one tree with ``root``): one SQL aggregate over the (day, root) index."""
        if column not in ("root", "job"):
            raise ValueError(f"no sums by {column!r}")
        sums = ", ".join(f"SUM({k}) AS {k}" for k in TOKEN_KINDS)
        where, args = "day BETWEEN ? AND ?", [first_day, last_day]
        if root is not None:
            where, args = where + " AND root = ?", [*args, root]
        rows = self._db.execute(f"SELECT day, {column} AS key, {sums}, SUM(cost) AS cost, MAX(estimate) AS estimate, "
                                f"COUNT(*) AS calls FROM usage_calls WHERE {where} GROUP BY day, {column}", args)
        return {(r["day"], r["key"]): {k: r[k] for k in r.keys() if k not in ("day", "key")} for r in rows}

    def spent_since(self, first_day: str) -> tuple[float, int]:
        """Dollars and tokens (input and output) of every call from ``first_day`` on."""
        row = self._db.execute("SELECT COALESCE(SUM(cost), 0), COALESCE(SUM(input + output), 0) "
                               "FROM usage_calls WHERE day >= ?", (first_day,)).fetchone()
        return float(row[0]), int(row[1])

    # -- budgets --------------------------------------------------------------------------------------
    def set_budget(self, job: str, usd: float | None, tokens: int | None, level: str = "ok") -> None:
        self._db.execute("INSERT OR REPLACE INTO budgets VALUES (?, ?, ?, ?)", (job, usd, tokens, level))

    def set_level(self, job: str, level: str) -> None:
        self._db.execute("UPDATE budgets SET level = ? WHERE job = ?", (level, job))

    def budgets(self) -> dict[str, tuple[float | None, int | None, str]]:
        """Every budget: job -> (dollars, tokens, the level it reached)."""
        return {r["job"]: (r["usd"], r["tokens"], r["level"]) for r in self._db.execute("SELECT * FROM budgets")}
