"""The job index: every record in memory, the tree, kept counts, and the rows clients read.

Descendant and running-descendant counts are kept, not recomputed: when a job changes, its
contribution to its ancestors is updated by walking up once (``update``). Listing pages through
jobs in creation order with a cursor, and stops at a byte budget, so no reply outgrows a frame.
Only the engine mutates records; it tells the index after each change.

A job's provider-native subagents (Claude Code's ``Task``) are counted on its record as the
engine records their ``subagent`` entries (``count_subagent``), so a start reads no timeline. To
count one once and follow its state, the index keeps, while the job's worker is up, the last word
of each subagent its timeline names: read from the store at the first entry after a start or a
new worker, and let go when the worker goes, so memory grows with live workers' subagents only.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from roost.bounds import LABELS_CHARS, LABELS_MAX, LAST_TEXT_MAX, PATH_MAX, TITLE_MAX, quote
from roost.models import ACTIVE_STATES, NEEDS_PERSON_STATES, PEEK_MAX, Job, Row
from roost.protocol import PAGE_BYTES, ErrorCode, ProtocolError
from roost.rules.provider_subagents import subagent_says
from roost.rules.views import filter_matches, parse_filter

#: How much a row costs on the wire beyond its texts (keys, numbers, punctuation), a safe estimate.
_ROW_OVERHEAD = 512


def _cursor(job: Job) -> str:
    return f"{job.created_at!r}/{job.id}"


def _parse_cursor(cursor: str, op: str) -> tuple[float, str]:
    try:
        ts, job_id = cursor.split("/", 1)
        return float(ts), job_id
    except ValueError:
        raise ProtocolError(ErrorCode.BAD_ARGS, f"{op}: cursor {quote(cursor)} is not one this daemon gave") from None


class JobIndex:
    """Records by id, children by parent, counts by job, and who has each job open."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self._children: dict[str, set[str]] = {}
        self._order: list[tuple[float, str]] = []
        #: [descendants, running descendants] of each job, over its non-archived subtree.
        self._counts: dict[str, list[int]] = {}
        #: What each job adds to each of its ancestors' counts, as last counted.
        self._contrib: dict[str, tuple[int, int]] = {}
        self._attached: dict[str, set[int]] = {}
        #: Whether each provider subagent works, by job and subagent id (jobs with a worker up).
        self._provider: dict[str, dict[str, bool]] = {}

    # -- loading and changing -------------------------------------------------------------------
    def load(self, jobs: Iterable[Job]) -> None:
        """Index every record at start-up, counting in one pass from the deepest jobs up."""
        records, counts, children, contribs = self.jobs, self._counts, self._children, self._contrib
        for job in jobs:
            records[job.id] = job
            counts[job.id] = [0, 0]
            if job.parent:
                children.setdefault(job.parent, set()).add(job.id)
        self._order = sorted((j.created_at, j.id) for j in records.values())
        active = ACTIVE_STATES
        for job in sorted(records.values(), key=lambda j: -j.depth):
            mine = counts[job.id]
            contrib = (0, 0) if job.archived_at is not None else (1 + mine[0], mine[1] + (job.state in active))
            contribs[job.id] = contrib
            parent = counts.get(job.parent) if job.parent else None
            if parent is not None:
                parent[0] += contrib[0]
                parent[1] += contrib[1]

    def add(self, job: Job) -> set[str]:
        """A new record; returns the ids whose rows changed (it and its ancestors)."""
        self.jobs[job.id] = job
        self._counts[job.id] = [0, 0]
        self._contrib[job.id] = (0, 0)
        if job.parent:
            self._children.setdefault(job.parent, set()).add(job.id)
        bisect.insort(self._order, (job.created_at, job.id))
        return self.update(job)

    def update(self, job: Job) -> set[str]:
        """Re-count what ``job`` adds to its ancestors after its state or archived flag changed;
        returns the ids whose rows changed."""
        if job.pid is None:
            self._provider.pop(job.id, None)  # its subagents went with its worker
        new = self._contribution(job)
        old = self._contrib.get(job.id, (0, 0))
        self._contrib[job.id] = new
        changed = {job.id}
        if new != old:
            changed.update(self._propagate(job.parent, new[0] - old[0], new[1] - old[1]))
        return changed

    def reparent(self, job: Job, parent: str | None) -> set[str]:
        """Move ``job`` (and its subtree) under ``parent`` (None: a root), fixing depths and counts;
        returns the ids whose rows changed, the whole moved subtree included."""
        contrib = self._contrib.get(job.id, (0, 0))
        changed = set(self._propagate(job.parent, -contrib[0], -contrib[1]))
        if job.parent:
            self._children.get(job.parent, set()).discard(job.id)
        job.parent = parent
        if parent:
            self._children.setdefault(parent, set()).add(job.id)
        base = self.jobs[parent].depth + 1 if parent and parent in self.jobs else 0
        shift = base - job.depth
        for member in [job, *self.descendants(job.id, archived=True)]:
            member.depth += shift
            changed.add(member.id)
        changed.update(self._propagate(parent, contrib[0], contrib[1]))
        return changed

    def _contribution(self, job: Job) -> tuple[int, int]:
        if job.archived_at is not None:
            return (0, 0)
        mine = self._counts.get(job.id, [0, 0])
        return (1 + mine[0], mine[1] + (job.state in ACTIVE_STATES))

    def _propagate(self, parent: str | None, d_desc: int, d_run: int) -> list[str]:
        """Add a change to every ancestor up to the first archived one (which adds nothing above)."""
        touched: list[str] = []
        seen: set[str] = set()
        while parent and parent in self.jobs and parent not in seen and (d_desc or d_run):
            seen.add(parent)
            counts = self._counts[parent]
            counts[0] += d_desc
            counts[1] += d_run
            touched.append(parent)
            job = self.jobs[parent]
            if job.archived_at is not None:
                break
            old = self._contrib[parent]
            self._contrib[parent] = (old[0] + d_desc, old[1] + d_run)
            parent = job.parent
        return touched

    def count_subagent(self, job: Job, data: Mapping[str, Any],
                       recorded: Callable[[], Iterable[Mapping[str, Any]]]) -> bool:
        """Count a ``subagent`` entry about to be recorded on ``job`` into its record's
        ``provider_subagents`` / ``provider_running``; ``recorded`` gives the data of the ones
        already on its timeline, oldest first (read only when this index holds none of them).
        True when a count changed (the record needs saving)."""
        said = subagent_says(data)
        if said is None:
            return False
        ident, working = said
        before = (job.provider_subagents, job.provider_running)
        mine = self._provider.get(job.id)
        if mine is None:  # counted again from its timeline: also right for a record older than the counts
            mine = self._provider[job.id] = {}
            for old in recorded():
                if (seen := subagent_says(old)) is not None:
                    mine[seen[0]] = seen[1]
            job.provider_subagents, job.provider_running = len(mine), sum(mine.values())
        was = mine.get(ident)
        mine[ident] = working
        job.provider_subagents += was is None
        job.provider_running += working - bool(was)
        return (job.provider_subagents, job.provider_running) != before

    # -- reading the tree -----------------------------------------------------------------------
    def get(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def require(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise ProtocolError(ErrorCode.UNKNOWN_JOB, f"no job with id {job_id!r}")
        return job

    def kids(self, job_id: str, archived: bool = False) -> list[Job]:
        """Direct children, oldest first."""
        kids = [self.jobs[c] for c in self._children.get(job_id, ()) if c in self.jobs]
        if not archived:
            kids = [k for k in kids if k.archived_at is None]
        return sorted(kids, key=lambda j: (j.created_at, j.id))

    def descendants(self, job_id: str, archived: bool = False) -> list[Job]:
        """Every job below ``job_id``, parents before their children."""
        out: list[Job] = []
        stack = [job_id]
        seen = {job_id}
        while stack:
            for kid in self.kids(stack.pop(), archived):
                if kid.id not in seen:
                    seen.add(kid.id)
                    out.append(kid)
                    stack.append(kid.id)
        return out

    def ancestors(self, job_id: str) -> list[str]:
        """The ids above ``job_id``, nearest first."""
        out: list[str] = []
        seen = {job_id}
        job = self.jobs.get(job_id)
        while job is not None and job.parent and job.parent in self.jobs and job.parent not in seen:
            seen.add(job.parent)
            out.append(job.parent)
            job = self.jobs[job.parent]
        return out

    def under(self, job_id: str, ancestor: str) -> bool:
        """Whether ``job_id`` is in ``ancestor``'s subtree (the job itself included)."""
        return job_id == ancestor or ancestor in self.ancestors(job_id)

    def counts(self, job_id: str) -> tuple[int, int]:
        counts = self._counts.get(job_id, [0, 0])
        return counts[0], counts[1]

    # -- who has a job open ---------------------------------------------------------------------
    def attach(self, job_id: str, conn_id: int) -> bool:
        """Record that a client has the job open; True when it is the first."""
        holders = self._attached.setdefault(job_id, set())
        first = not holders
        holders.add(conn_id)
        return first

    def release(self, job_id: str, conn_id: int) -> bool:
        """A client closed the job; True when nobody has it open any more."""
        holders = self._attached.get(job_id)
        if not holders or conn_id not in holders:
            return False
        holders.discard(conn_id)
        if holders:
            return False
        del self._attached[job_id]
        return True

    def attached_by(self, conn_id: int) -> list[str]:
        return [job_id for job_id, holders in self._attached.items() if conn_id in holders]

    def attached(self, job_id: str) -> bool:
        return bool(self._attached.get(job_id))

    def parent_open(self, job: Job) -> bool:
        """Whether something live holds the job's parent: its worker is up or a client has it open."""
        if job.parent is None:
            return True
        parent = self.jobs.get(job.parent)
        if parent is None or parent.archived_at is not None:
            return False
        return parent.worker_up or self.attached(parent.id)

    # -- rows ------------------------------------------------------------------------------------
    def row(self, job_id: str, full: bool = False) -> dict[str, Any]:
        """The job as clients see it (slim unless ``full``)."""
        job = self.require(job_id)
        desc, running = self.counts(job_id)
        return Row(job=job, parent_open=self.parent_open(job), attached=self.attached(job_id),
                   descendants=desc, running_descendants=running).to_wire(full=full)

    def page(self, limit: int = 500, cursor: str | None = None, roots: bool = False,
             states: list[str] | None = None, under: str | None = None, archived: bool = False,
             full: bool = False, newest_first: bool = False, archived_only: bool = False,
             match: str | None = None) -> dict[str, Any]:
        """One page of ``list``: rows in creation order after ``cursor``, filtered (``match``: the
        app's filter text, roost/rules/views.py), at most ``limit`` of them and about PAGE_BYTES of
        text; ``next`` is null on the last page."""
        if under is not None:
            self.require(under)
        wanted = set(states) if states else None
        below = {j.id for j in self.descendants(under, archived=True)} if under is not None else None
        wanted_text = parse_filter(match) if match else None

        def kept(job: Job) -> bool:
            if archived_only and job.archived_at is None:
                return False
            return ((archived or archived_only or job.archived_at is None) and (not roots or job.parent is None)
                    and (wanted is None or job.state.value in wanted) and (below is None or job.id in below)
                    and (wanted_text is None or filter_matches(job.state, job.title, job.id, wanted_text)))

        jobs = (job for job in self._walk(cursor, newest_first, "list") if kept(job))
        rows, after = self._fill(jobs, limit, full)
        total = sum(1 for j in self.jobs.values() if kept(j)) if cursor is None else None
        return {"rows": rows, "next": after, "total": total}

    def kids_page(self, job_id: str, limit: int = 500, cursor: str | None = None) -> dict[str, Any]:
        """One page of ``children``: a job's children in creation order after ``cursor``, paged
        like ``list`` (at most ``limit`` rows and about PAGE_BYTES), so any number can be read."""
        kids = self.kids(self.require(job_id).id)
        start = 0
        if cursor is not None:
            start = bisect.bisect_right([(k.created_at, k.id) for k in kids], _parse_cursor(cursor, "children"))
        rows, after = self._fill(iter(kids[start:]), limit, full=False)
        return {"rows": rows, "next": after, "total": len(kids) if cursor is None else None}

    def _fill(self, jobs: Iterator[Job], limit: int, full: bool) -> tuple[list[dict[str, Any]], str | None]:
        """Rows of ``jobs`` until ``limit`` of them or PAGE_BYTES, and the cursor after the last
        one when more are left (None when not)."""
        rows: list[dict[str, Any]] = []
        size = 0
        last: Job | None = None
        for job in jobs:
            if len(rows) >= limit or (rows and size >= PAGE_BYTES):
                return rows, _cursor(last) if last is not None else None
            rows.append(self.row(job.id, full=full))
            size += _row_size(job, full)
            last = job
        return rows, None

    def _walk(self, cursor: str | None, newest_first: bool, op: str = "list") -> Iterator[Job]:
        order = self._order
        if newest_first:
            start = len(order) if cursor is None else bisect.bisect_left(order, _parse_cursor(cursor, op))
            keys: Iterable[tuple[float, str]] = (order[i] for i in range(start - 1, -1, -1))
        else:
            start = 0 if cursor is None else bisect.bisect_right(order, _parse_cursor(cursor, op))
            keys = (order[i] for i in range(start, len(order)))
        for _, job_id in keys:
            job = self.jobs.get(job_id)
            if job is not None:
                yield job

    def agent_view(self, limit: int = 200, inline: bool = False) -> tuple[list[dict[str, Any]], int]:
        """The agent view's snapshot: every root (or, inline, every job) with live work or that
        needs a person, every orphan that still works or waits, and the ``limit`` newest other
        roots; with how many matching rows were left out."""
        rows: list[dict[str, Any]] = []
        left = 0
        for job in self._walk(None, newest_first=True):
            if not self.in_agent_view(job.id, inline):
                continue
            if self._always_listed(job) or job.parent is not None:
                rows.append(self.row(job.id))
            elif limit > 0:
                rows.append(self.row(job.id))
                limit -= 1
            else:
                left += 1
        return rows, left

    def _always_listed(self, job: Job) -> bool:
        """Whether the agent view lists the job whatever its window: live work (it works, will
        work, waits, its worker is up or a client has it open) and what needs a person (failed,
        blocked, an approval pending), so no window hides them."""
        return (job.state in ACTIVE_STATES or job.state in NEEDS_PERSON_STATES or bool(job.approvals)
                or job.worker_up or self.attached(job.id))

    def in_agent_view(self, job_id: str, inline: bool = False) -> bool:
        """Whether the agent view shows (or may show) this job: roots, listed orphans, or with
        ``inline`` every job. An orphan counts while it still works or waits."""
        job = self.jobs.get(job_id)
        if job is None or job.archived_at is not None:
            return False
        if job.parent is None or inline:
            return True
        return not self.parent_open(job) and job.state in ACTIVE_STATES

    def subtree(self, job_id: str, cap: int = 5000) -> tuple[list[dict[str, Any]], int]:
        """The rows below a job (its panel), parents first, at most ``cap``; with how many more."""
        below = self.descendants(self.require(job_id).id)
        return [self.row(j.id) for j in below[:cap]], max(0, len(below) - cap)


def _row_size(job: Job, full: bool) -> int:
    """About how many bytes a row takes on the wire (texts in UTF-8, the rest estimated), its
    fields counted as cut to their caps (roost/bounds.py), as the row carries them."""
    labels = sum(len(k) + len(v) for k, v in job.labels.items())
    size = (_ROW_OVERHEAD + _utf8(job.title, TITLE_MAX) + _utf8(job.cwd, PATH_MAX)
            + 64 * min(len(job.labels), LABELS_MAX) + 4 * min(labels, LABELS_CHARS))
    if job.approvals:  # each at most about WHAT_MAX bytes (roost/rules/approvals.py)
        size += len(repr(job.approvals))
    if full:
        size += len(repr(job.approval_policy)) + len(repr(job.approval_grants))
    if full:
        size += (_utf8(job.last_text, LAST_TEXT_MAX) + _utf8(job.reason, LAST_TEXT_MAX) + len(job.question.encode())
                 + len(repr(job.driver_opts)) + len(repr(job.usage)))
    else:
        size += 2 * (min(len(job.last_text), PEEK_MAX) + min(len(job.reason), PEEK_MAX)
                     + min(len(job.question), PEEK_MAX)) + len(repr(job.usage))
    return size


def _utf8(text: str, cap: int) -> int:
    """The bytes of ``text`` cut to ``cap`` characters, at most (4 bytes a character)."""
    return len(text.encode()) if len(text) <= cap else 4 * cap
