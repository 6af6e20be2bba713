"""The config file on disk: read only when no other user can write it, the defaults when it is
missing, and the documented file with every key (``roost/data/roost.toml``)."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from roost.config.parse import parse_config
from roost.config.settings import Config, ConfigError
from roost.paths import UnsafePath, check_private


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """The config in ``path``: the defaults when there is no path or no file there."""
    if path is None:
        return Config()
    path = Path(path)
    try:  # nothing another user can write is ever read as configuration
        check_private(path, "config file")
        check_private(path.absolute().parent, "directory of the config file", sticky_ok=True)
    except UnsafePath as exc:
        raise ConfigError(str(path), "", str(exc)) from None
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Config()
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read the file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), "", f"not UTF-8 text: {exc}") from None
    return parse_config(text, path)


def default_config_text() -> str:
    """The documented config file with every key and its default (``roost/data/roost.toml``)."""
    return resources.files("roost").joinpath("data", "roost.toml").read_text(encoding="utf-8")
