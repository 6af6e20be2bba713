"""The ``roost`` command. Every command is a client of the daemon and starts it when none runs.

Only ``roost`` with no arguments (and ``roost demo``) import the Textual app, so the other
commands stay fast.

Over 400 lines because it is the whole command-line surface, one click function per command;
the bodies that grew live apart (listings and logs: cli_views.py; worktrees: cli_worktrees.py;
hosts: hosts/commands.py).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click

from roost import paths as paths_mod
from roost.client import UNREACHABLE, Client, ClientError, connect, job_identity, notice_line, probe, start_daemon
from roost.models import record_json
from roost.protocol import SEARCH_LIMIT_MAX
from roost.text import safe_text


def _say(text: str, err: bool = False) -> None:
    """Print a line for a person. Every human line goes through here: titles, texts, reasons and
    the daemon's messages carry what jobs wrote, escape sequences included (JSON output is
    escaped by json itself and printed as it is)."""
    click.echo(safe_text(text), err=err)


def _fail(message: str, code: int = 1) -> NoReturn:
    _say(f"roost: {message}", err=True)
    sys.exit(code)


#: Refusals that mean "that job cannot take this" (exit 2) rather than "something broke" (exit 1).
_JOB_REFUSALS = ("unknown_job", "stopped", "archived")


def _refused(exc: ClientError) -> NoReturn:
    _fail(exc.message, 2 if exc.code in _JOB_REFUSALS else 1)


@contextmanager
def _errors() -> Iterator[None]:
    """The daemon's refusal on stderr with an exit code; Ctrl-C and a closed pipe end quietly."""
    try:
        yield
    except ClientError as exc:
        _refused(exc)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `roost ls --json | head`: the reader left, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class Ctx:
    def __init__(self, config: str | None) -> None:
        self.config = config

    def client(self) -> Client:
        """A connection to the daemon (started when none runs); a store repair it has not heard
        acknowledged yet is said on stderr first, whatever the command."""
        try:
            client = connect(config=self.config)
        except ClientError as exc:
            _fail(exc.message)
        notice = client.greeting.get("store_notice")
        if notice:
            _say(f"roost: {notice_line(notice)}", err=True)
        return client

    def call(self, op: str, **args: Any) -> Any:
        with self.client() as client:
            try:
                return client.call(op, **args)
            except ClientError as exc:
                _refused(exc)


pass_ctx = click.make_pass_decorator(Ctx)


@click.group(invoke_without_command=True)
@click.option("--config", envvar="ROOST_CONFIG", help="Config file (also ROOST_CONFIG).")
@click.version_option(package_name="roost")
@click.pass_context
def cli(ctx: click.Context, config: str | None) -> None:
    """roost: a terminal supervisor for coding agents. With no command, opens the app."""
    ctx.obj = Ctx(config)
    if ctx.invoked_subcommand is None:
        _open_app(ctx.obj)


def _open_app(ctx: Ctx, select: str | None = None) -> None:
    ctx.client().close()  # starts the daemon when none runs, and says why when it cannot
    from roost.tui.app import run_app  # Textual comes in only here and in config check

    run_app(config=ctx.config, select=select)


# -- the daemon -------------------------------------------------------------------------------------
@cli.group()
def daemon() -> None:
    """Start, stop or check the daemon."""


@daemon.command("start")
@click.option("--foreground", is_flag=True, help="Run in this terminal, logging to stderr.")
@pass_ctx
def daemon_start(ctx: Ctx, foreground: bool) -> None:
    """Start the daemon (in the background unless --foreground)."""
    paths = paths_mod.resolve()
    if foreground:
        from roost.daemon.__main__ import main as daemon_main

        sys.exit(daemon_main(["--config", ctx.config] if ctx.config else []))
    error = probe(paths.socket)
    if error is None:
        _say(f"roost daemon already running ({paths.socket})")
        return
    if error.code != UNREACHABLE:  # one is there but refused us: a second one would not help
        _fail(error.message)
    try:
        start_daemon(paths, config=ctx.config)
    except ClientError as exc:
        _fail(exc.message)
    _say(f"roost daemon started ({paths.socket})")


