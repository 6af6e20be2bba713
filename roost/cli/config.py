"""`roost config path | show | check`: where the config file is, what it says, whether it is valid."""

from __future__ import annotations

import json
from typing import Any

import click

from roost import paths as paths_mod
from roost.cli.common import Ctx, fail, pass_ctx, say


# -- config ------------------------------------------------------------------------------------------------
@click.group()
def config() -> None:
    """Where the config file is, what it says, whether it is valid."""


@config.command("path")
@pass_ctx
def config_path(ctx: Ctx) -> None:
    """Print the config file's path (it may not exist: every key is optional)."""
    say(str(paths_mod.config_file(ctx.config)))


def load(ctx: Ctx) -> Any:
    """The config file in force for ``ctx``, or exit saying what is wrong in it."""
    from roost.config import ConfigError, load_config

    path = paths_mod.config_file(ctx.config)
    try:
        return load_config(path)
    except ConfigError as exc:
        fail(str(exc))


@config.command("show")
@pass_ctx
def config_show(ctx: Ctx) -> None:
    """Print the settings in force (defaults filled in) as JSON."""
    click.echo(json.dumps(load(ctx).to_dict(), indent=2))


@config.command("check")
@pass_ctx
def config_check(ctx: Ctx) -> None:
    """Check the config file; exit 1 with the file, key and what was expected when it is wrong."""
    from roost.config import ConfigError
    from roost.tui.looks import theme_names  # the app's themes are Textual's: ask it, as the app does

    cfg = load(ctx)
    try:
        cfg.check_theme(theme_names())
    except ConfigError as exc:
        fail(str(exc))
    say(f"ok: {cfg.source or 'no config file; using the defaults'}")
