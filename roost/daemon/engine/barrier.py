"""Barriers: ``Engine.idle`` (the ``sync`` operation) answers once every message posted before it is
applied and its change committed — and with it what those messages posted once committed (an
effect's post, a pump's starts), so a chain of changes the daemon makes by itself is waited for
whole. What a worker has not said yet, or a task (a start, a prompt) has not posted yet, is not.

Nothing is kept while nobody waits: a message is only looked at when a barrier waits for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


class Barrier:
    """One wait: how many of the messages it waits for are not applied and committed yet."""

    __slots__ = ("left", "passed")

    def __init__(self, passed: asyncio.Future[None]) -> None:
        self.left = 0
        self.passed = passed


class Barriers:
    """The barriers waiting on one engine's messages."""

    def __init__(self) -> None:
        #: Messages a barrier waits for, by identity: the message (kept alive, so its id stays its
        #: own) and the barriers that wait for it.
        self._awaited: dict[int, tuple[Any, list[Barrier]]] = {}
        #: The barriers of the committed messages whose effects run now: what those post is theirs too.
        self._inherit: list[Barrier] = []

    async def wait(self, pending: Iterable[Any]) -> None:
        """Wait until every message of ``pending`` (what the mailboxes hold now) is committed."""
        barrier: Barrier | None = None
        for message in pending:
            if barrier is None:
                barrier = Barrier(asyncio.get_running_loop().create_future())
            self._await(message, [barrier])
        if barrier is not None:
            await barrier.passed

    def posted(self, message: Any) -> None:
        """A message was posted: waited for by the barriers whose messages' effects post it."""
        if self._inherit:
            self._await(message, self._inherit)

    def committed(self, messages: Iterable[Any]) -> list[Barrier]:
        """These messages are applied (their change kept, or refused): the barriers that waited for
        them, which now also wait for what the messages' effects post, until ``effects_ran``."""
        if not self._awaited:
            return []
        self._inherit = [b for message in messages for b in self._awaited.pop(id(message), (None, []))[1]]
        return self._inherit

    def effects_ran(self, barriers: list[Barrier]) -> None:
        """The effects of the messages ``committed`` named ran: a barrier waiting for nothing else passes."""
        self._inherit = []
        for barrier in barriers:
            barrier.left -= 1
            if not barrier.left and not barrier.passed.done():
                barrier.passed.set_result(None)

    def _await(self, message: Any, barriers: list[Barrier]) -> None:
        waiting = self._awaited.setdefault(id(message), (message, []))[1]
        for barrier in barriers:
            if barrier not in waiting:
                waiting.append(barrier)
                barrier.left += 1
