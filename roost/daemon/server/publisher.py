"""Subscriptions: each client gets the rows and timeline entries of what it shows, nothing else.

A client subscribes to the agent view's rows, to the rows under one job (its panel), or to one
job's timeline from a sequence number. The snapshot goes out as events before the reply, so
nothing falls between them; then live changes follow. Row changes are coalesced: ids collect in
a set and are flushed once per loop pass (``loop.call_soon``), so a burst of changes to one job
becomes one push of its last state. Timeline entries go to that job's subscribers only. All
frames go through the connection's bounded queue (roost/daemon/server/connection.py).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from roost.rules.counts import WorkCounts
from roost.protocol import PAGE_BYTES, QUEUE_BYTES, ErrorCode, ProtocolError, dumps
from roost.rules.views import listed_in_agent_view

if TYPE_CHECKING:
    from roost.daemon.server.connection import Connection
    from roost.daemon.storage.index import JobIndex
    from roost.daemon.storage.store import Store
    from roost.models import Job

#: A snapshot stops at this many bytes (the rest counts in the reply's ``more``), so it always
#: fits in an empty queue and does not by itself make a client lag.
SNAPSHOT_BYTES = QUEUE_BYTES * 3 // 4
#: At most this many rows of a subtree, and timeline entries, go into one snapshot.
SUBTREE_CAP = 5000
TIMELINE_SNAPSHOT = 2000


@dataclass(eq=False)
class Subscription:
    sub: int
    conn: Connection
    what: str
    job: str | None = None
    inline: bool = False
    #: Rows sent that may leave the scope without being archived: working orphans of an agent
    #: view (their parent may open again), a subtree's jobs (one may be detached out of it).
    #: Each gets one more push when it leaves, so the client can drop it.
    shown: set[str] = field(default_factory=set)


class Publisher:
    """Who watches what, and the pushes that follow each committed change."""

    def __init__(self, index: JobIndex, store: Store) -> None:
        self._index = index
        self._store = store
        self._ids = itertools.count(1)
        self._subs: dict[int, Subscription] = {}
        self._views: set[Subscription] = set()
        self._trees: dict[str, set[Subscription]] = {}
        self._timelines: dict[str, set[Subscription]] = {}
        self._dirty: set[str] = set()
        self._flush_pending = False
        #: Working and queued jobs, subagents too (the supervisor sets it): agent views get them
        #: in their reply and a ``counts`` event when they change; the last sent.
        self.counts_of: Callable[[], WorkCounts] = WorkCounts
        self._counts = WorkCounts()

    # -- subscribing ---------------------------------------------------------------------------------
    def subscribe(self, conn: Connection, req_id: Any, what: str, job: str | None = None, after: int = 0,
                  limit: int = 200, inline: bool = False) -> dict[str, Any]:
        """Queue the snapshot on ``conn`` and start pushing; returns the reply's result."""
        if what != "agent_view":
            if job is None:
                raise ProtocolError(ErrorCode.BAD_ARGS, f"subscribe: {what} needs a job")
            self._index.require(job)
        sub = Subscription(next(self._ids), conn, what, job, inline)
        if what == "timeline":
            result = self._timeline_snapshot(sub, after)
        else:
            rows, more = self._index.agent_view(limit, inline) if what == "agent_view" else \
                self._index.subtree(job, SUBTREE_CAP)  # type: ignore[arg-type]
            sent = self._send_rows(sub, req_id, rows)
            if what == "subtree" or not inline:
                sub.shown.update(r["id"] for r in rows[:sent] if what == "subtree" or r["parent"] is not None)
            result = {"count": sent, "more": more + len(rows) - sent}
            if what == "agent_view":
                result["counts"] = self.counts_of().to_wire()
        self._subs[sub.sub] = sub
        self._scope(sub).add(sub)
        return {"sub": sub.sub, **result}

    def _scope(self, sub: Subscription) -> set[Subscription]:
        if sub.what == "agent_view":
            return self._views
        table = self._trees if sub.what == "subtree" else self._timelines
        return table.setdefault(sub.job, set())  # type: ignore[arg-type]

    def unsubscribe(self, conn: Connection, sub_id: int) -> None:
        sub = self._subs.get(sub_id)
        if sub is None or sub.conn is not conn:
            raise ProtocolError(ErrorCode.BAD_ARGS, f"unsubscribe: no subscription {sub_id} on this connection")
        self._drop(sub)

    def watching(self) -> set[int]:
        """The connections (by id) that hold a subscription: never idle, whatever they send."""
        return {sub.conn.conn_id for sub in self._subs.values()}

    def forget(self, conn: Connection) -> None:
        """Drop every subscription of a connection that ended."""
        for sub in [s for s in self._subs.values() if s.conn is conn]:
            self._drop(sub)

    def _drop(self, sub: Subscription) -> None:
        del self._subs[sub.sub]
        scope = self._scope(sub)
        scope.discard(sub)
        if not scope and sub.what != "agent_view":
            table = self._trees if sub.what == "subtree" else self._timelines
            del table[sub.job]  # type: ignore[arg-type]

    # -- snapshots -------------------------------------------------------------------------------------
    def _send_rows(self, sub: Subscription, req_id: Any, rows: list[dict[str, Any]]) -> int:
        """Queue rows as ``rows`` events of at most PAGE_BYTES each, up to SNAPSHOT_BYTES in all;
        returns how many were sent."""
        head = f'{{"event":"rows","req":{dumps(req_id)},"sub":{sub.sub},"rows":['.encode()
        sent = 0
        for chunk in _chunks((dumps(row).encode() for row in rows), SNAPSHOT_BYTES):
            sub.conn.send(head + b",".join(chunk) + b"]}\n")
            sent += len(chunk)
        return sent

    def _timeline_snapshot(self, sub: Subscription, after: int) -> dict[str, Any]:
        """Entries after ``after``; when more than one snapshot holds, only the newest ones and
        ``skipped`` true (the client can page the gap with ``logs``)."""
        job = sub.job
        assert job is not None
        page = self._store.timeline_page(job, TIMELINE_SNAPSHOT, after=after, budget=SNAPSHOT_BYTES)
        skipped = page["more"]
        if skipped:
            page = self._store.timeline_page(job, TIMELINE_SNAPSHOT, budget=SNAPSHOT_BYTES)
        for entry in page["entries"]:
            sub.conn.send(_timeline_frame(sub, dumps(entry).encode()))
        return {"count": len(page["entries"]), "more": 0, "skipped": skipped}

    # -- live changes ------------------------------------------------------------------------------------
    def rows_changed(self, ids: Iterable[str]) -> None:
        """The engine committed changes to these jobs' rows: push them at the end of this loop
        pass, once each, in their last state."""
        if not self._views and not self._trees:
            return
        self._dirty.update(ids)
        if not self._flush_pending:
            self._flush_pending = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        dirty, self._dirty = self._dirty, set()
        for job_id in dirty:
            job = self._index.get(job_id)
            if job is None:
                continue
            targets = [s for s in self._views if self._view_shows(s, job)]
            targets += self._trees_showing(job_id)
            if not targets:
                continue
            row = dumps(self._index.row(job_id)).encode()
            for sub in targets:
                sub.conn.send(b'{"event":"row","sub":%d,"row":' % sub.sub + row + b"}\n")
        counts = self.counts_of()
        if counts != self._counts and self._views:
            self._counts = counts
            for sub in self._views:
                sub.conn.send({"event": "counts", "sub": sub.sub, "counts": counts.to_wire()})

    def _view_shows(self, sub: Subscription, job: Job) -> bool:
        """Whether an agent-view subscription gets this row: roots, children whose parent is not
        open (and, once more, those that stopped being such), or with ``inline`` any job."""
        if sub.inline or job.parent is None:
            return True
        parent_open = self._index.parent_open(job)
        if not parent_open:
            if listed_in_agent_view(False, parent_open, job.state):  # a finished orphan is not: nothing to take back
                sub.shown.add(job.id)
            else:
                sub.shown.discard(job.id)
            return True
        if job.id in sub.shown:
            sub.shown.discard(job.id)
            return True
        return False

    def _trees_showing(self, job_id: str) -> list[Subscription]:
        """Subtree subscriptions that get this row: those of the job and its ancestors, and once
        more those it was detached out of."""
        inside = {s for above in (job_id, *self._index.ancestors(job_id)) for s in self._trees.get(above, ())}
        for sub in inside:
            sub.shown.add(job_id)
        left = [s for subs in self._trees.values() for s in subs if s not in inside and job_id in s.shown]
        for sub in left:
            sub.shown.discard(job_id)
        return [*inside, *left]

    def timeline(self, entry: dict[str, Any]) -> None:
        """A committed timeline entry: to that job's timeline subscribers only."""
        subs = self._timelines.get(entry["job"])
        if not subs:
            return
        data = entry_bytes(entry)
        for sub in subs:
            sub.conn.send(_timeline_frame(sub, data))

    def store_notice(self, text: str | None) -> None:
        """The store's notice changed (someone acknowledged it): every agent view hears, so an
        open app's banner goes at once."""
        for sub in self._views:
            sub.conn.send({"event": "store_notice", "sub": sub.sub, "text": text})


