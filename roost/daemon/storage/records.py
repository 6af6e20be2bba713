"""Every job by id, most of them as briefs until something needs them whole.

A start loads a brief of each record (roost/daemon/storage/briefs.py); the record itself is
read from the store the first time the daemon asks for the job (``records[id]``, ``get``), and
from then on that one ``Job`` is the job, as every record was when all were loaded: the engine
changes it in place and saves it. The index's own walks (tree, counts, filters, the agent view)
read ``facts``, a brief or the ``Job``, and never load a record; a listing reads its page's
records for the page only (``peek``), so `roost ls --json` of 100k jobs leaves memory as it was.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, MutableMapping, ValuesView
from typing import Any, Union

import orjson

from roost.daemon.storage.briefs import Brief
from roost.models import JOB_FIELDS, JOB_KEYS, STATES_BY_VALUE, Job

#: A job as the index walks it: the record when loaded, else its brief (same field names).
Facts = Union[Job, Brief]
#: Reads whole records by id from the store (``Store.records``).
Reader = Callable[[list[str]], dict[str, Job]]
#: Reads the records of ids as data with each stored record's length (Store.record_data).
DataReader = Callable[[list[str]], dict[str, tuple[dict[str, Any], int]]]
#: Records read from the store by one query.
_BATCH = 900


_STATE_AT = JOB_FIELDS.index("state")
#: Distinct ``driver_opts`` kept to share among records read (a few profiles, usually).
_OPTS_KEPT = 256


def parse_record(job_id: str, record: str, shared: dict[str, Any]) -> Job:
    """One stored record as a ``Job``; equal ``driver_opts`` are one dict of ``shared`` (most jobs
    share a few profiles), ``cwd`` and ``driver`` interned. Raises ValueError, TypeError or
    KeyError for a record that is not one of this job's."""
    data = json.loads(record)
    if not isinstance(data, dict) or data.get("id") != job_id:
        raise ValueError("not a record of this job")
    try:  # by position: matching 38 keyword names json made afresh was most of from_dict's time
        values = [data[name] for name in JOB_FIELDS]
        values[_STATE_AT] = STATES_BY_VALUE[values[_STATE_AT]]
        job = Job(*values)
    except KeyError:  # a record from before a field was added (or without a state): its defaults
        job = Job.from_dict(data)
    opts = job.driver_opts
    if len(shared) >= _OPTS_KEPT:  # many one-off profiles: share what comes next
        shared.clear()
    job.driver_opts = shared.setdefault(repr(opts), opts)
    job.cwd = sys.intern(job.cwd)
    job.driver = sys.intern(job.driver)
    return job


def record_data(job_id: str, record: str, shared: dict[str, Any]) -> dict[str, Any]:
    """One stored record as ``Job.to_dict`` gives it, for a row of a record that is not kept: its
    own parsed JSON when it has every field and no other (no ``Job`` is built), else by way of
    ``parse_record`` (a record from before a field was added). Raises as ``parse_record``."""
    try:
        data = orjson.loads(record)  # a third of json's time
    except ValueError:  # what json reads and orjson does not (NaN, a lone surrogate's escape)
        data = json.loads(record)
    if type(data) is dict and data.keys() == JOB_KEYS and data["id"] == job_id and data["state"] in STATES_BY_VALUE:
        return data
    return parse_record(job_id, record, shared).to_dict()


def _no_store(ids: list[str]) -> dict[str, Job]:
    return {}


def _no_data(ids: list[str]) -> dict[str, tuple[dict[str, Any], int]]:
    return {}


