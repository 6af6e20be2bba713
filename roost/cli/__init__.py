"""The ``roost`` command. Every command is a client of the daemon and starts it when none runs.

Start-up is most of a command's run time, so this entry holds only the table of commands: the
module of the one named is imported when it runs (``roost --help`` imports them all to list
them). Only ``roost`` with no arguments and ``roost demo`` import the Textual app.
"""

from __future__ import annotations

import importlib
import sys

import click

from roost import paths as paths_mod
from roost.cli.common import Ctx, say

#: Every command: its name -> (the module that defines it, the click command's name there).
COMMANDS: dict[str, tuple[str, str]] = {
    "daemon": ("roost.cli.daemon", "daemon"),
    "spawn": ("roost.cli.jobs", "spawn"),
    "send": ("roost.cli.jobs", "send"),
    "stop": ("roost.cli.stop", "stop"),
    "close": ("roost.cli.jobs", "close"),
    "pin": ("roost.cli.jobs", "pin"),
    "unpin": ("roost.cli.jobs", "unpin"),
    "archive": ("roost.cli.jobs", "archive"),
    "unarchive": ("roost.cli.jobs", "unarchive"),
    "rename": ("roost.cli.jobs", "rename"),
    "detach": ("roost.cli.jobs", "detach"),
    "label": ("roost.cli.jobs", "label"),
    "report": ("roost.cli.jobs", "report"),
    "children": ("roost.cli.jobs", "children"),
    "ls": ("roost.cli.listing", "ls"),
    "show": ("roost.cli.listing", "show"),
    "explain": ("roost.cli.explain", "explain"),
    "logs": ("roost.cli.logs", "logs"),
    "worktrees": ("roost.cli.worktrees", "worktrees"),
    "diff": ("roost.cli.worktrees", "diff"),
    "merge": ("roost.cli.worktrees", "merge"),
    "search": ("roost.cli.search", "search"),
    "fork": ("roost.cli.search", "fork"),
    "approve": ("roost.cli.approvals", "approve"),
    "deny": ("roost.cli.approvals", "deny"),
    "approvals": ("roost.cli.approvals", "approvals"),
    "config": ("roost.cli.config", "config"),
    "hosts": ("roost.cli.hosts", "hosts"),
    "demo": ("roost.cli.app", "demo"),
    "usage": ("roost.cli.usage", "usage"),
    "budget": ("roost.cli.usage", "budget"),
}


class _Commands(click.Group):
    """A group whose commands are looked up in COMMANDS and imported only when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        where = COMMANDS.get(cmd_name)
        if where is None:
            return None
        command: click.Command = getattr(importlib.import_module(where[0]), where[1])
        return command


@click.group(cls=_Commands, invoke_without_command=True)
@click.option("--config", envvar="ROOST_CONFIG", help="Config file (also ROOST_CONFIG).")
@click.version_option(package_name="roost")
@click.pass_context
def cli(ctx: click.Context, config: str | None) -> None:
    """roost: a terminal supervisor for coding agents. With no command, opens the app."""
    ctx.obj = Ctx(config)
    if ctx.invoked_subcommand is None:
        from roost.cli.app import open_app

        open_app(ctx.obj)


def main() -> None:
    """The ``roost`` console script."""
    try:
        cli(prog_name="roost")
    except paths_mod.UnsafePath as exc:  # a directory another user could change: say which, and the fix
        say(f"roost: {exc}", err=True)
        sys.exit(2)
