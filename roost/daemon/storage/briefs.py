"""A brief of each job record: what a start loads instead of the record itself.

Parsing 100k JSON records and building their ``Job``s was most of a start (bench/run.py scale):
the index needs only a few fields of a job nobody touches — its place in the tree, its state,
its times, its worker, whether approvals wait, its title for the filter, its directory and its
worktree (what an archive's worktree concerns: roost/daemon/git/worktrees.py). SQLite keeps those in
``job_briefs``, one row per record, written by triggers on ``jobs`` from the record's own JSON,
so every writer of a record (this roost, an older one, a salvage, a hand-made edit) leaves a
brief that says what the record says, or none when the record would not load; a record without
a brief is read whole at start, as before (and set aside when it cannot be read). The rest of a
record is read from the store when the daemon first needs it (``Store.records``).

The daemon's own save (``Store.save_job``) writes the brief from the ``Job`` it has, and only when
a brief field changed: a command's output saves its record (up to 16 KiB of last text) per 64 KiB
piece, and the trigger read that JSON again each time. It says so with a mark in ``brief_marks``
set just before its write, which the trigger takes away instead of reading the JSON; any other
writer sets no mark.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import Any

from roost.models import STATES_BY_VALUE, Job, State

#: What a brief reads of a record, in one pass over its JSON (SQLite before 3.45 parses the
#: whole text again for every json_extract, and a record carries up to 16 KiB of last text).
_PICKED = ("id", "title", "driver", "cwd", "state", "parent", "created_at", "archived_at", "depth", "pid", "approvals",
           "worktree")
_PICK = ("CASE WHEN json_valid(record) THEN json_extract(record, " + ", ".join(f"'$.{name}'" for name in _PICKED)
         + ") END")


def _at(name: str) -> str:
    return f"json_extract(picked, '$[{_PICKED.index(name)}]')"


def _type(name: str) -> str:
    return f"json_type(picked, '$[{_PICKED.index(name)}]')"


#: A record SQLite can vouch for: an object of this id with the fields ``Job`` needs and a state
#: it knows. Anything else gets no brief, so the start reads it whole and sets it aside if it must.
_SOUND = (f"picked IS NOT NULL AND {_at('id')} IS id AND {_at('title')} IS NOT NULL AND {_at('driver')} IS NOT NULL "
          f"AND {_type('cwd')} = 'text' AND {_type('worktree')} IN ('null', 'text') "
          f"AND COALESCE({_at('state')}, 'starting') IN ("
          + ", ".join(f"'{s.value}'" for s in State) + ")")
#: The brief of a record, in the columns' order (defaults as ``Job``'s).
_BRIEF = (f"id, {_at('parent')}, COALESCE({_at('state')}, 'starting'), COALESCE({_at('created_at')}, 0.0), "
          f"{_at('archived_at')}, COALESCE({_at('depth')}, 0), {_at('pid')}, {_at('title')}, "
          f"COALESCE(json_array_length(picked, '$[{_PICKED.index('approvals')}]'), 0), {_at('cwd')}, {_at('worktree')}")
#: ``picked`` once a row: a subquery with a LIMIT under a WHERE is not flattened into its
#: outer query, which would copy ``_PICK`` into every use.
_PICKED_FROM = "(SELECT id, " + _PICK + " AS picked FROM {rows} LIMIT -1)"

#: Eleven columns: no salvaged table has eleven (roost/daemon/storage/pages.py matches cells by shape).
#: ``cwd`` and ``worktree`` say which jobs own or work in a worktree without reading every record.
_TABLE = """CREATE TABLE IF NOT EXISTS job_briefs (
    id TEXT PRIMARY KEY, parent TEXT, state TEXT NOT NULL, created_at REAL NOT NULL, archived_at REAL,
    depth INTEGER NOT NULL, pid INTEGER, title TEXT, approvals INTEGER NOT NULL, cwd TEXT NOT NULL, worktree TEXT)"""
#: The ids whose record the daemon is writing with their brief (empty between statements).
_MARKS = "CREATE TABLE IF NOT EXISTS brief_marks (id TEXT PRIMARY KEY)"
_UNMARKED = "NOT EXISTS (SELECT 1 FROM brief_marks WHERE id = NEW.id)"
_WRITE = (f"INSERT OR REPLACE INTO job_briefs SELECT {_BRIEF} FROM "
          f"{_PICKED_FROM.format(rows=f'(SELECT NEW.id AS id, NEW.record AS record WHERE {_UNMARKED})')} "
          f"WHERE {_SOUND}; DELETE FROM brief_marks WHERE id = NEW.id")
#: The statements that make the tables and the triggers (each whole: a trigger's body has
#: semicolons); the first triggers, which read every record written, go.
SCHEMA = (
    _TABLE,
    _MARKS,
    "DROP TRIGGER IF EXISTS job_briefs_insert",
    "DROP TRIGGER IF EXISTS job_briefs_update",
    f"CREATE TRIGGER IF NOT EXISTS job_briefs_inserted AFTER INSERT ON jobs BEGIN {_WRITE}; END",
    "CREATE TRIGGER IF NOT EXISTS job_briefs_updated AFTER UPDATE ON jobs BEGIN "
    f"DELETE FROM job_briefs WHERE id = OLD.id AND {_UNMARKED.replace('NEW.id', 'OLD.id')}; {_WRITE}; END",
    "CREATE TRIGGER IF NOT EXISTS job_briefs_delete AFTER DELETE ON jobs BEGIN "
    "DELETE FROM job_briefs WHERE id = OLD.id; END",
)
#: The daemon's own save: its mark, then (after the record) its brief, rewritten only if it changed.
MARK = "INSERT OR IGNORE INTO brief_marks VALUES (?)"
UNMARK = "DELETE FROM brief_marks WHERE id = ?"
_COLUMNS = ("parent", "state", "created_at", "archived_at", "depth", "pid", "title", "approvals", "cwd", "worktree")
SAVE = (f"INSERT INTO job_briefs VALUES ({', '.join('?' * (len(_COLUMNS) + 1))}) ON CONFLICT(id) DO UPDATE SET "
        + ", ".join(f"{c}=excluded.{c}" for c in _COLUMNS)
        + f" WHERE ({', '.join(_COLUMNS)}) IS NOT ({', '.join('excluded.' + c for c in _COLUMNS)})")

#: Briefs for the records that have none yet (a store from before briefs: once, in SQLite's C).
FILL = (f"INSERT INTO job_briefs SELECT {_BRIEF} FROM "
        f"{_PICKED_FROM.format(rows='jobs WHERE id NOT IN (SELECT id FROM job_briefs)')} WHERE {_SOUND}")
READ = ("SELECT id, parent, state, created_at, archived_at, depth, pid, title, approvals, cwd, worktree "
        "FROM job_briefs")
#: The records a start reads whole: those SQLite could not vouch for.
UNBRIEFED = "SELECT id, record FROM jobs WHERE id NOT IN (SELECT id FROM job_briefs)"


def of_job(job: Job) -> tuple[Any, ...]:
    """A job's brief as ``SAVE`` writes it (the values the trigger would read from its record)."""
    return (job.id, job.parent, job.state.value, job.created_at, job.archived_at, job.depth, job.pid,
            job.title, len(job.approvals), job.cwd, job.worktree)


