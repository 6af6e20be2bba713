"""Agents' tools across a restart of the daemon (roost_spawn, roost_send, roost_report,
roost_children: the built-in agent's and the MCP server's): a call made while no daemon listens
waits for the next one, at most ``DAEMON_WAIT`` seconds, instead of failing the agent's turn with
"cannot reach the daemon". The worker outlives the daemon under its shim and the next daemon
re-adopts it with the same token, so the call goes through once a daemon answers.

Only a call the daemon never got is made again: one refused at connect (nobody listens), or one
whose connection was found gone before it was written. A call whose connection dropped after it
was written may have been applied; it fails as before, saying so, so that nothing is done twice.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from roost.socket_connect import UNREACHABLE, ClientError

#: How long an agent's tool waits for a daemon to listen again (docs/reliability.md).
DAEMON_WAIT = 60.0
#: How often it tries meanwhile.
RETRY_EVERY = 0.25
#: Codes that say the daemon was never asked: nobody listens on its socket, or this process's
#: connection to it had ended before the call was written.
NOT_ASKED = frozenset({UNREACHABLE})

T = TypeVar("T")


def not_asked(exc: ClientError) -> bool:
    """Whether a failed call never reached a daemon, so making it again cannot do it twice."""
    return exc.code in NOT_ASKED


def waited(exc: ClientError, waited_for: float) -> ClientError:
    """The error a tool gives once the wait is over: what the last try said, and for how long."""
    return ClientError(exc.code, f"{exc.message} (waited {waited_for:.0f}s for the daemon to come back)")


def call_waiting(attempt: Callable[[], T], wait: float = DAEMON_WAIT, sleep: Callable[[float], None] = time.sleep) -> T:
    """``attempt()``, made again while it fails before reaching a daemon, for up to ``wait`` seconds."""
    start = time.monotonic()
    while True:
        try:
            return attempt()
        except ClientError as exc:
            spent = time.monotonic() - start
            if not not_asked(exc):
                raise
            if spent >= wait:
                raise waited(exc, spent) from None
        sleep(RETRY_EVERY)


async def call_waiting_async(attempt: Callable[[], Awaitable[T]], wait: float = DAEMON_WAIT) -> T:
    """The asyncio form of ``call_waiting``."""
    import asyncio  # here: the blocking CLI and the MCP server import this module too

    start = time.monotonic()
    while True:
        try:
            return await attempt()
        except ClientError as exc:
            spent = time.monotonic() - start
            if not not_asked(exc):
                raise
            if spent >= wait:
                raise waited(exc, spent) from None
        await asyncio.sleep(RETRY_EVERY)
