"""roost's one config file: loading, validating, and re-reading it when it changes.

Every key is optional; a missing file means the defaults. Anything wrong — a TOML syntax
error, an unknown key, a wrong type, a value out of range — is refused with a
:class:`ConfigError` naming the file, the dotted key and what was expected. Nothing is
silently ignored. The documented file with every key and its default is
``roost/data/roost.toml`` (``config/roost.toml`` in the repository points at it);
docs/config.md is the reference.

Over 400 lines because it is the whole schema in one place: every key with its check and
default, and the parsers of its tables (drivers of five kinds, hosts, hooks, worktree). The
checks of single values are in config_values.py.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from .config_values import (
    _Bad, _describe, _quote_all, _suggest, _unknown_name, _seconds, _integer, _boolean, _choice, _choices,
    _string, _string_list, _env_table, _theme, Check, PLACEHOLDERS,
)
from .models import LIFETIMES
from .rules.approvals import MODES as APPROVAL_MODES, RuleError, parse_rules
from .paths import UnsafePath, check_private

__all__ = [
    "AGENT_VIEW_SUBAGENTS",
    "DRIVER_KINDS",
    "HOOK_EVENTS",
    "NOTIFY",
    "NOTIFY_VIA",
    "PLACEHOLDERS",
    "Config",
    "ConfigError",
    "DriverProfile",
    "HookSettings",
    "WorktreeSettings",
    "default_config_text",
    "load_config",
    "parse_config",
    "substitute",
]

DRIVER_KINDS = ("builtin", "pi", "command", "claude", "codex")
#: Codex's own names for its sandbox modes and approval policies (``[drivers.codex]``).
CODEX_SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
CODEX_APPROVALS = ("untrusted", "on-failure", "on-request", "never")
AGENT_VIEW_SUBAGENTS = ("hide", "inline")
#: What the app can notify about, and how (``notify``, ``notify_via``).
NOTIFY = ("needs_input", "failed", "done")
NOTIFY_VIA = ("bell", "osc9", "osc777")
#: The ``[hooks]`` commands the daemon can run, one per event.
HOOK_EVENTS = ("job_needs_input", "job_done", "job_failed")
PROMPT_VIA = ("arg", "stdin")
#: How many bytes of one turn's output a command driver keeps unless ``max_output`` says (0: all).
MAX_OUTPUT = 256 * 1024 * 1024
#: The placeholders a command driver's ``command`` / ``resume_args`` elements may hold.
#: The most built-in workers the daemon keeps started ahead (``spare_workers``).
SPARE_WORKERS_MAX = 8
#: Driver names that always exist, and whose kind is their name.
RESERVED_DRIVERS = ("builtin", "pi")

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")  # a TOML bare key; also what a driver name may be
_KNOWN_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


class ConfigError(Exception):
    """A config file roost refuses: which file, which dotted key (``""`` for the whole file), why."""

    def __init__(self, file: str, key: str, message: str) -> None:
        super().__init__(file, key, message)
        self.file = file
        self.key = key
        self.message = message

    def __str__(self) -> str:
        if self.key:
            return f"{self.file}: key '{self.key}': {self.message}"
        return f"{self.file}: {self.message}"


@dataclass(frozen=True)
class DriverProfile:
    """One ``[drivers.NAME]`` table: an agent definition.

    ``options`` holds the kind's keys with defaults filled in, read-only: arrays are tuples,
    tables are read-only mappings. :meth:`to_dict` gives plain JSON-able data.
    """

    name: str
    kind: str
    lifetime: str | None = None
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: Its jobs get a git worktree of their own unless a spawn says otherwise (docs/worktrees.md).
    worktree: bool = False
    #: The ``[hosts.NAME]`` its jobs run on by default (None: where the spawn says, else here).
    host: str | None = None
    #: Its jobs' approval policy unless a spawn says (None: "ask"), and their allow rules.
    approvals: str | None = None
    approval_rules: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "lifetime": self.lifetime, "options": _thaw(self.options),
                "worktree": self.worktree, "host": self.host, "approvals": self.approvals,
                "approval_rules": list(self.approval_rules)}


@dataclass(frozen=True)
class HostSettings:
    """One ``[hosts.NAME]`` table: another machine whose workers run over OpenSSH (docs/hosts.md)."""

    name: str
    ssh: str
    port: int | None = None
    identity: str = ""
    options: tuple[str, ...] = ()
    #: The Python there that runs roost's shipped worker side.
    python: str = "python3"
    #: Instead of shipping: the command that runs roost's worker side there (``roost.hosts.remote``).
    command: tuple[str, ...] = ()
    #: Where roost keeps its files there (``~`` is that host's home).
    dir: str = "~/.cache/roost"
    #: The working directory of a job there that names none.
    cwd: str = "~"
    #: Workers that may run there at once (0: no limit but the global one).
    max_running_jobs: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}


@dataclass(frozen=True)
class HookSettings:
    """The ``[hooks]`` table: a command per event (``None``: nothing runs), and their limits."""

    job_needs_input: tuple[str, ...] | None = None
    job_done: tuple[str, ...] | None = None
    job_failed: tuple[str, ...] | None = None
    timeout: float = 10.0
    max_running: int = 4

    def command(self, event: str) -> tuple[str, ...] | None:
        """The command set for one of :data:`HOOK_EVENTS`."""
        return getattr(self, event)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}


@dataclass(frozen=True)
class WorktreeSettings:
    """The ``[worktree]`` table: what a job's new worktree gets before its agent starts, what runs
    before it is removed, and where worktrees live ("": under the state directory)."""

    copy: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    teardown: tuple[str, ...] = ()
    setup_timeout: float = 600.0
    dir: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}


def _default_drivers() -> Mapping[str, DriverProfile]:
    return MappingProxyType({name: DriverProfile(name, name, None, _freeze(_defaults_for(name))) for name in RESERVED_DRIVERS})


@dataclass(frozen=True)
class Config:
    """The settings in force. ``Config()`` is the defaults."""

    default_driver: str = "builtin"
    idle_timeout: float = 1800.0
    subagent_auto_close: bool = True
    subagent_auto_close_delay: float = 3.0
    report_hold_max: float = 120.0
    report_text_max: int = 4000
    wake_reaped_parent: bool = False
    max_running_jobs: int = 8
    max_live_workers: int = 16
    spare_workers: int = 1
    max_depth: int = 4
    #: Seconds an approval waits for a person before it is denied (0: it waits for ever).
    approval_timeout: float = 3600.0
    finished_row_lifetime: float = 30.0
    agent_view_subagents: str = "hide"
    notify: tuple[str, ...] = ("needs_input",)
    notify_via: tuple[str, ...] = ("bell",)
    #: The fewest seconds between two notifications (0: no limit).
    notify_interval: float = 10.0
    theme: str = "textual-dark"
    hooks: HookSettings = HookSettings()
    worktree: WorktreeSettings = WorktreeSettings()
    drivers: Mapping[str, DriverProfile] = field(default_factory=_default_drivers)
    hosts: Mapping[str, HostSettings] = field(default_factory=lambda: MappingProxyType({}))
    source: Path | None = None

    @property
    def _file(self) -> str:
        return str(self.source) if self.source is not None else "<defaults>"

    def driver(self, name: str) -> DriverProfile:
        """The driver profile called ``name``; ConfigError listing the known ones otherwise."""
        try:
            return self.drivers[name]
        except KeyError:
            raise ConfigError(self._file, f"drivers.{name}", _unknown_driver(name, self.drivers)) from None

    def host(self, name: str) -> HostSettings:
        """The ``[hosts.NAME]`` table called ``name``; ConfigError listing the known ones otherwise."""
        try:
            return self.hosts[name]
        except KeyError:
            raise ConfigError(self._file, f"hosts.{name}", _unknown_name("host", name, self.hosts, "hosts")) from None

    def check_theme(self, available: Iterable[str]) -> None:
        """ConfigError unless ``theme`` is one of ``available`` (the app passes its theme names)."""
        names = set(available)
        if self.theme not in names:
            raise ConfigError(self._file, "theme", _unknown_name("theme", self.theme, names, "themes"))

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain data (what ``roost config show`` can print)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "drivers":
                value = {name: profile.to_dict() for name, profile in value.items()}
            elif f.name in ("hooks", "worktree"):
                value = value.to_dict()
            elif f.name == "hosts":
                value = {name: host.to_dict() for name, host in value.items()}
            elif isinstance(value, tuple):
                value = list(value)
            elif f.name == "source":
                value = str(value) if value is not None else None
            out[f.name] = value
        return out


def _unknown_driver(name: str, drivers: Mapping[str, DriverProfile]) -> str:
    return _unknown_name("driver", name, drivers, "known drivers")


# --- the schema -------------------------------------------------------------------------------

_TOP: dict[str, Check] = {
    "default_driver": _string(nonempty=True),  # checked against the drivers once they are known
    "idle_timeout": _seconds(),
    "subagent_auto_close": _boolean,
    "subagent_auto_close_delay": _seconds(positive=True),
    "report_hold_max": _seconds(),
    "report_text_max": _integer(0),
    "wake_reaped_parent": _boolean,
    "max_running_jobs": _integer(0),
    "max_live_workers": _integer(0),
    "spare_workers": _integer(0, SPARE_WORKERS_MAX),
    "max_depth": _integer(1),
    "approval_timeout": _seconds(),
    "finished_row_lifetime": _seconds(),
    "agent_view_subagents": _choice(AGENT_VIEW_SUBAGENTS),
    "notify": _choices(NOTIFY, {"none": "to notify nothing: notify = []",
                                "bell": 'the bell is how: notify_via = ["bell"]'}),
    "notify_via": _choices(NOTIFY_VIA, {}),
    "notify_interval": _seconds(),
    "theme": _theme,
}

_HOOK_KEYS: dict[str, Check] = {
    **{event: _string_list(nonempty=True) for event in HOOK_EVENTS},
    "timeout": _seconds(positive=True),
    "max_running": _integer(1),
}

_WORKTREE_KEYS: dict[str, Check] = {
    "copy": _string_list(),
    "setup": _string_list(),
    "teardown": _string_list(),
    "setup_timeout": _seconds(positive=True),
    "dir": _string(),
}

def _allow_rules(value: Any) -> tuple[str, ...]:
    """A list of allow rules (``shell:git status``, ``Bash:npm test*``; roost/rules/approvals.py)."""
    items = tuple(_string_list()(value))
    try:
        parse_rules(items)
    except RuleError as exc:
        raise _Bad(f"expected allow rules TOOL or TOOL:PATTERN: {exc}") from None
    return items


_COMMON: dict[str, Check] = {"kind": _choice(DRIVER_KINDS), "lifetime": _choice(LIFETIMES), "worktree": _boolean,
                             "host": _string(nonempty=True), "approvals": _choice(APPROVAL_MODES),
                             "approval_rules": _allow_rules}

_HOST_KEYS: dict[str, Check] = {
    "ssh": _string(nonempty=True),
    "port": _integer(1, 65535),
    "identity": _string(),
    "options": _string_list(),
    "python": _string(nonempty=True),
    "command": _string_list(),
    "dir": _string(nonempty=True),
    "cwd": _string(nonempty=True),
    "max_running_jobs": _integer(0),
}

#: Per kind: key -> (checker, default). A default of ``None`` means required.
_KIND_KEYS: dict[str, dict[str, tuple[Check, Any]]] = {
    "builtin": {},
    "pi": {
        "command": (_string(nonempty=True), "pi"),
        "provider": (_string(), ""),
        "model": (_string(), ""),
        "agent_dir": (_string(), ""),
        "args": (_string_list(), ()),
        "env": (_env_table, MappingProxyType({})),
        "load_project_extensions": (_boolean, False),
        "retry": (_boolean, True),
    },
    "claude": {
        "command": (_string(nonempty=True), "claude"),
        "model": (_string(), ""),
        "config_dir": (_string(), ""),
        "permission_mode": (_string(), ""),
        "allowed_tools": (_string_list(), ()),
        "ask_permission": (_boolean, True),
        "args": (_string_list(), ()),
        "env": (_env_table, MappingProxyType({})),
    },
    "codex": {
        "command": (_string(nonempty=True), "codex"),
        "model": (_string(), ""),
        "codex_home": (_string(), ""),
        "sandbox": (_choice(CODEX_SANDBOXES), "workspace-write"),
        "approval_policy": (_choice(CODEX_APPROVALS), "on-request"),
        "args": (_string_list(), ()),
        "env": (_env_table, MappingProxyType({})),
    },
    "command": {
        "command": (_string_list(nonempty=True, placeholders=True), None),
        "resume_args": (_string_list(placeholders=True), ()),
        "prompt_via": (_choice(PROMPT_VIA), "arg"),
        "max_output": (_integer(0), MAX_OUTPUT),
        "env": (_env_table, MappingProxyType({})),
    },
}

assert {f.name for f in fields(Config)} == set(_TOP) | {"drivers", "hooks", "worktree", "hosts", "source"}
assert {f.name for f in fields(HostSettings)} == set(_HOST_KEYS) | {"name"}
assert {f.name for f in fields(HookSettings)} == set(_HOOK_KEYS)
assert {f.name for f in fields(WorktreeSettings)} == set(_WORKTREE_KEYS)


def _defaults_for(kind: str) -> dict[str, Any]:
    return {key: default for key, (_, default) in _KIND_KEYS[kind].items() if default is not None}


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


def _key_part(name: str) -> str:
    """A table key as it appears in a dotted key (quoted when TOML would need quotes)."""
    return name if _BARE_KEY.fullmatch(name) else '"' + name.replace('"', '\\"') + '"'


def _unknown_key(key: str, known: list[str], what: str = "") -> str:
    hint = _suggest(key, known)
    if hint:
        return f"unknown key{what} ({hint})"
    return f"unknown key{what} (known keys: {', '.join(known)})"


# --- parsing ----------------------------------------------------------------------------------


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
                 checked: Callable[[str, Check, Any], Any]) -> dict[str, Any]:
    """The checked values of a flat table such as ``[hooks]`` or ``[worktree]``."""
    if not isinstance(raw, dict):
        raise ConfigError(file, name, f"expected a table ([{name}]), got {_describe(raw)}")
    values = {}
    for key, value in raw.items():
        dotted = f"{name}.{_key_part(key)}"
        if key not in schema:
            raise ConfigError(file, dotted, _unknown_key(key, list(schema), f" in [{name}]"))
        values[key] = checked(dotted, schema[key], value)
    return values


def _parse_hosts(file: str, raw: Any, checked: Callable[[str, Check, Any], Any]) -> dict[str, HostSettings]:
    if not isinstance(raw, dict):
        raise ConfigError(file, "hosts", f"expected a table of hosts ([hosts.NAME] tables), got {_describe(raw)}")
    out: dict[str, HostSettings] = {}
    for name, table in raw.items():
        prefix = f"hosts.{_key_part(name)}"
        if not _BARE_KEY.fullmatch(name) or name == "local":
            raise ConfigError(file, prefix, "expected a host name made of letters, digits, '-' and '_', other "
                                            "than 'local' (which is this machine)")
        if not isinstance(table, dict):
            raise ConfigError(file, prefix, f"expected a table ([{prefix}]), got {_describe(table)}")
        values = {}
        for key, value in table.items():
            dotted = f"{prefix}.{_key_part(key)}"
            if key not in _HOST_KEYS:
                raise ConfigError(file, dotted, _unknown_key(key, list(_HOST_KEYS), " for a host"))
            values[key] = checked(dotted, _HOST_KEYS[key], value)
        if "ssh" not in values:
            raise ConfigError(file, f"{prefix}.ssh", 'missing; expected how to reach it, e.g. "me@build-box"')
        out[name] = HostSettings(name=name, **{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
    return out


def _parse_drivers(file: str, raw: Any, checked: Callable[[str, Check, Any], Any]) -> dict[str, DriverProfile]:
    if not isinstance(raw, dict):
        raise ConfigError(file, "drivers", f"expected a table of drivers ([drivers.NAME] tables), got {_describe(raw)}")
    out: dict[str, DriverProfile] = {}
    for name, table in raw.items():
        prefix = f"drivers.{_key_part(name)}"
        if not _BARE_KEY.fullmatch(name):
            raise ConfigError(file, prefix, "expected a driver name made of letters, digits, '-' and '_'")
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
            elif key in ("approvals", "approval_rules"):
                policy[key] = checked(dotted, _COMMON[key], value)
            elif key in schema:
                options[key] = checked(dotted, schema[key][0], value)
            else:
                known = sorted([*_COMMON, *schema])
                elsewhere = [k for k in DRIVER_KINDS if key in _KIND_KEYS[k]]
                if elsewhere and not _suggest(key, known):
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


def substitute(arg: str, values: Mapping[str, str]) -> str:
    """One element of a command driver's ``command`` / ``resume_args`` with its placeholders filled.

    Only ``{prompt}``, ``{session}`` and ``{cwd}`` are replaced, in a single pass (a prompt that
    itself contains ``{cwd}`` is left as written); a placeholder missing from ``values`` becomes
    the empty string.
    """
    return _KNOWN_PLACEHOLDER.sub(lambda m: values.get(m.group(1), ""), arg)


# --- files --------------------------------------------------------------------------------------


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
