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

One idea at about 410 lines: the tree and what is kept counted over it; filling a page of rows is
``listing.py``, the records and briefs behind it ``records.py``.
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from roost.daemon.storage.listing import fill, parse_cursor
from roost.daemon.storage.records import DataReader, Facts, Reader, Records
from roost.models import ACTIVE_STATES, NEEDS_PERSON_STATES, Job, Row, State, wire_row
from roost.protocol import ErrorCode, ProtocolError
from roost.rules.provider_subagents import subagent_says
from roost.rules.views import filter_matches, listed_in_agent_view, parse_filter

class JobIndex:
    """Records by id, children by parent, counts by job, and who has each job open."""

    def __init__(self) -> None:
        #: Every job; most as briefs until first used (roost/daemon/storage/records.py).
        self.jobs = Records()
        self._children: dict[str, set[str]] = {}
        self._order: list[tuple[float, str]] = []
        #: [descendants, running descendants] of each job, over its non-archived subtree.
        self._counts: dict[str, list[int]] = {}
        #: What each job adds to each of its ancestors' counts, as last counted.
        self._contrib: dict[str, tuple[int, int]] = {}
        self._attached: dict[str, set[int]] = {}
        #: Whether each provider subagent works, by job and subagent id (jobs with a worker up).
        self._provider: dict[str, dict[str, bool]] = {}
        #: Non-archived jobs by (state, has a parent), kept as they change (roost/rules/counts.py),
        #: and where each job was last counted in it.
        self.tally: collections.Counter[tuple[State, bool]] = collections.Counter()
        self._tallied: dict[str, tuple[State, bool]] = {}

    # -- loading and changing -------------------------------------------------------------------
    def reads_from(self, read: Reader, read_data: DataReader) -> None:
        """Where the records of briefs are read when they are needed (``Store.records``), and read
        as data for a listing's rows (``Store.record_data``)."""
        self.jobs.reads_from(read, read_data)

    def load(self, jobs: Iterable[Facts]) -> None:
        """Index every job at start-up, whole records and briefs (roost/daemon/storage/briefs.py),
        counting in one pass from the deepest jobs up."""
        counts, children, contribs = self._counts, self._children, self._contrib
        self.jobs.add_all(jobs)
        facts = list(self.jobs.every_fact())
        for job in facts:
            counts[job.id] = [0, 0]
            if job.parent:
                children.setdefault(job.parent, set()).add(job.id)
        self._order = sorted((j.created_at, j.id) for j in facts)
        for job in facts:
            self._count_state(job)
        active = ACTIVE_STATES
        facts.sort(key=lambda j: -j.depth)
        for job in facts:
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

    def remove(self, job: Job) -> set[str]:
        """Take back a record ``add`` put in (a spawn the store did not keep); it has no children.
        Returns the ids whose rows changed (its ancestors)."""
        contrib = self._contrib.pop(job.id, (0, 0))
        changed = set(self._propagate(job.parent, -contrib[0], -contrib[1]))
        if job.parent:
            self._children.get(job.parent, set()).discard(job.id)
        key = (job.created_at, job.id)
        at = bisect.bisect_left(self._order, key)
        if at < len(self._order) and self._order[at] == key:
            del self._order[at]
        self._counts.pop(job.id, None)
        self._provider.pop(job.id, None)
        self.jobs.pop(job.id, None)
        return changed

    def update(self, job: Job) -> set[str]:
        """Re-count what ``job`` adds to its ancestors after its state or archived flag changed;
        returns the ids whose rows changed."""
        if job.pid is None:
            self._provider.pop(job.id, None)  # its subagents went with its worker
        self._count_state(job)
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
        self._count_state(job)
        return changed

    def _count_state(self, job: Facts) -> None:
        """Move ``job`` to its place in ``tally`` (none while archived)."""
        old = self._tallied.pop(job.id, None)
        if old is not None:
            self.tally[old] -= 1
        if job.archived_at is None:
            self._tallied[job.id] = place = (State(job.state), job.parent is not None)
            self.tally[place] += 1

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
            job = self.jobs.facts(parent)
            assert job is not None
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

    def provider_words(self, job_id: str) -> dict[str, bool] | None:
        """The subagents' last words counted for ``job_id`` (None: not read from its timeline yet)."""
        return self._provider.get(job_id)

    def set_provider_words(self, job_id: str, words: dict[str, bool] | None) -> None:
        """Put back what ``provider_words`` gave (the engine undoing a change the store refused)."""
        if words is None:
            self._provider.pop(job_id, None)
        else:
            self._provider[job_id] = words

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
        return self.jobs.whole([k.id for k in self._kid_facts(job_id, archived)])

    def _kid_facts(self, job_id: str, archived: bool) -> list[Facts]:
        facts = (self.jobs.facts(c) for c in self._children.get(job_id, ()))
        kids = [k for k in facts if k is not None and (archived or k.archived_at is None)]
        return sorted(kids, key=lambda j: (j.created_at, j.id))

    def descendants(self, job_id: str, archived: bool = False) -> list[Job]:
        """Every job below ``job_id``, parents before their children."""
        return self.jobs.whole([k.id for k in self._below(job_id, archived)])

    def _below(self, job_id: str, archived: bool) -> list[Facts]:
        out: list[Facts] = []
        stack = [job_id]
        seen = {job_id}
        while stack:
            for kid in self._kid_facts(stack.pop(), archived):
                if kid.id not in seen:
                    seen.add(kid.id)
                    out.append(kid)
                    stack.append(kid.id)
        return out

    def ancestors(self, job_id: str) -> list[str]:
        """The ids above ``job_id``, nearest first."""
        out: list[str] = []
        seen = {job_id}
        job = self.jobs.facts(job_id)
        while job is not None and job.parent and job.parent in self.jobs and job.parent not in seen:
            seen.add(job.parent)
            out.append(job.parent)
            job = self.jobs.facts(job.parent)
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

    def holders(self, job_id: str) -> frozenset[int]:
        """The connections that have the job open."""
        return frozenset(self._attached.get(job_id, ()))

    def set_holders(self, job_id: str, holders: frozenset[int]) -> None:
        """Put back what ``holders`` gave (the engine undoing a change the store refused)."""
        if holders:
            self._attached[job_id] = set(holders)
        else:
            self._attached.pop(job_id, None)

    def attached_by(self, conn_id: int) -> list[str]:
        return [job_id for job_id, holders in self._attached.items() if conn_id in holders]

    def attached(self, job_id: str) -> bool:
        return bool(self._attached.get(job_id))

    def parent_open(self, job: Facts) -> bool:
        """Whether something live holds the job's parent: its worker is up or a client has it open."""
        if job.parent is None:
            return True
        parent = self.jobs.facts(job.parent)
        if parent is None or parent.archived_at is not None:
            return False
        return parent.worker_up or self.attached(parent.id)

    # -- rows ------------------------------------------------------------------------------------
    def row(self, job_id: str, full: bool = False) -> dict[str, Any]:
        """The job as clients see it (slim unless ``full``)."""
        return self._row(self.require(job_id), full)

    def _row(self, job: Job, full: bool) -> dict[str, Any]:
        desc, running = self.counts(job.id)
        return Row(job=job, parent_open=self.parent_open(job), attached=self.attached(job.id),
                   descendants=desc, running_descendants=running).to_wire(full=full)

    def wire(self, job: Facts, data: dict[str, Any], full: bool) -> dict[str, Any]:
        """The row of a job whose record's data is ``data`` (``Job.to_dict``'s shape, used up)."""
        desc, running = self.counts(job.id)
        return wire_row(data, self.parent_open(job), self.attached(job.id), desc, running, full)

    def page(self, limit: int = 500, cursor: str | None = None, roots: bool = False,
             states: list[str] | None = None, under: str | None = None, archived: bool = False,
             full: bool = False, newest_first: bool = False, archived_only: bool = False,
             match: str | None = None, lines: bool = False) -> dict[str, Any]:
        """One page of ``list``: rows in creation order after ``cursor``, filtered (``match``: the
        app's filter text, roost/rules/views.py), at most ``limit`` of them and about PAGE_BYTES of
        text; ``next`` is null on the last page. Filters read briefs; only the page's records are
        read whole, and not kept. With ``lines`` (and ``full``) the page has ``lines``, each row's
        line of ``roost ls --json``, instead of ``rows`` (roost/daemon/storage/listing.py)."""
        if under is not None:
            self.require(under)
        full = full or lines
        wanted = set(states) if states else None
        below = {j.id for j in self._below(under, archived=True)} if under is not None else None
        wanted_text = parse_filter(match) if match else None

        def kept(job: Facts) -> bool:
            if archived_only and job.archived_at is None:
                return False
            return ((archived or archived_only or job.archived_at is None) and (not roots or job.parent is None)
                    and (wanted is None or job.state.value in wanted) and (below is None or job.id in below)
                    and (wanted_text is None or filter_matches(job.state, job.title, job.id, wanted_text)))

        jobs = (job for job in self._walk(cursor, newest_first, "list") if kept(job))
        rows, after = fill(jobs, limit, full, self.jobs.peek_data, self.wire, lines)
        total = sum(1 for j in self.jobs.every_fact() if kept(j)) if cursor is None else None
        return {"lines" if lines else "rows": rows, "next": after, "total": total}

    def kids_page(self, job_id: str, limit: int = 500, cursor: str | None = None) -> dict[str, Any]:
        """One page of ``children``: a job's children in creation order after ``cursor``, paged
        like ``list`` (at most ``limit`` rows and about PAGE_BYTES), so any number can be read."""
        kids = self._kid_facts(self.require(job_id).id, archived=False)
        start = 0
        if cursor is not None:
            start = bisect.bisect_right([(k.created_at, k.id) for k in kids], parse_cursor(cursor, "children"))
        rows, after = fill(iter(kids[start:]), limit, False, self.jobs.peek_data, self.wire)
        return {"rows": rows, "next": after, "total": len(kids) if cursor is None else None}

    def _walk(self, cursor: str | None, newest_first: bool, op: str = "list") -> Iterator[Facts]:
        order = self._order
        if newest_first:
            start = len(order) if cursor is None else bisect.bisect_left(order, parse_cursor(cursor, op))
            keys: Iterable[tuple[float, str]] = (order[i] for i in range(start - 1, -1, -1))
        else:
            start = 0 if cursor is None else bisect.bisect_right(order, parse_cursor(cursor, op))
            keys = (order[i] for i in range(start, len(order)))
        facts = self.jobs.facts
        for _, job_id in keys:
            job = facts(job_id)
            if job is not None:
                yield job

    def agent_view(self, limit: int = 200, inline: bool = False) -> tuple[list[dict[str, Any]], int]:
        """The agent view's snapshot: every root (or, inline, every job) with live work or that
        needs a person, every orphan that still works or waits, and the ``limit`` newest other
        roots; with how many matching rows were left out."""
        listed: list[str] = []
        left = 0
        for job in self._walk(None, newest_first=True):
            if not self._in_agent_view(job, inline):
                continue
            if self._always_listed(job) or job.parent is not None:
                listed.append(job.id)
            elif limit > 0:
                listed.append(job.id)
                limit -= 1
            else:
                left += 1
        whole = self.jobs.peek(listed)
        return [self._row(whole[job_id], False) for job_id in listed], left

    def _always_listed(self, job: Facts) -> bool:
        """Whether the agent view lists the job whatever its window: live work (it works, will
        work, waits, its worker is up or a client has it open) and what needs a person (failed,
        blocked, an approval pending), so no window hides them."""
        return (job.state in ACTIVE_STATES or job.state in NEEDS_PERSON_STATES or bool(job.approvals)
                or job.worker_up or self.attached(job.id))

    def in_agent_view(self, job_id: str, inline: bool = False) -> bool:
        """Whether the agent view shows (or may show) this job: roots, listed orphans, or with
        ``inline`` every job. An orphan counts while it still works or waits."""
        job = self.jobs.facts(job_id)
        return job is not None and self._in_agent_view(job, inline)

    def _in_agent_view(self, job: Facts, inline: bool) -> bool:
        if job.archived_at is not None:
            return False
        return listed_in_agent_view(job.parent is None, job.parent is None or self.parent_open(job), job.state, inline)

    def subtree(self, job_id: str, cap: int = 5000) -> tuple[list[dict[str, Any]], int]:
        """The rows below a job (its panel), parents first, at most ``cap``; with how many more."""
        below = self._below(self.require(job_id).id, archived=False)
        whole = self.jobs.peek([j.id for j in below[:cap]])
        return [self._row(whole[j.id], False) for j in below[:cap]], max(0, len(below) - cap)
