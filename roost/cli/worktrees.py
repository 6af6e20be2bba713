"""What `roost worktrees`, `roost worktrees prune` and `roost diff` print and the commands themselves."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

import click

from roost.cli.common import Ctx, errors, pass_ctx, say
from roost.client import Client
from roost.rules import teardown
from roost.text import safe_text

Say = Callable[[str], None]


def _size(kb: int | None) -> str:
    if kb is None:
        return "?"
    if kb < 1024:
        return f"{kb}K"


    return f"{kb / 1024:.1f}M" if kb < 1024 * 1024 else f"{kb / 1024 / 1024:.1f}G"


def show_list(result: dict[str, Any], as_json: bool, say: Say) -> None:
    if as_json:
        click.echo(json.dumps(result["rows"], indent=2))
        return
    if not result["rows"]:
        say("no job has a worktree of its own: roost spawn --worktree PROMPT")
    for row in result["rows"]:
        if not row["exists"]:
            condition = "deleted by hand"
        elif "error" in row:
            condition = f"unreadable: {row['error']}"
        else:
            condition = teardown.condition(row["changed"], row["untracked"], row["ahead"], row["submodules"])
        archived = " archived" if row["archived"] else ""
        say(f"{row['job']:<6} {row['state']:<8}{archived} {row['branch']}  {row['path']}  "
            f"{_size(row.get('size_kb'))}  {condition}")
    if result.get("more"):
        say(f"… {result['more']} more")


def show_prune(result: dict[str, Any], say: Say) -> None:
    for item in result["removed"]:
        say(f"removed {item['job']}: {item['why']}")
    for item in result["kept"]:
        say(f"kept    {item['job']}: {item['why']}")
    if not result["removed"] and not result["kept"]:
        say("no worktrees")


def show_diff(client: Client, job_id: str, stat: bool, say: Say) -> None:
    """The diff's pages one after another, all of one snapshot (the daemon pages it; each page is
    under the frame limit)."""
    page = client.call("diff", job=job_id)
    if stat:
        for f in page["files"]:
            say(f"{f['added'] if f['added'] is not None else '-':>6} {f['deleted'] if f['deleted'] is not None else '-':>6}  "
                f"{f['path']}")
        if page["files_more"]:
            say(f"… {page['files_more']} more files")
        return
    while True:
        sys.stdout.write(safe_text(page["text"]))  # what an agent wrote never acts on the terminal
        if page["next"] is None:
            break
        page = client.call("diff", job=job_id, offset=page["next"], snapshot=page["snapshot"])
    sys.stdout.flush()
    if page.get("cut"):
        click.echo(f"roost: the diff is cut at {page['size']} bytes (diffs.DIFF_MAX)", err=True)


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="The rows as JSON.")
@click.pass_context
def worktrees(click_ctx: click.Context, as_json: bool) -> None:
    """List the jobs' own worktrees: job, branch, path, size, clean or dirty, merged or not."""
    if click_ctx.invoked_subcommand is None:
        show_list(click_ctx.obj.call("worktrees"), as_json, say)


@worktrees.command("prune")
@pass_ctx
def worktrees_prune(ctx: Ctx) -> None:
    """Remove archived jobs' worktrees that hold nothing unsaved; say what was kept and why."""
    show_prune(ctx.call("worktrees_prune"), say)


@click.command()
@click.argument("job_id")
@click.option("--stat", is_flag=True, help="Only the changed files and their counts.")
@pass_ctx
def diff(ctx: Ctx, job_id: str, stat: bool) -> None:
    """Print a job's changes against its base: committed and uncommitted, new files too."""
    with ctx.client() as client, errors():
        show_diff(client, job_id, stat, say)


@click.command()
@click.argument("job_id")
@pass_ctx
def merge(ctx: Ctx, job_id: str) -> None:
    """Merge a job's branch into its base (a fast-forward or a clean merge; else refused, saying why)."""
    result = ctx.call("merge", job=job_id)
    counted = f" ({result['commits']} commit{'s' if result['commits'] != 1 else ''})" if "commits" in result else ""
    say(f"{result['outcome']}: {result['branch']} into {result['base']}{counted} in {result['where']}")
