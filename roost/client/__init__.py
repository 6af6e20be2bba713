"""Clients of the control socket: a blocking one for the CLI, an asyncio one for the app and agents.

Both say hello first, as a person (no job) or as a job (``ROOST_JOB_ID`` and ``ROOST_TOKEN``
from the environment the daemon gave its worker), so the daemon knows who is calling. Every
call has a timeout: nothing waits forever on a daemon that never answers. An error frame with
no id (a frame the daemon could not read) answers the oldest request still waiting.

wire.py holds the rules both keep (the hello, frames, routing answers, events and subscription
snapshots, which page comes next) with no I/O; blocking.py and aio.py move the bytes;
autostart.py finds the daemon or starts one. ``AsyncClient`` is imported when first named, so the
blocking CLI never loads its module.
"""

from typing import TYPE_CHECKING, Any

from roost.client.autostart import connect, daemon_running, probe, start_daemon
from roost.client.blocking import Client
from roost.client.wire import ACKNOWLEDGE, DEFAULT_TIMEOUT, LAGGED, job_identity, next_page, notice_line
from roost.socket_connect import UNREACHABLE, ClientError

__all__ = [
    "ACKNOWLEDGE",
    "DEFAULT_TIMEOUT",
    "LAGGED",
    "UNREACHABLE",
    "AsyncClient",
    "Client",
    "ClientError",
    "connect",
    "daemon_running",
    "job_identity",
    "next_page",
    "notice_line",
    "probe",
    "start_daemon",
]

if TYPE_CHECKING:
    from roost.client.aio import AsyncClient


def __getattr__(name: str) -> Any:
    if name == "AsyncClient":
        from roost.client.aio import AsyncClient

        return AsyncClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
