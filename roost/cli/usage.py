"""`roost usage` (what was spent today, over the last days and by job tree) and `roost budget` (a
person sets a job tree's cap live). Two rows of ``COMMANDS`` in roost/cli/__init__.py."""

from __future__ import annotations

import json

import click

from roost.cli.common import Ctx, pass_ctx
from roost.rules.usage_words import report_lines


@click.command()
@click.option("--job", "job_id", metavar="ID", help="Only this job's tree (per child of it).")
@click.option("--days", type=click.IntRange(1, 366), default=7, show_default=True, help="How many days back.")
@click.option("--json", "as_json", is_flag=True, help="The daemon's answer as JSON.")
@pass_ctx
def usage(ctx: Ctx, job_id: str | None, days: int, as_json: bool) -> None:
    """What jobs spent: today, each of the last days, and by job tree (the biggest first)."""
    report = ctx.call("usage", job=job_id, days=days)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    for line in report_lines(report):
        click.echo(line)


@click.command()
@click.argument("job_id")
@click.option("--usd", type=click.FloatRange(min=0), help="The tree's cap in dollars.")
@click.option("--tokens", type=click.IntRange(min=0), help="The tree's cap in tokens (input and output).")
@pass_ctx
def budget(ctx: Ctx, job_id: str, usd: float | None, tokens: int | None) -> None:
    """Set JOB_ID's budget, a cap on its whole tree, live (a person only); say what is spent of it."""
    if usd is None and tokens is None:
        raise click.UsageError("give --usd N or --tokens N (or both)")
    row = ctx.call("budget", job=job_id, usd=usd, tokens=tokens)
    caps = [f"${row['usd']:g}" if row["usd"] is not None else "", f"{row['tokens']} tokens" if row["tokens"] is not None else ""]
    click.echo(f"{job_id}: budget {' and '.join(c for c in caps if c)}; spent ${row['spent_usd']:.4f} and "
               f"{row['spent_tokens']} tokens ({row['level']})")