@daemon.command("stop")
def daemon_stop() -> None:
    """Stop the daemon; workers are closed, records stay."""
    paths = paths_mod.resolve()
    try:
        with Client.connect(paths.socket) as client:
            client.call("shutdown")
    except ClientError as exc:
        if exc.code != UNREACHABLE:
            _fail(exc.message)
        _say("roost daemon is not running")
        return
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and paths.socket.exists():
        time.sleep(0.05)
    _say("roost daemon stopped")


@daemon.command("status")
@click.option("--acknowledge", is_flag=True, help="Say you have read the store's repair notice; it stops showing.")
def daemon_status(acknowledge: bool) -> None:
    """Say whether the daemon runs (exit 0) or not (exit 1), and what it had to repair."""
    paths = paths_mod.resolve()
    try:
        with Client.connect(paths.socket, timeout=3) as client:
            if acknowledge:
                client.call("acknowledge")
            st = client.call("status")
    except ClientError as exc:
        _say(f"roost daemon is not running ({paths.socket})" if exc.code == UNREACHABLE
             else f"roost daemon at {paths.socket} did not answer: {exc.message}")
        sys.exit(1)
    _say(f"roost daemon running: pid {st['pid']}, {st['jobs']} jobs, {st['workers']} workers, "
               f"socket {st['socket']}")
    if st.get("queued"):
        _say(f"{st['queued']} spawns queued (max_running_jobs, their host's, or max_live_workers)")
    spares = st.get("spares") or {}
    if spares.get("wanted"):
        ready, retry = len(spares.get("ready") or ()), spares.get("retry_in")
        _say(f"spare workers: {ready} of {spares['wanted']} ready"
             + (f"; they kept dying ({spares.get('failures')} times), next try in {retry:g}s" if retry else ""))
    if st.get("config_error"):
        _say(f"config not reloaded: {st['config_error']}")
    if st.get("store_notice"):
        _say(f"THE STORE WAS REPAIRED: {st['store_notice']}\n"
                   "(docs/reliability.md says how to get records back; "
                   "`roost daemon status --acknowledge` stops this message)")


@daemon.command("reload")
def daemon_reload() -> None:
    """Read the config file again (as SIGHUP does) and say what changed; a broken file is not taken."""
    paths = paths_mod.resolve()
    try:
        with Client.connect(paths.socket) as client:
            done = client.call("reload")
    except ClientError as exc:
        _fail("roost daemon is not running: nothing to reload (it reads the config when it starts)"
              if exc.code == UNREACHABLE else exc.message)
    if done["error"]:
        _fail(f"config not reloaded, keeping the settings in force: {done['error']}")
    changed = done["changed"]
    _say(f"config reloaded from {done['config'] or '<defaults>'}: "
         + (f"changed {', '.join(changed)}" if changed else "nothing changed"))


# -- jobs -----------------------------------------------------------------------------------------------
@cli.command()
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
@click.argument("prompt")
@pass_ctx
def spawn(ctx: Ctx, parent: str | None, driver: str | None, cwd: str | None, title: str | None,
          lifetime: str | None, labels: tuple[str, ...], worktree: bool | None, branch: str | None,
          base: str | None, host: str | None, approvals: str | None, allow_rules: tuple[str, ...],
          prompt: str) -> None:
    """Start a job on PROMPT and print its id."""
    label_map = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"--label {item!r}: expected KEY=VALUE")
        label_map[key] = value
    remote = host not in (None, "local")  # a cwd there is that host's path, and none is the host's own
    row = ctx.call("spawn", prompt=prompt, parent=parent, driver=driver, host=host, title=title, lifetime=lifetime,
                   cwd=cwd if remote else os.path.abspath(cwd or os.getcwd()), labels=label_map or None,
                   worktree=worktree, branch=branch, base=base, approvals=approvals,
                   **({"approval_rules": list(allow_rules)} if allow_rules else {}))
    _say(row["id"])


# -- worktrees and review (bodies in cli_worktrees.py) -------------------------------------------------
@cli.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="The rows as JSON.")
@click.pass_context
def worktrees(click_ctx: click.Context, as_json: bool) -> None:
    """List the jobs' own worktrees: job, branch, path, size, clean or dirty, merged or not."""
    if click_ctx.invoked_subcommand is None:
        from roost import cli_worktrees

        cli_worktrees.show_list(click_ctx.obj.call("worktrees"), as_json, _say)


