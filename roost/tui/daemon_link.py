"""The app's one connection to its jobs: the rows it subscribed to, as last pushed, and its events.

The app talks to a ``JobSource``: the daemon over the control socket (``DaemonSource``), or in
snapshot tests a fixed set of rows. Nothing is broadcast: the home screen subscribes to the
agent view, each job screen to its job's subtree and timeline. ``DaemonLink`` keeps the rows
of every live subscription in one map (a row stays while some subscription holds it) and hands
events on in batches, so a burst of events becomes one repaint.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from textual.message import Message

from roost import paths as paths_mod
from roost.client import AsyncClient, ClientError, start_daemon
from roost.models import Row
from roost.rules.counts import WorkCounts
from roost.rules.row_text import readable_text
from roost.rules.row_window import AGENT_VIEW_WINDOW, past_window
from roost.text import safe_text
from roost.tui.entry_text import safe_data

#: How long the link waits after an event for more of the same burst before handing them on.
BURST_WINDOW = 0.02
#: How many events wait for the app at most (the rest wait in the client, which bounds them by bytes).
BATCH_EVENTS = 256


#: Row fields that carry what jobs (or their agents) wrote, shown on screen.
_WRITTEN_FIELDS = ("title", "last_text", "reason", "question")


def safe_row(data: dict[str, Any]) -> Row:
    """A wire row as the app keeps it: every text a job wrote made safe for the terminal and
    free of report wire text once, here, so no view can draw either (what a pending approval
    would run is made safe but never reworded: it is shown exactly)."""
    clean = {**data, **{name: safe_text(readable_text(data[name])) for name in _WRITTEN_FIELDS
                        if isinstance(data.get(name), str)}}
    if isinstance(data.get("approvals"), list):  # shown exactly as it will run: safe, not reworded
        clean["approvals"] = safe_data(data["approvals"])
    return Row.from_wire(clean)


class JobSource(Protocol):
    """What the app needs from whoever holds the jobs (the daemon, or a fixed set of rows)."""

    async def connect(self) -> None:
        """Connect (again): the subscriptions and events of an earlier connection are gone."""

    async def subscribe(self, what: str, **args: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Subscribe; returns the reply (``sub``, ``count``, ``more``) and the snapshot."""

    def events(self) -> AsyncIterator[dict[str, Any]]:
        """Pushed events (``row`` and ``timeline`` frames) until the connection ends."""

    def store_notice(self) -> str | None:
        """What the daemon said, greeting this connection, about a repaired store (None: nothing)."""

    def sandbox_notice(self) -> str | None:
        """What the daemon said, greeting this connection, when its jobs run without walls (None: they have them)."""

    def end_reason(self) -> str:
        """Why the last events stream ended (the daemon went away, or dropped a slow reader)."""

    async def call(self, op: str, **args: Any) -> Any:
        """One request; raises ClientError with the daemon's code and words when refused."""

    async def close(self) -> None:
        """Let go of the source."""