def upgrade(db: sqlite3.Connection) -> None:
    """A store whose briefs predate ``cwd`` and ``worktree`` loses them here (a start fills them
    again, in SQLite's C, from the records: ``FILL``)."""
    names = {row[1] for row in db.execute("PRAGMA table_info(job_briefs)")}
    if names and "worktree" not in names:
        db.execute("DROP TABLE job_briefs")



class Brief:
    """What the index knows of a job whose record is still in the store: the ``Job`` fields it
    reads, under the same names, so the tree, the counts, the filters and the agent view's rules
    take either. ``approvals`` is how many wait (a ``Job`` holds the list; both are true when
    some do). Never changed: a change loads the record (``JobIndex.jobs[id]``) and the brief goes."""

    __slots__ = ("id", "parent", "state", "created_at", "archived_at", "depth", "pid", "title", "approvals", "cwd",
                 "worktree")

    def __init__(self, row: tuple[Any, ...]) -> None:
        (self.id, self.parent, state, self.created_at, self.archived_at, self.depth, self.pid,
         self.title, self.approvals, cwd, self.worktree) = row
        self.state = STATES_BY_VALUE[state]
        self.cwd = sys.intern(cwd)  # a few directories among 100k jobs

    @property
    def worker_up(self) -> bool:
        """Whether a worker runs for it (as ``Job.worker_up``)."""
        return self.pid is not None
