"""`roost hosts` and `roost hosts check NAME`: the [hosts.NAME] machines, how each is reached."""

from __future__ import annotations

import sys

import click

from roost.cli.common import Ctx, errors, fail, pass_ctx, say
from roost.cli.config import load


@click.group(invoke_without_command=True)
@click.pass_context
def hosts(click_ctx: click.Context) -> None:
    """The [hosts.NAME] machines: how each is reached, its connection, its jobs."""
    if click_ctx.invoked_subcommand is None:
        from roost.hosts.commands import host_lines

        ctx = click_ctx.find_object(Ctx)
        with errors(), ctx.client() as client:
            rows = list(client.rows())
        for line in host_lines(load(ctx), rows):
            say(line)


@hosts.command("check")
@click.argument("name")
@pass_ctx
def hosts_check(ctx: Ctx, name: str) -> None:
    """Say what NAME lacks to run roost's workers (python, roost's worker side, pi)."""
    from roost.config import ConfigError
    from roost.hosts.commands import check

    config = load(ctx)
    try:
        host = config.host(name)
    except ConfigError as exc:
        fail(exc.message)
    ok, lines = check(host, config.drivers.values())
    for line in lines:
        say(line)
    if not ok:
        sys.exit(1)