class DaemonSource:
    """The daemon behind the control socket, started first when none runs."""

    def __init__(self, paths: paths_mod.Paths, config: str | None = None) -> None:
        self._paths = paths
        self._config = config
        self._client: AsyncClient | None = None

    async def connect(self) -> None:
        await self.close()
        try:
            self._client = await AsyncClient.connect(self._paths.socket, client="app")
            return
        except ClientError as exc:
            if exc.code != "unreachable":
                raise
        await asyncio.to_thread(start_daemon, self._paths, self._config)
        self._client = await AsyncClient.connect(self._paths.socket, client="app")

    def _connected(self) -> AsyncClient:
        if self._client is None:
            raise ClientError("disconnected", "not connected to the daemon yet")
        return self._client

    async def subscribe(self, what: str, **args: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        return await self._connected().subscribe(what, **args)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        if self._client is None:
            return
        async for event in self._client.events():
            yield event

    def store_notice(self) -> str | None:
        return self._client.greeting.get("store_notice") if self._client is not None else None

    def sandbox_notice(self) -> str | None:
        return self._client.greeting.get("sandbox_notice") if self._client is not None else None

    def end_reason(self) -> str:
        client = self._client
        return (client.end_reason if client is not None else None) or "the daemon closed the connection"

    async def call(self, op: str, **args: Any) -> Any:
        return await self._connected().call(op, **args)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


@dataclass
class LinkUpdate:
    """What one batch of events changed: the ids of rows that changed or left, the new timeline entries."""

    rows: set[str] = field(default_factory=set)
    entries: list[dict[str, Any]] = field(default_factory=list)
    #: Whether the working and queued counts changed (``DaemonLink.counts``).
    counts: bool = False


class DaemonLink:
    """The rows the app's subscriptions hold, kept current from a JobSource's events."""

    class Changed(Message):
        """Rows or timelines changed; every open screen gets one per batch of events."""

        bubble = False

        def __init__(self, update: LinkUpdate) -> None:
            super().__init__()
            self.update = update

    class Lost(Message):
        """The source went away (the daemon stopped, could not be reached, or dropped us)."""

        bubble = False

        def __init__(self, reason: str) -> None:
            super().__init__()
            self.reason = reason

    def __init__(self, source: JobSource) -> None:
        self.source = source
        self.rows: dict[str, Row] = {}
        #: How many finished root jobs the agent view's subscription left out (old ones).
        self.more = 0
        #: Working and queued jobs, subagents too, and the run slots used: the daemon's, as the top bar says them.
        self.counts = WorkCounts()
        #: The store's repair notice, from the hello and then its ``store_notice`` events (the banner shows it).
        self.store_notice: str | None = None
        #: The daemon's words when this machine cannot build walls, from the hello (the top bar says it).
        self.sandbox_notice: str | None = None
        self._held: dict[int, set[str]] = {}
        #: The agent view's subscription: the rows it holds are bounded (roost/rules/row_window.py).
        self._view_sub: int | None = None
        #: How many finished roots it keeps (the daemon's snapshot's limit).
        self.window = AGENT_VIEW_WINDOW

    async def connect(self, inline: bool = False) -> LinkUpdate:
        """Connect, subscribe to the agent view (children as rows too when ``inline``) and load
        its rows; the update names every row that came or went."""
        await self.source.connect()
        self.store_notice = self.source.store_notice()
        self.sandbox_notice = self.source.sandbox_notice()
        gone = set(self.rows)
        self.rows.clear()
        self._held.clear()
        result, rows = await self.source.subscribe("agent_view", inline=inline)
        self.more = int(result.get("more") or 0)
        self.counts = WorkCounts.from_wire(result.get("counts"))
        self._view_sub = result["sub"]
        update = self.hold(result["sub"], rows)
        update.rows |= gone
        return update

    async def subscribe(self, what: str, **args: Any) -> tuple[dict[str, Any], list[dict[str, Any]], LinkUpdate]:
        """Subscribe on the current connection; rows of the snapshot are held for the subscription."""
        result, items = await self.source.subscribe(what, **args)
        rows = items if what != "timeline" else []
        return result, items, self.hold(result["sub"], rows)

    def hold(self, sub: int, rows: Iterable[dict[str, Any]], newer: bool = True) -> LinkUpdate:
        """Keep ``rows`` for subscription ``sub``; with ``newer`` false a row already held is
        kept as it is (a pushed row is at least as new as one read by a request)."""
        held = self._held.setdefault(sub, set())
        update = LinkUpdate()
        for data in rows:
            job_id = data["id"]
            held.add(job_id)
            if newer or job_id not in self.rows:
                self.rows[job_id] = safe_row(data)
                update.rows.add(job_id)
        return update

    async def unsubscribe(self, subs: Iterable[int]) -> LinkUpdate:
        """End subscriptions; rows no other subscription holds leave."""
        update = LinkUpdate()
        for sub in subs:
            held = self._held.pop(sub, None)
            if held is None:
                continue  # from an earlier connection: the daemon forgot it already
            update.rows |= self._drop(held)
            try:
                await self.source.call("unsubscribe", sub=sub)
            except ClientError:
                pass  # the connection is gone, and its subscriptions with it
        return update

    def _drop(self, ids: Iterable[str]) -> set[str]:
        still = set().union(*self._held.values()) if self._held else set()
        gone = {job_id for job_id in ids if job_id not in still}
        for job_id in gone:
            self.rows.pop(job_id, None)
        return gone

    def apply(self, events: list[dict[str, Any]]) -> LinkUpdate:
        """Fold a batch of events into the rows (an archived row leaves)."""
        update = LinkUpdate()
        for event in events:
            kind = event.get("event")
            if kind == "row":
                held = self._held.get(event.get("sub"))  # type: ignore[arg-type]
                if held is None:
                    continue
                data = event["row"]
                update.rows.add(data["id"])
                if data.get("archived_at") is None:
                    held.add(data["id"])
                    self.rows[data["id"]] = safe_row(data)
                else:  # no view shows an archived job, whoever held it
                    for ids in self._held.values():
                        ids.discard(data["id"])
                    self.rows.pop(data["id"], None)
            elif kind == "timeline":
                update.entries.append(event["entry"])
            elif kind == "store_notice":
                self.store_notice = event.get("text")
            elif kind == "counts":
                self.counts = WorkCounts.from_wire(event.get("counts"))
                update.counts = True
        update.rows |= self._bound_view()
        return update

    def _bound_view(self) -> set[str]:
        """Let the agent view's oldest finished rows go once it holds more than the window
        (they count as older not listed), so an app open for hours holds no more rows than it
        did at its start; the rows that left."""
        held = self._held.get(self._view_sub) if self._view_sub is not None else None
        if held is None or len(held) <= self.window:
            return set()
        old = past_window((self.rows[job_id] for job_id in held if job_id in self.rows), self.window)
        held.difference_update(old)
        self.more += len(old)
        return self._drop(old)

    async def batches(self, window: float = BURST_WINDOW) -> AsyncIterator[list[dict[str, Any]]]:
        """The source's events in batches: everything that arrived within ``window`` of the first.
        At most BATCH_EVENTS wait here; past them the reader waits, so what the app has not taken
        piles up in the client, whose byte bound lets the connection go (the app then reconnects
        and subscribes again) instead of growing without end."""
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=BATCH_EVENTS)

        async def read() -> None:
            try:
                async for event in self.source.events():
                    await queue.put(event)
            finally:
                task = asyncio.current_task()
                if task is None or not task.cancelling():  # the end, for a consumer still there
                    await queue.put(None)

        reader = asyncio.create_task(read())
        try:
            while True:
                first = await queue.get()
                if first is None:
                    return
                await asyncio.sleep(window)
                batch = [first]
                while not queue.empty():
                    event = queue.get_nowait()
                    if event is None:
                        yield batch
                        return
                    batch.append(event)
                yield batch
        finally:
            reader.cancel()

    async def call(self, op: str, **args: Any) -> Any:
        return await self.source.call(op, **args)


def default_source(config: str | None = None) -> DaemonSource:
    """The daemon for this environment's paths."""
    return DaemonSource(paths_mod.resolve(), config)
