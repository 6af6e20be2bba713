"""`roost` with no command and `roost demo`: the only commands that import the Textual app."""

from __future__ import annotations

import time

import click

from roost.cli.common import Ctx, fail, pass_ctx, say
from roost.client import ClientError


def open_app(ctx: Ctx, select: str | None = None) -> None:
    ctx.client().close()  # starts the daemon when none runs, and says why when it cannot
    from roost.tui.app import run_app  # Textual comes in only here and in config check

    run_app(config=ctx.config, select=select)


@click.command()
@click.option("--no-app", is_flag=True, help="Only spawn the demo tree and list it.")
@pass_ctx
def demo(ctx: Ctx, no_app: bool) -> None:
    """Spawn a demo tree of jobs on the built-in agent and open the app on it."""
    from roost.demo import spawn_demo

    with ctx.client() as client:
        try:
            roots = spawn_demo(client)
        except ClientError as exc:
            fail(exc.message)
    if no_app:
        time.sleep(1.5)
        from roost.cli.listing import every_row
        from roost.cli.tree import tree_lines

        with ctx.client() as client:
            for line in tree_lines(every_row(client, archived=False)):
                say(line)
        return
    open_app(ctx, select=roots[-1] if roots else None)  # the newest: the top row, as the app lists them
