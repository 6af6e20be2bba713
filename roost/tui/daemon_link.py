"""The app's one connection to its jobs: the rows as the daemon last pushed them, and its events.

The app talks to a ``JobSource``: the daemon over the control socket (``DaemonSource``), or in
snapshot tests a fixed set of rows. ``DaemonLink`` keeps the rows current from the source's
events and hands them on in batches, so a burst of events becomes one repaint.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from textual.message import Message

from roost import paths as paths_mod
from roost.client import AsyncClient, ClientError, start_daemon
from roost.models import Row

#: How long the link waits after an event for more of the same burst before handing them on.
BURST_WINDOW = 0.02


class JobSource(Protocol):
    """What the app needs from whoever holds the jobs (the daemon, or a fixed set of rows)."""

    async def watch(self) -> list[dict[str, Any]]:
        """Subscribe to events and return every row as it is now."""

    def events(self) -> AsyncIterator[dict[str, Any]]:
        """Pushed events (``row`` and ``timeline`` frames) until the source goes away."""

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

    async def _connect(self) -> AsyncClient:
        try:
            return await AsyncClient.connect(self._paths.socket, client="app")
        except ClientError as exc:
            if exc.code != "unreachable":
                raise
        await asyncio.to_thread(start_daemon, self._paths, self._config)
        return await AsyncClient.connect(self._paths.socket, client="app")

    async def watch(self) -> list[dict[str, Any]]:
        self._client = await self._connect()
        return await self._client.call("watch")

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        if self._client is None:
            return
        async for event in self._client.events():
            yield event

    async def call(self, op: str, **args: Any) -> Any:
        if self._client is None:
            raise ClientError("disconnected", "not connected to the daemon yet")
        return await self._client.call(op, **args)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


@dataclass
class LinkUpdate:
    """What one batch of events changed: the ids of rows that changed, the new timeline entries."""

    rows: set[str] = field(default_factory=set)
    entries: list[dict[str, Any]] = field(default_factory=list)


class DaemonLink:
    """The rows the app shows, kept current from a JobSource's events."""

    class Changed(Message):
        """Rows or timelines changed; every open screen gets one per batch of events."""

        bubble = False

        def __init__(self, update: LinkUpdate) -> None:
            super().__init__()
            self.update = update

    class Lost(Message):
        """The source went away (the daemon stopped or could not be reached)."""

        bubble = False

        def __init__(self, reason: str) -> None:
            super().__init__()
            self.reason = reason

    def __init__(self, source: JobSource) -> None:
        self.source = source
        self.rows: dict[str, Row] = {}

    async def connect(self) -> LinkUpdate:
        """Subscribe and load every row; the update names them all."""
        snapshot = await self.source.watch()
        self.rows = {data["id"]: Row.from_wire(data) for data in snapshot}
        return LinkUpdate(rows=set(self.rows))

    def apply(self, events: list[dict[str, Any]]) -> LinkUpdate:
        """Fold a batch of events into the rows."""
        update = LinkUpdate()
        for event in events:
            kind = event.get("event")
            if kind == "row":
                row = Row.from_wire(event["row"])
                self.rows[row.id] = row
                update.rows.add(row.id)
            elif kind == "timeline":
                update.entries.append(event["entry"])
        return update

    async def batches(self, window: float = BURST_WINDOW) -> AsyncIterator[list[dict[str, Any]]]:
        """The source's events in batches: everything that arrived within ``window`` of the first."""
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        async def read() -> None:
            try:
                async for event in self.source.events():
                    queue.put_nowait(event)
            finally:
                queue.put_nowait(None)

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

