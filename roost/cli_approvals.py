"""What `roost approve`, `roost deny` and `roost approvals` read and print: which approval an ID
names (an approval id, or a job with exactly one pending), and one line per pending approval."""

from __future__ import annotations

import time
from typing import Any, Iterable

from roost.client import Client, ClientError
from roost.protocol import ErrorCode
from roost.rules.approvals import describe

#: The prefix of the daemon's approval ids.
APPROVAL_PREFIX = "ap-"


def resolve(client: Client, ident: str) -> str:
    """The approval ``ident`` names: itself when it is an approval id, else the one pending approval
    of the job it names; ClientError saying what to give instead when the job has none or several."""
    if ident.startswith(APPROVAL_PREFIX):
        return ident
    row = client.call("show", job=ident)
    pending = row.get("approvals") or []
    if not pending:
        raise ClientError(ErrorCode.BAD_ARGS, f"job {ident} has no pending approval")
    if len(pending) > 1:
        listed = "; ".join(f"{a['id']} {describe(a)}" for a in pending)
        raise ClientError(ErrorCode.BAD_ARGS, f"job {ident} has {len(pending)} pending approvals; name one: {listed}")
    return str(pending[0]["id"])


def lines(pending: Iterable[dict[str, Any]], now: float | None = None) -> list[str]:
    """One line per pending approval (id, job, what would run, how long it has waited), and the
    model's own words for it below, marked as such."""
    now = time.time() if now is None else now
    out: list[str] = []
    for entry in pending:
        waited = max(0, int(now - float(entry.get("asked_at") or now)))
        who = f" [{entry['subagent']}]" if entry.get("subagent") else ""
        out.append(f"{entry['id']}  {entry['job']}{who}  {describe(entry)}  ({waited}s)")
        if entry.get("description"):
            out.append(f"    the model says: {entry['description']}")
    return out