@worktrees.command("prune")
@pass_ctx
def worktrees_prune(ctx: Ctx) -> None:
    """Remove archived jobs' worktrees that hold nothing unsaved; say what was kept and why."""
    from roost import cli_worktrees

    cli_worktrees.show_prune(ctx.call("worktrees_prune"), _say)


@cli.command()
@click.argument("job_id")
@click.option("--stat", is_flag=True, help="Only the changed files and their counts.")
@pass_ctx
def diff(ctx: Ctx, job_id: str, stat: bool) -> None:
    """Print a job's changes against its base: committed and uncommitted, new files too."""
    from roost import cli_worktrees

    with ctx.client() as client, _errors():
        cli_worktrees.show_diff(client, job_id, stat, _say)


@cli.command()
@click.argument("job_id")
@pass_ctx
def merge(ctx: Ctx, job_id: str) -> None:
    """Merge a job's branch into its base (a fast-forward or a clean merge; else refused, saying why)."""
    result = ctx.call("merge", job=job_id)
    counted = f" ({result['commits']} commit{'s' if result['commits'] != 1 else ''})" if "commits" in result else ""
    _say(f"{result['outcome']}: {result['branch']} into {result['base']}{counted} in {result['where']}")


@cli.command()
@click.argument("job_id")
@click.argument("text")
@pass_ctx
def send(ctx: Ctx, job_id: str, text: str) -> None:
    """Send TEXT to a job (resumes a done, idle or closed job; restarts a stopped one)."""
    result = ctx.call("send", job=job_id, text=text)
    denied = f" (not an answer: it denied {', '.join(result['approvals'])} with your text as the reason)" \
        if result["outcome"] == "denied" else ""
    _say(f"{result['outcome']}: {job_id}{denied}")


# -- search and fork (bodies in cli_search.py) -------------------------------------------------------------
@cli.command()
@click.argument("words", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="The page as JSON (results, next, indexing).")
@click.option("--archived", is_flag=True, help="Search archived jobs' timelines too.")
@click.option("--under", metavar="ID", help="Only this job and the jobs below it.")
@click.option("-n", "--limit", type=click.IntRange(1, SEARCH_LIMIT_MAX), default=20, show_default=True,
              help="Results on the page.")
@click.option("--before", type=click.IntRange(0), help="The page that starts below this entry (the last page's next).")
@pass_ctx
def search(ctx: Ctx, words: tuple[str, ...], as_json: bool, archived: bool, under: str | None, limit: int,
           before: int | None) -> None:
    """Search every job's timeline for entries holding all the WORDS (a word ending in * is a
    prefix), newest first, one page at a time."""
    from roost import cli_search

    text = " ".join(words)
    with ctx.client() as client, _errors():
        page = client.search(text, under=under, archived=archived, limit=limit, before=before)
        if as_json:
            click.echo(json.dumps(page))
        else:
            cli_search.show(page, text, sys.stdout.isatty(), lambda line: _say(line, err=True))


@cli.command()
@click.argument("job_id")
@click.option("--worktree", is_flag=True, help="A new worktree holding the job's uncommitted changes.")
@click.option("--title", help="The fork's title (default: fork of TITLE).")
@click.argument("prompt", required=False)
@pass_ctx
def fork(ctx: Ctx, job_id: str, worktree: bool, title: str | None, prompt: str | None) -> None:
    """Make a new job that goes on from JOB_ID's conversation so far (the job itself is untouched)
    and print its id; with PROMPT it starts on it, else it waits for a message."""
    with ctx.client() as client, _errors():
        row = client.fork(job_id, worktree=worktree, title=title, prompt=prompt)
    _say(row["id"])


# -- approvals (bodies in cli_approvals.py) --------------------------------------------------------------
@cli.command()
@click.argument("ident", metavar="ID")
@click.option("--for-job", is_flag=True, help="Also allow what is like it for the rest of the job (adds an allow rule).")
@click.option("--rule", help="With --for-job: the allow rule to add (default: the same tool, the same command prefix).")
@pass_ctx
def approve(ctx: Ctx, ident: str, for_job: bool, rule: str | None) -> None:
    """Allow a pending approval (ID: an approval id, or a job with one pending); it runs at once."""
    from roost import cli_approvals

    if rule is not None and not for_job:
        _fail("--rule goes with --for-job")
    with ctx.client() as client, _errors():
        result = client.answer_approval(cli_approvals.resolve(client, ident), "job" if for_job else "once", rule=rule)
        _say(f"allowed {result['approval']} ({result['job']})"
             + (f"; the job may now: {result['rule']}" if result.get("rule") else ""))