class Records(MutableMapping[str, Job]):
    """Jobs by id: loaded ``Job``s, and briefs of the rest that load on first use."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._briefs: dict[str, Brief] = {}
        self._read: Reader = _no_store
        self._read_data: DataReader = _no_data

    def reads_from(self, read: Reader, read_data: DataReader = _no_data) -> None:
        self._read, self._read_data = read, read_data

    def add_all(self, facts: Iterable[Facts]) -> None:
        """Jobs and briefs at start (a brief never replaces a loaded job)."""
        jobs, briefs = self._jobs, self._briefs
        for fact in facts:
            if type(fact) is Brief:
                if fact.id not in jobs:
                    briefs[fact.id] = fact
            else:
                jobs[fact.id] = fact  # type: ignore[assignment]
                briefs.pop(fact.id, None)

    def loaded(self) -> int:
        """How many jobs are whole in memory (the others are briefs)."""
        return len(self._jobs)

    def facts(self, job_id: str) -> Facts | None:
        """What the index walks for a job, loading nothing."""
        return self._jobs.get(job_id) or self._briefs.get(job_id)

    def every_fact(self) -> Iterator[Facts]:
        yield from self._jobs.values()
        yield from self._briefs.values()

    def with_worktree(self) -> list[Facts]:
        """The jobs that own a worktree, oldest first, loading nothing (worktrees.py loads the
        ones it acts on): a walk over briefs, not over every record."""
        return sorted((f for f in self.every_fact() if f.worktree is not None), key=lambda f: f.created_at)

    def working_in(self, top: str) -> list[Facts]:
        """The jobs whose directory is ``top`` or inside it, loading nothing."""
        under = top.rstrip("/") + "/"
        return [f for f in self.every_fact() if f.cwd == top or f.cwd.startswith(under)]

    def peek(self, ids: list[str]) -> dict[str, Job]:
        """The records of ``ids`` for one use (a page of rows): the loaded ones, and the others read
        from the store without keeping them, so a listing does not grow memory."""
        out = {i: self._jobs[i] for i in ids if i in self._jobs}
        missing = [i for i in ids if i not in out and i in self._briefs]
        if missing:
            out.update(self._read(missing))
        return out

    def peek_data(self, ids: list[str]) -> dict[str, tuple[dict[str, Any], int | None]]:
        """What ``peek`` reads, as each record's data (``Job.to_dict``'s shape, the caller's to
        change), with the stored record's length for those read from the store (None for a loaded
        job: its record in memory may be newer than the stored one)."""
        out: dict[str, tuple[dict[str, Any], int | None]] = {
            i: (self._jobs[i].to_dict(), None) for i in ids if i in self._jobs}
        missing = [i for i in ids if i not in out and i in self._briefs]
        if missing:
            out.update(self._read_data(missing))
        return out

    def whole(self, ids: list[str]) -> list[Job]:
        """The jobs of ``ids`` whole, in that order, their records read in batches and kept (the
        daemon is about to act on them)."""
        missing = [i for i in ids if i not in self._jobs and i in self._briefs]
        for at in range(0, len(missing), _BATCH):
            self._load(missing[at:at + _BATCH])
        return [self._jobs[i] for i in ids if i in self._jobs]

    def __getitem__(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is not None:
            return job
        if job_id not in self._briefs:
            raise KeyError(job_id)
        self._load([job_id])
        return self._jobs[job_id]

    def _load(self, ids: list[str]) -> None:
        read = self._read(ids)
        for job_id in ids:
            job = read.get(job_id)
            if job is None:
                raise KeyError(f"job {job_id} has a brief but no record in the store")
            self._jobs[job_id] = job
            del self._briefs[job_id]

    def __setitem__(self, job_id: str, job: Job) -> None:
        self._jobs[job_id] = job
        self._briefs.pop(job_id, None)

    def __delitem__(self, job_id: str) -> None:
        if self._jobs.pop(job_id, None) is None and self._briefs.pop(job_id, None) is None:
            raise KeyError(job_id)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs or job_id in self._briefs

    def __iter__(self) -> Iterator[str]:
        return iter([*self._jobs, *self._briefs])

    def __len__(self) -> int:
        return len(self._jobs) + len(self._briefs)

    def values(self) -> ValuesView[Job]:  # type: ignore[override]
        """Every job whole: loads all the records not loaded yet (a walk over every job's record
        costs what a start used to; the index's walks use ``every_fact``)."""
        self.whole(list(self._briefs))
        return self._jobs.values()
