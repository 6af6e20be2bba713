"""The commands that act on one job: spawn, send, close, pin and unpin, archive and
unarchive, rename, detach, label; and what agents call about themselves (report, children)."""

from __future__ import annotations

import json
import os

import click

from roost.cli.common import Ctx, errors, fail, pass_ctx, say
from roost.client import job_identity
from roost.models import record_json


@click.command()
@click.option("--parent", help="Parent job id (a job calling this is always the parent).")
@click.option("--driver", help="Driver name from the config (default: default_driver).")
@click.option("--cwd", type=click.Path(file_okay=False), help="Working directory (default: here).")
@click.option("--title", help="Title (default: the prompt's first line).")
@click.option("--lifetime", type=click.Choice(["task", "workflow", "session"]), help="Subagent lifetime.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="A label (repeatable).")
@click.option("--worktree/--no-worktree", default=None, help="Run it in a git worktree of its own (default: the driver's).")
@click.option("--branch", help="The worktree's new branch (default roost/ID).")
@click.option("--base", help="What the branch starts from and merges into (default: the current HEAD).")
@click.option("--host", help="Run it on this [hosts.NAME] (its cwd is then a path there); 'local': here.")
@click.option("--approvals", type=click.Choice(["ask", "deny", "allow"]),
              help="What it does with a permission request no rule allows (default: the driver's, else ask).")


@click.option("--allow", "allow_rules", multiple=True, metavar="RULE",
              help="A request it may make without asking: TOOL or TOOL:PATTERN, e.g. 'shell:git status*' (repeatable).")
@click.option("--isolation", type=click.Choice(["sandbox", "sandbox!", "none"]),
              help="Its walls: a sandbox where the machine has one, a sandbox or no job (sandbox!), or none "
                   "(default: the driver's, else sandbox; never looser than its parent's). docs/isolation.md.")
@click.option("--budget-usd", type=click.FloatRange(min=0), help="A cap in dollars on its whole tree.")
@click.option("--budget-tokens", type=click.IntRange(min=0), help="A cap in tokens on its whole tree.")
@click.option("--num-cpus", type=click.FloatRange(min=0), help="On a Ray host: the CPUs its actor holds.")
@click.option("--resource", "resources", multiple=True, metavar="NAME=AMOUNT",
              help="On a Ray host: a custom resource its actor needs, e.g. gpu_box=0.01 (repeatable).")


@click.argument("prompt")
@pass_ctx
def spawn(ctx: Ctx, parent: str | None, driver: str | None, cwd: str | None, title: str | None,
          lifetime: str | None, labels: tuple[str, ...], worktree: bool | None, branch: str | None,
          base: str | None, host: str | None, approvals: str | None, allow_rules: tuple[str, ...],
          isolation: str | None, budget_usd: float | None, budget_tokens: int | None, num_cpus: float | None,
          resources: tuple[str, ...], prompt: str) -> None:
    """Start a job on PROMPT and print its id."""
    needs = {}
    for item in resources:
        name, sep, amount = item.partition("=")
        try:
            if not (sep and name):
                raise ValueError(item)
            needs[name] = float(amount)
        except ValueError:
            fail(f"--resource {item!r}: expected NAME=AMOUNT, AMOUNT a number")
    label_map = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--label {item!r}: expected KEY=VALUE")
        label_map[key] = value
    remote = host not in (None, "local")  # a cwd there is that host's path, and none is the host's own
    row = ctx.call("spawn", prompt=prompt, parent=parent, driver=driver, host=host, title=title, lifetime=lifetime,
                   cwd=cwd if remote else os.path.abspath(cwd or os.getcwd()), labels=label_map or None,
                   worktree=worktree, branch=branch, base=base, approvals=approvals,
                   **({"approval_rules": list(allow_rules)} if allow_rules else {}),
                   **{k: v for k, v in (("budget_usd", budget_usd), ("budget_tokens", budget_tokens), ("isolation", isolation),
                                        ("num_cpus", num_cpus), ("resources", needs or None)) if v is not None})
    say(row["id"])


@click.command()
@click.argument("job_id")
@click.argument("text")
@pass_ctx
def send(ctx: Ctx, job_id: str, text: str) -> None:
    """Send TEXT to a job (resumes a done, idle or closed job; restarts a stopped one)."""
    result = ctx.call("send", job=job_id, text=text)
    denied = f" (not an answer: it denied {', '.join(result['approvals'])} with your text as the reason)" \
        if result["outcome"] == "denied" else ""
    say(f"{result['outcome']}: {job_id}{denied}")


@click.command()
@click.argument("job_id")
@pass_ctx
def close(ctx: Ctx, job_id: str) -> None:
    """Close a job's worker (its record stays; a message resumes it)."""
    result = ctx.call("close", job=job_id)
    say("closed" if result["closed"] else f"not closed: {result.get('reason')}")


def _pin_command(op: str, doc: str) -> click.Command:
    """`roost pin` and `roost unpin`: the same call with the opposite flag."""

    @click.command(op, help=doc)
    @click.argument("job_id")
    @pass_ctx
    def command(ctx: Ctx, job_id: str) -> None:
        ctx.call(op, job=job_id)
        say(f"{op}ned {job_id}")

    return command


pin = _pin_command("pin", "Keep a job's worker up (the idle reaper and auto-close skip it).")
unpin = _pin_command("unpin", "Let the idle reaper and auto-close take a job's worker again.")


@click.command()
@click.argument("job_id")
@pass_ctx
def archive(ctx: Ctx, job_id: str) -> None:
    """Archive a job and its children (a child open in a client is detached instead)."""
    result = ctx.call("archive", job=job_id)
    say(f"archived {len(result['archived'])}" +
        (f", detached {' '.join(result['detached'])}" if result["detached"] else ""))


@click.command()
@click.argument("job_id")
@pass_ctx
def unarchive(ctx: Ctx, job_id: str) -> None:
    """Bring back an archived job, with the jobs archived along with it."""
    row = ctx.call("unarchive", job=job_id)
    below = row.get("descendants") or 0
    say(f"unarchived {job_id}" + (f" and {below} below it" if below else ""))


@click.command()
@click.argument("job_id")
@click.argument("title")
@pass_ctx
def rename(ctx: Ctx, job_id: str, title: str) -> None:
    """Give a job a new TITLE."""
    ctx.call("rename", job=job_id, title=title)
    say(f"renamed {job_id}")


@click.command()
@click.argument("job_id")
@pass_ctx
def detach(ctx: Ctx, job_id: str) -> None:
    """Make a child a root job: it keeps working and leaves its parent's tree."""
    ctx.call("detach", job=job_id)
    say(f"detached {job_id}")


@click.command()
@click.argument("status", type=click.Choice(["done", "idle", "blocked"]))
@click.argument("text", default="")
@pass_ctx
def report(ctx: Ctx, status: str, text: str) -> None:
    """Report to this job's parent (for agents: needs ROOST_JOB_ID and ROOST_TOKEN)."""
    if job_identity()[0] is None:
        fail("report is for jobs: ROOST_JOB_ID is not set (run it from an agent's shell)")
    ctx.call("report", status=status, text=text)
    say(f"reported {status}")


@click.command()
@click.argument("job_id", required=False)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def children(ctx: Ctx, job_id: str | None, as_json: bool) -> None:
    """List a job's children (default: the calling job's)."""
    job_id = job_id or job_identity()[0]
    if job_id is None:
        fail("children: give a job id (ROOST_JOB_ID is not set)")
    with ctx.client() as client, errors():
        rows = list(client.children(job_id))  # every page: a job may have thousands
    if as_json:
        click.echo(json.dumps([record_json(r) for r in rows], indent=2))
        return
    for r in rows:
        say(f"{r['id']:<6} {r['state']:<8} {r['title']}")


@click.command()
@click.argument("job_id")
@click.argument("key")
@click.argument("value", required=False)
@pass_ctx
def label(ctx: Ctx, job_id: str, key: str, value: str | None) -> None:
    """Set a label on a job (no VALUE removes it), e.g. roost.reports=off."""
    ctx.call("label", job=job_id, key=key, value=value)
    say(f"{job_id}: {key}={value}" if value is not None else f"{job_id}: {key} removed")
