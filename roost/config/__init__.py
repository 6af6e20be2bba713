"""roost's one config file: its settings, reading and checking it, and the file on disk.

Every key is optional; a missing file means the defaults. Anything wrong — a TOML syntax
error, an unknown key, a wrong type, a value out of range — is refused with a
:class:`ConfigError` naming the file, the dotted key and what was expected. Nothing is
silently ignored. The documented file with every key and its default is
``roost/data/roost.toml`` (``config/roost.toml`` in the repository points at it);
docs/config.md is the reference.

One idea a module: settings.py (every key: the dataclasses and the schema tables), values.py
(the checks of single values), parse.py (a file's text against the schema), files.py (the file
on disk). The worker side needs none of it: what it shares with the config lives in
roost/bounds.py (``MAX_OUTPUT``) and roost/placeholders.py (``substitute``).
"""

from roost.bounds import MAX_OUTPUT
from roost.config.files import default_config_text, load_config
from roost.config.parse import parse_config
from roost.config.settings import (
    AGENT_VIEW_SUBAGENTS, DRIVER_KINDS, HOOK_EVENTS, NOTIFY, NOTIFY_VIA, SPARE_WORKERS_MAX, Config, ConfigError,
    DriverProfile, HookSettings, HostSettings, WorktreeSettings,
)
from roost.placeholders import PLACEHOLDERS, substitute

__all__ = [
    "AGENT_VIEW_SUBAGENTS",
    "DRIVER_KINDS",
    "HOOK_EVENTS",
    "MAX_OUTPUT",
    "NOTIFY",
    "NOTIFY_VIA",
    "PLACEHOLDERS",
    "SPARE_WORKERS_MAX",
    "Config",
    "ConfigError",
    "DriverProfile",
    "HookSettings",
    "HostSettings",
    "WorktreeSettings",
    "default_config_text",
    "load_config",
    "parse_config",
    "substitute",
]
