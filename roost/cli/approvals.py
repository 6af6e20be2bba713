"""What `roost approve`, `roost deny` and `roost approvals` read and print: which approval an ID
names (an approval id, or a job with exactly one pending), and one line per pending approval."""

from __future__ import annotations

import json
import time
from typing import Any, Iterable

import click

from roost.cli.common import Ctx, errors, fail, pass_ctx, say
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


@click.command()
@click.argument("ident", metavar="ID")
@click.option("--for-job", is_flag=True, help="Also allow what is like it for the rest of the job (adds an allow rule).")
@click.option("--rule", help="With --for-job: the allow rule to add (default: the same tool, the same command prefix).")
@pass_ctx
def approve(ctx: Ctx, ident: str, for_job: bool, rule: str | None) -> None:
    """Allow a pending approval (ID: an approval id, or a job with one pending); it runs at once."""
    if rule is not None and not for_job:
        fail("--rule goes with --for-job")
    with ctx.client() as client, errors():
        result = client.answer_approval(resolve(client, ident), "job" if for_job else "once", rule=rule)
        say(f"allowed {result['approval']} ({result['job']})"
            + (f"; the job may now: {result['rule']}" if result.get("rule") else ""))


@click.command()
@click.argument("ident", metavar="ID")
@click.argument("reason", required=False, default="")
@pass_ctx
def deny(ctx: Ctx, ident: str, reason: str) -> None:
    """Deny a pending approval (ID: an approval id, or a job with one pending); REASON is what the agent hears."""
    with ctx.client() as client, errors():
        result = client.answer_approval(resolve(client, ident), "deny", reason)
        say(f"denied {result['approval']} ({result['job']}): {result['reason']}")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="The pending approvals as JSON.")
@click.option("--full", "full", metavar="ID", help="Print one pending approval's whole request, nothing cut "
                                                   "(ID: an approval id, or a job with one pending).")
@pass_ctx
def approvals(ctx: Ctx, as_json: bool, full: str | None) -> None:
    """List every pending approval: its id, its job, exactly what would run (saying how much of a long
    one is hidden), how long it has waited; --full ID prints one whole."""
    with ctx.client() as client, errors():
        if full is not None:
            click.echo(client.approval_text(resolve(client, full)), nl=False)
            return
        pending = list(client.pending_approvals())
    if as_json:
        click.echo(json.dumps(pending, indent=2))
        return
    for line in lines(pending) or ["no approval is pending"]:
        say(line)
