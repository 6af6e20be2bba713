"""Reading a config file's text against the schema (settings.py): each table in turn, anything
wrong refused with a ConfigError naming the file, the dotted key and what was expected."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from types import MappingProxyType
from collections.abc import Iterator
from typing import Any, Callable

from roost.config.settings import (
    _COMMON, _HOOK_KEYS, _HOST_KEYS, _KIND_KEYS, RAY_ONLY, SSH_ONLY, _TOP, _WORKTREE_KEYS, DRIVER_KINDS, RESERVED_DRIVERS, Config,
    ConfigError, DriverProfile, HookSettings, HostSettings, WorktreeSettings, _default_drivers, _freeze,
    _unknown_driver,
)
from roost.config.values import _Bad, _describe, _quote_all, _suggest, _unknown_name, Check

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")  # a TOML bare key; also what a driver name may be


def _key_part(name: str) -> str:
    """A table key as it appears in a dotted key (quoted when TOML would need quotes)."""
    return name if _BARE_KEY.fullmatch(name) else '"' + name.replace('"', '\\"') + '"'


def _unknown_key(key: str, known: list[str], what: str = "") -> str:
    hint = _suggest(key, known)
    if hint:
        return f"unknown key{what} ({hint})"
    return f"unknown key{what} (known keys: {', '.join(known)})"




def parse_config(text: str, source: str | os.PathLike[str]) -> Config:
    """The config a file's text describes; ConfigError naming ``source`` for anything wrong."""
    file = str(source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(file, "", f"invalid TOML: {exc}") from None

    def checked(key: str, check: Check, value: Any) -> Any:
        try:
            return check(value)
        except _Bad as bad:
            raise ConfigError(file, key + bad.suffix, bad.message) from None

    values: dict[str, Any] = {}
    drivers: dict[str, DriverProfile] = dict(_default_drivers())
    for key, value in data.items():
        if key == "drivers":
            drivers.update(_parse_drivers(file, value, checked))
        elif key == "hooks":
            values["hooks"] = HookSettings(**_parse_table(file, "hooks", _HOOK_KEYS, value, checked))
        elif key == "worktree":
            values["worktree"] = WorktreeSettings(**_parse_table(file, "worktree", _WORKTREE_KEYS, value, checked))
        elif key == "hosts":
            values["hosts"] = MappingProxyType(_parse_hosts(file, value, checked))
        elif key in _TOP:
            values[key] = checked(key, _TOP[key], value)
        else:
            raise ConfigError(file, _key_part(key),
                              _unknown_key(key, sorted([*_TOP, "drivers", "hooks", "worktree", "hosts"])))

    default_driver = values.get("default_driver", Config.default_driver)
    if default_driver not in drivers:
        raise ConfigError(file, "default_driver", _unknown_driver(default_driver, drivers))
    hosts = values.get("hosts", {})
    for profile in drivers.values():
        if profile.host is not None and profile.host not in hosts:
            raise ConfigError(file, f"drivers.{_key_part(profile.name)}.host",
                              _unknown_name("host", profile.host, hosts, "hosts"))
    return Config(**values, drivers=MappingProxyType(drivers), source=Path(file))


def _parse_table(file: str, name: str, schema: dict[str, Check], raw: Any,
                 checked: Callable[[str, Check, Any], Any], where: str | None = None) -> dict[str, Any]:
    """The checked values of a flat table such as ``[hooks]``, ``[worktree]`` or one host's;
    ``where`` says whose keys an unknown one is not among (default: `` in [NAME]``)."""
    if not isinstance(raw, dict):
        raise ConfigError(file, name, f"expected a table ([{name}]), got {_describe(raw)}")
    values = {}
    for key, value in raw.items():
        dotted = f"{name}.{_key_part(key)}"
        if key not in schema:
            raise ConfigError(file, dotted, _unknown_key(key, list(schema), f" in [{name}]" if where is None else where))
        values[key] = checked(dotted, schema[key], value)
    return values


def _named_tables(file: str, section: str, what: str, raw: Any,
                  reserved: tuple[str, str] | None = None) -> Iterator[tuple[str, str, Any]]:
    """Each ``[SECTION.NAME]`` table as (name, its dotted prefix, the table), once its name is one
    a ``what`` may have; ``reserved`` is a name it may not have, and what that name is instead."""
    if not isinstance(raw, dict):
        raise ConfigError(file, section, f"expected a table of {section} ([{section}.NAME] tables), got {_describe(raw)}")
    for name, table in raw.items():
        prefix = f"{section}.{_key_part(name)}"
        if not _BARE_KEY.fullmatch(name) or (reserved is not None and name == reserved[0]):
            raise ConfigError(file, prefix, f"expected a {what} name made of letters, digits, '-' and '_'"
                              + (f", other than '{reserved[0]}' (which is {reserved[1]})" if reserved else ""))
        yield name, prefix, table


def _parse_hosts(file: str, raw: Any, checked: Callable[[str, Check, Any], Any]) -> dict[str, HostSettings]:
    out: dict[str, HostSettings] = {}
    for name, prefix, table in _named_tables(file, "hosts", "host", raw, reserved=("local", "this machine")):
        values = _parse_table(file, prefix, _HOST_KEYS, table, checked, " for a host")
        kind = values.get("kind", "ssh")
        wrong = next((k for k in (RAY_ONLY if kind == "ssh" else SSH_ONLY) if k in values), None)
        if wrong is not None:
            raise ConfigError(file, f"{prefix}.{wrong}", f"not a key of a {kind} host (kind = \"{kind}\")")
        if kind == "ssh" and "ssh" not in values:
            raise ConfigError(file, f"{prefix}.ssh", 'missing; expected how to reach it, e.g. "me@build-box"')
        if kind == "ray":
            if "address" not in values:
                raise ConfigError(file, f"{prefix}.address", 'missing; expected the cluster\'s head, e.g. "head:6379"')
            if "token_env" in values and "token_file" in values:
                raise ConfigError(file, f"{prefix}.token_file", "expected one of token_env and token_file, not both")
            if not values.get("insecure") and "token_env" not in values and "token_file" not in values:
                raise ConfigError(file, f"{prefix}.token_env", "missing; a Ray cluster is reached with its auth token "
                                  "(token_env = a variable's name, or token_file = a path), or, for a cluster you "
                                  "trust without one, insecure = true")
        out[name] = HostSettings(name=name, **{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
    return out


def _parse_drivers(file: str, raw: Any, checked: Callable[[str, Check, Any], Any]) -> dict[str, DriverProfile]:
    out: dict[str, DriverProfile] = {}
    for name, prefix, table in _named_tables(file, "drivers", "driver", raw):
        if not isinstance(table, dict):
            raise ConfigError(file, prefix, f"expected a table ([{prefix}]), got {_describe(table)}")

        if "kind" in table:
            kind = checked(f"{prefix}.kind", _COMMON["kind"], table["kind"])
            if name in RESERVED_DRIVERS and kind != name:
                raise ConfigError(
                    file,
                    f"{prefix}.kind",
                    f"expected '{name}' (the driver '{name}' is always the {name} agent; "
                    f"define another name for a '{kind}' driver), got {_describe(kind)}",
                )
        elif name in RESERVED_DRIVERS:
            kind = name
        else:
            raise ConfigError(file, f"{prefix}.kind", f"missing; expected one of {_quote_all(DRIVER_KINDS)}")

        schema = _KIND_KEYS[kind]
        lifetime: str | None = None
        worktree = False
        host: str | None = None
        policy: dict[str, Any] = {}
        options: dict[str, Any] = {}
        for key, value in table.items():
            dotted = f"{prefix}.{_key_part(key)}"
            if key == "kind":
                continue
            if key == "lifetime":
                lifetime = checked(dotted, _COMMON["lifetime"], value)
            elif key == "worktree":
                worktree = checked(dotted, _COMMON["worktree"], value)
            elif key == "host":
                host = checked(dotted, _COMMON["host"], value)
            elif key in ("approvals", "approval_rules", "budget_usd", "budget_tokens", "num_cpus", "resources",
                         "keep_ignored", "isolation", "network", "allow"):
                policy[key] = checked(dotted, _COMMON[key], value)
            elif key in schema:
                options[key] = checked(dotted, schema[key][0], value)
            else:
                known = sorted([*_COMMON, *schema])
                elsewhere = [k for k in DRIVER_KINDS if key in _KIND_KEYS[k]]
                if elsewhere:  # an exact key of another kind says more than a near one of this kind
                    message = f"unknown key for a '{kind}' driver ('{key}' is a key of kind {_quote_all(elsewhere)})"
                else:
                    message = _unknown_key(key, known, f" for a '{kind}' driver")
                raise ConfigError(file, dotted, message)

        for key, (_, default) in schema.items():
            if key in options:
                continue
            if default is None:  # required: only a command driver's `command`
                raise ConfigError(
                    file, f"{prefix}.{key}", 'missing; expected a non-empty array of strings, e.g. ["claude", "-p", "{prompt}"]'
                )
            options[key] = default

        if kind == "command" and options["prompt_via"] == "arg":
            if not any("{prompt}" in item for item in options["command"]):
                raise ConfigError(
                    file,
                    f"{prefix}.command",
                    "expected an element containing '{prompt}' when prompt_via = 'arg' "
                    "(or set prompt_via = 'stdin')",
                )
        out[name] = DriverProfile(name, kind, lifetime, _freeze(options), worktree, host, **policy)
    return out