@cli.command()
@click.argument("ident", metavar="ID")
@click.argument("reason", required=False, default="")
@pass_ctx
def deny(ctx: Ctx, ident: str, reason: str) -> None:
    """Deny a pending approval (ID: an approval id, or a job with one pending); REASON is what the agent hears."""
    from roost import cli_approvals

    with ctx.client() as client, _errors():
        result = client.answer_approval(cli_approvals.resolve(client, ident), "deny", reason)
        _say(f"denied {result['approval']} ({result['job']}): {result['reason']}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="The pending approvals as JSON.")
@pass_ctx
def approvals(ctx: Ctx, as_json: bool) -> None:
    """List every pending approval: its id, its job, exactly what would run, how long it has waited."""
    from roost import cli_approvals

    with ctx.client() as client, _errors():
        pending = list(client.pending_approvals())
    if as_json:
        click.echo(json.dumps(pending, indent=2))
        return
    for line in cli_approvals.lines(pending) or ["no approval is pending"]:
        _say(line)


@cli.command()
@click.argument("job_id")
@click.option("--tree", is_flag=True, help="Also every running job below it, nested too.")
@pass_ctx
def stop(ctx: Ctx, job_id: str, tree: bool) -> None:
    """Stop a job's turn (and with --tree its whole tree)."""
    result = ctx.call("stop", job=job_id, tree=tree)
    n = result["stopped"]
    if n == 0:
        _say(f"{job_id} was already stopped" if result.get("already") else "nothing was running")
    else:
        own = result.get("subagents", 0)
        _say(f"stopped {n} job{'s' if n != 1 else ''}: {' '.join(result['ids'])}"
             + (f" (and {own} subagent{'s' if own != 1 else ''} of the agent's own)" if own else ""))


@cli.command()
@click.argument("job_id")
@pass_ctx
def close(ctx: Ctx, job_id: str) -> None:
    """Close a job's worker (its record stays; a message resumes it)."""
    result = ctx.call("close", job=job_id)
    _say("closed" if result["closed"] else f"not closed: {result.get('reason')}")


def _pin_command(op: str, doc: str) -> None:
    """`roost pin` and `roost unpin`: the same call with the opposite flag."""

    @cli.command(op, help=doc)
    @click.argument("job_id")
    @pass_ctx
    def command(ctx: Ctx, job_id: str) -> None:
        ctx.call(op, job=job_id)
        _say(f"{op}ned {job_id}")


_pin_command("pin", "Keep a job's worker up (the idle reaper and auto-close skip it).")
_pin_command("unpin", "Let the idle reaper and auto-close take a job's worker again.")


@cli.command()
@click.argument("job_id")
@pass_ctx
def archive(ctx: Ctx, job_id: str) -> None:
    """Archive a job and its children (a child open in a client is detached instead)."""
    result = ctx.call("archive", job=job_id)
    _say(f"archived {len(result['archived'])}" +
         (f", detached {' '.join(result['detached'])}" if result["detached"] else ""))


@cli.command()
@click.argument("job_id")
@pass_ctx
def unarchive(ctx: Ctx, job_id: str) -> None:
    """Bring back an archived job, with the jobs archived along with it."""
    row = ctx.call("unarchive", job=job_id)
    below = row.get("descendants") or 0
    _say(f"unarchived {job_id}" + (f" and {below} below it" if below else ""))


@cli.command()
@click.argument("job_id")
@click.argument("title")
@pass_ctx
def rename(ctx: Ctx, job_id: str, title: str) -> None:
    """Give a job a new TITLE."""
    ctx.call("rename", job=job_id, title=title)
    _say(f"renamed {job_id}")


@cli.command()
@click.argument("job_id")
@pass_ctx
def detach(ctx: Ctx, job_id: str) -> None:
    """Make a child a root job: it keeps working and leaves its parent's tree."""
    ctx.call("detach", job=job_id)
    _say(f"detached {job_id}")


@cli.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
@pass_ctx
def show(ctx: Ctx, job_id: str, as_json: bool) -> None:
    """Show one job's record."""
    row = record_json(ctx.call("show", job=job_id))
    if as_json:
        click.echo(json.dumps(row, indent=2))
        return
    width = max(len(k) for k in row)
    for key, value in row.items():
        _say(f"{key:<{width}}  {json.dumps(value) if isinstance(value, (dict, list)) else value}")
    if row.get("approvals"):
        from roost import cli_approvals

        _say("waits for a person to approve (roost approve ID / roost deny ID [REASON]):")
        for line in cli_approvals.lines({**a, "job": row["id"]} for a in row["approvals"]):
            _say(f"  {line}")


@cli.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Every job's full record, as one JSON array.")
@click.option("--all", "everything", is_flag=True, help="Every job, not only live work and recent jobs.")
@click.option("--archived", is_flag=True, help="Only archived jobs (roost unarchive ID brings one back).")
@pass_ctx
def ls(ctx: Ctx, as_json: bool, everything: bool, archived: bool) -> None:
    """List live work and the newest jobs, children indented under their parent."""
    from roost import cli_views

    with ctx.client() as client, _errors():
        if as_json:
            cli_views.write_json_array(cli_views.full_records(client, archived), sys.stdout)
            return
        if everything:
            rows, left_out = cli_views.every_row(client, archived), 0
        elif archived:
            rows, left_out = cli_views.archived_rows(client)
        else:
            rows, left_out = cli_views.recent_rows(client)
    if not rows:
        _say("nothing is archived" if archived else "no jobs yet: try  roost spawn 'say hello'")
    for line in cli_views.tree_lines(rows):
        _say(line)
    if left_out:
        _say(f"… {left_out:,} more; roost ls --all" + (" --archived" if archived else ""))


@cli.command()
@click.argument("job_id")
@click.option("-n", "--lines", "count", type=click.IntRange(min=1), default=None,
              help="How many of the newest entries, whatever their size  [default: 200, up to 256 KiB]")
@click.option("--all", "everything", is_flag=True, help="Every entry, from the first.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new entries.")
@pass_ctx
def logs(ctx: Ctx, job_id: str, count: int | None, everything: bool, follow: bool) -> None:
    """Print a job's timeline and transcript: the newest entries (200, in at most 256 KiB of
    text: a build's output comes in entries of up to 64 KiB), -n of them, or --all of them."""
    from roost import cli_views

    def emit(entry: dict[str, Any]) -> None:
        _say(cli_views.format_entry(entry))

    with ctx.client() as client, _errors():
        last = 0
        if everything:
            for entry in cli_views.log_pages_after(client, job_id, 0):
                emit(entry)
                last = entry["seq"]
        else:
            bounded = count is None  # the default page is bounded in text too; -n N is what was asked
            entries, more = cli_views.log_tail(client, job_id, count or cli_views.TAIL_ENTRIES,
                                               cli_views.TAIL_BYTES if bounded else None)
            if more and not follow:
                _say(f"roost: the newest {len(entries)} entries"
                     + (f", up to {cli_views.TAIL_BYTES // 1024} KiB" if bounded else "")
                     + f"; roost logs -n N {job_id} prints N, roost logs --all {job_id} every one", err=True)
            for entry in entries:
                emit(entry)
            last = entries[-1]["seq"] if entries else 0
        if follow:
            cli_views.follow(client, lambda: connect(autostart=False), job_id, last, emit,
                             lambda text: _say(f"roost: {text}", err=True))


# -- what agents call --------------------------------------------------------------------------------------
@cli.command()
@click.argument("status", type=click.Choice(["done", "idle", "blocked"]))
@click.argument("text", default="")
@pass_ctx
def report(ctx: Ctx, status: str, text: str) -> None:
    """Report to this job's parent (for agents: needs ROOST_JOB_ID and ROOST_TOKEN)."""
    if job_identity()[0] is None:
        _fail("report is for jobs: ROOST_JOB_ID is not set (run it from an agent's shell)")
    ctx.call("report", status=status, text=text)
    _say(f"reported {status}")


@cli.command()
@click.argument("job_id", required=False)
@click.option("--json", "as_json", is_flag=True)
@pass_ctx
def children(ctx: Ctx, job_id: str | None, as_json: bool) -> None:
    """List a job's children (default: the calling job's)."""
    job_id = job_id or job_identity()[0]
    if job_id is None:
        _fail("children: give a job id (ROOST_JOB_ID is not set)")
    with ctx.client() as client, _errors():
        rows = list(client.children(job_id))  # every page: a job may have thousands
    if as_json:
        click.echo(json.dumps([record_json(r) for r in rows], indent=2))
        return
    for r in rows:
        _say(f"{r['id']:<6} {r['state']:<8} {r['title']}")


@cli.command()
@click.argument("job_id")
@click.argument("key")
@click.argument("value", required=False)
@pass_ctx
def label(ctx: Ctx, job_id: str, key: str, value: str | None) -> None:
    """Set a label on a job (no VALUE removes it), e.g. roost.reports=off."""
    ctx.call("label", job=job_id, key=key, value=value)
    _say(f"{job_id}: {key}={value}" if value is not None else f"{job_id}: {key} removed")


# -- config ------------------------------------------------------------------------------------------------
@cli.group()
def config() -> None:
    """Where the config file is, what it says, whether it is valid."""


@config.command("path")
@pass_ctx
def config_path(ctx: Ctx) -> None:
    """Print the config file's path (it may not exist: every key is optional)."""
    _say(str(paths_mod.config_file(ctx.config)))


def _load(ctx: Ctx) -> Any:
    from roost.config import ConfigError, load_config

    path = paths_mod.config_file(ctx.config)
    try:
        return load_config(path)
    except ConfigError as exc:
        _fail(str(exc))


@cli.group(invoke_without_command=True)
@click.pass_context
def hosts(click_ctx: click.Context) -> None:
    """The [hosts.NAME] machines: how each is reached, its connection, its jobs."""
    if click_ctx.invoked_subcommand is None:
        from roost.hosts.commands import host_lines

        ctx = click_ctx.find_object(Ctx)
        with _errors(), ctx.client() as client:
            rows = list(client.rows())
        for line in host_lines(_load(ctx), rows):
            _say(line)


@hosts.command("check")
@click.argument("name")
@pass_ctx
def hosts_check(ctx: Ctx, name: str) -> None:
    """Say what NAME lacks to run roost's workers (python, roost's worker side, pi)."""
    from roost.config import ConfigError
    from roost.hosts.commands import check

    config = _load(ctx)
    try:
        host = config.host(name)
    except ConfigError as exc:
        _fail(exc.message)
    ok, lines = check(host, config.drivers.values())
    for line in lines:
        _say(line)
    if not ok:
        sys.exit(1)


@config.command("show")
@pass_ctx
def config_show(ctx: Ctx) -> None:
    """Print the settings in force (defaults filled in) as JSON."""
    click.echo(json.dumps(_load(ctx).to_dict(), indent=2))


@config.command("check")
@pass_ctx
def config_check(ctx: Ctx) -> None:
    """Check the config file; exit 1 with the file, key and what was expected when it is wrong."""
    from roost.config import ConfigError
    from roost.tui.looks import theme_names  # the app's themes are Textual's: ask it, as the app does

    cfg = _load(ctx)
    try:
        cfg.check_theme(theme_names())
    except ConfigError as exc:
        _fail(str(exc))
    _say(f"ok: {cfg.source or 'no config file; using the defaults'}")


# -- the app ------------------------------------------------------------------------------------------------
@cli.command()
@click.option("--no-app", is_flag=True, help="Only spawn the demo tree and list it.")
@pass_ctx
def demo(ctx: Ctx, no_app: bool) -> None:
    """Spawn a demo tree of jobs on the built-in agent and open the app on it."""
    from roost.demo import spawn_demo

    with ctx.client() as client:
        try:
            roots = spawn_demo(client)
        except ClientError as exc:
            _fail(exc.message)
    if no_app:
        time.sleep(1.5)
        from roost import cli_views

        with ctx.client() as client:
            for line in cli_views.tree_lines(cli_views.every_row(client, archived=False)):
                _say(line)
        return
    _open_app(ctx, select=roots[-1] if roots else None)  # the newest: the top row, as the app lists them


def main() -> None:
    try:
        cli(prog_name="roost")
    except paths_mod.UnsafePath as exc:  # a directory another user could change: say which, and the fix
        _say(f"roost: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