def entry_bytes(entry: dict[str, Any]) -> bytes:
    """An entry as JSON. One the store just wrote (``store.Entry``) carries its data as the store
    encoded it, which goes in as it is: the data, a command's output, is encoded once. Not when
    that text escapes characters (the store writes ASCII): a frame keeps them as UTF-8, at most
    4 bytes each where an escaped pair takes 12, so no entry outgrows the frame limit."""
    data = getattr(entry, "data_json", None)
    if data is None or "\\u" in data:
        return dumps(entry).encode()
    return (f'{{"seq":{entry["seq"]},"job":{dumps(entry["job"])},"ts":{dumps(entry["ts"])},'
            f'"kind":{dumps(entry["kind"])},"data":{data}}}').encode()


def _timeline_frame(sub: Subscription, entry: bytes) -> bytes:
    return b'{"event":"timeline","sub":%d,"entry":' % sub.sub + entry + b"}\n"


def _chunks(parts: Iterator[bytes], budget: int) -> Iterator[list[bytes]]:
    """Group encoded items into lists of at most PAGE_BYTES each, stopping at ``budget`` bytes."""
    chunk: list[bytes] = []
    size = total = 0
    for part in parts:
        if total + len(part) > budget:
            break
        if chunk and size + len(part) > PAGE_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(part)
        size += len(part) + 1
        total += len(part) + 1
    if chunk:
        yield chunk
