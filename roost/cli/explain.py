"""``roost explain JOB``: why a job is in its state, what it waits for, and what would move it next
(the daemon's ``explain`` operation, roost/daemon/ops/explain.py). Human lines by default, the answer
as it came with ``--json`` (times in ISO 8601)."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from roost.cli.common import Ctx, pass_ctx, say
from roost.models import iso
from roost.rules.row_text import format_age


def when(at: float, now: float) -> str:
    """A moment as a person reads it: the local clock time and how far from now."""
    clock = time.strftime("%H:%M:%S", time.localtime(at))
    return f"{clock} ({format_age(now - at)} ago)" if at <= now else f"{clock} (in {format_age(at - now)})"


def lines(answer: dict[str, Any], now: float) -> list[str]:
    """The answer as lines: the state, what put it there, what it waits for, what moves it next."""
    cause = answer["cause"]
    out = [f"{answer['job']} {answer['title']!r} is {answer['state']} since {when(answer['since'], now)}"
           + (f", worker {answer['worker']}" if answer["worker"] else ", no worker"),
           f"why: {cause['text']} (rule {cause['rule'] or 'unknown'}, at {when(cause['at'], now)})"]
    for wait in answer["waits"]:
        out.append(f"waits for: {wait['text']}" + (f" (until {when(wait['until'], now)})" if wait["until"] else ""))
    for move in answer["next"]:
        out.append(f"next: {move['text']}" + (f" at {when(move['at'], now)}" if move["at"] else ""))
    return out


def as_json(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer with its epoch times as ISO 8601, as ``roost ls --json`` gives them."""
    out: dict[str, Any] = {**answer, "since": iso(answer["since"]),
                           "cause": {**answer["cause"], "at": iso(answer["cause"]["at"])}}
    out["waits"] = [{**w, "until": iso(w["until"]) if w["until"] else None} for w in answer["waits"]]
    out["next"] = [{**n, "at": iso(n["at"]) if n["at"] else None} for n in answer["next"]]
    return out


@click.command()
@click.argument("job_id")
@click.option("--json", "json_out", is_flag=True, help="Print the answer as JSON.")
@pass_ctx
def explain(ctx: Ctx, job_id: str, json_out: bool) -> None:
    """Why JOB_ID is in its state: what put it there and when, what it waits for, what moves it next."""
    answer = ctx.call("explain", job=job_id)
    if json_out:
        click.echo(json.dumps(as_json(answer), indent=2))
        return
    for line in lines(answer, time.time()):
        say(line)
