"""Every setting of roost's config file in one place: the constants its values are chosen from,
the dataclasses the settings in force are (``Config`` and its tables), and the schema, key by key,
with each key's check and default (``_TOP`` for the top-level keys, then each table's).

A new key is a field of its dataclass and a line of its schema table (the asserts below check
the two agree); parse.py reads a file against these tables, values.py holds the checks.
One file on purpose (about 490 lines): a key's field, check and default side by side is what keeps
them agreeing; split by table they would drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from roost.bounds import MAX_OUTPUT
from roost.config.values import (
    _Bad, _describe, _unknown_name, _seconds, _integer, _boolean, _choice, _choices,
    _string, _string_list, _env_table, _theme, _amount, _resources, Check, _dollars, _prices,
)
from roost.models import LIFETIMES
from roost.rules import egress
from roost.rules.approvals import MODES as APPROVAL_MODES, RuleError, parse_rules
from roost.sandbox.walls import DEFAULT_HIDE, LEVELS as ISOLATION_LEVELS

DRIVER_KINDS = ("builtin", "pi", "command", "claude", "codex")
#: Codex's own names for its sandbox modes and approval policies (``[drivers.codex]``).
CODEX_SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
CODEX_APPROVALS = ("untrusted", "on-failure", "on-request", "never")
AGENT_VIEW_SUBAGENTS = ("hide", "inline")
ON_RATE_LIMIT = ("resume", "ask")
#: What the app can notify about, and how (``notify``, ``notify_via``).
NOTIFY = ("needs_input", "failed", "done")
NOTIFY_VIA = ("bell", "osc9", "osc777")
#: The ``[hooks]`` commands the daemon can run, one per event.
HOOK_EVENTS = ("job_needs_input", "job_done", "job_failed")
PROMPT_VIA = ("arg", "stdin")
#: How many bytes of one turn's output a command driver keeps unless ``max_output`` says (0: all).
#: The most built-in workers the daemon keeps started ahead (``spare_workers``).
SPARE_WORKERS_MAX = 8
#: Driver names that always exist, and whose kind is their name.
RESERVED_DRIVERS = ("builtin", "pi")




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
    #: Its jobs' budgets unless a spawn says (docs/config.md#budgets).
    budget_usd: float | None = None
    budget_tokens: int | None = None
    #: On a Ray host: the CPUs its workers' actors hold instead of the host's, and custom resources
    #: they need besides the host's (docs/hosts.md#ray). Nothing elsewhere.
    num_cpus: float | None = None
    resources: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    #: What its jobs' network reaches (roost/rules/egress.py, docs/isolation.md#network): None is
    #: ``allow`` with its provider hosts only; ``allow`` adds hosts to those.
    network: str | None = None
    allow: tuple[str, ...] = ()
    #: An archive keeps its jobs' worktrees when they hold ignored files the job made (docs/worktrees.md).
    keep_ignored: bool = False
    #: Its jobs' walls unless a spawn says (None: walls.DEFAULT_LEVEL, "none" for now; docs/isolation.md).
    isolation: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "lifetime": self.lifetime, "options": _thaw(self.options),
                "isolation": self.isolation,
                "worktree": self.worktree, "host": self.host, "approvals": self.approvals,
                "approval_rules": list(self.approval_rules), "budget_usd": self.budget_usd,
                "budget_tokens": self.budget_tokens, "num_cpus": self.num_cpus, "resources": dict(self.resources),
                "keep_ignored": self.keep_ignored, "network": self.network, "allow": list(self.allow)}


@dataclass(frozen=True)
class HostSettings:
    """One ``[hosts.NAME]`` table: another machine whose workers run over OpenSSH, or a Ray cluster
    whose nodes run them (``kind = "ray"``; docs/hosts.md)."""

    name: str
    ssh: str = ""
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
    #: "ssh" (``ssh`` says how to reach it) or "ray" (``address`` names the cluster's head).
    kind: str = "ssh"
    #: A Ray cluster's GCS address (HOST:PORT); this machine must be a node of it (docs/hosts.md#ray).
    address: str = ""
    #: Where the cluster's auth token is: the name of a variable of the daemon's environment, or a file.
    token_env: str = ""
    token_file: str = ""
    #: A cluster that requires no token is refused unless this says it is trusted.
    insecure: bool = False
    #: What each worker's actor holds on its node: CPUs and custom resources (placement).
    num_cpus: float = 1.0
    resources: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    #: How long a worker's actor keeps it without hearing from its relay (a relay killed, its machine gone).
    lost_after: float = 30.0
    #: How long Ray may take to place a worker's actor on a node (busy nodes, a cluster that grows).
    place_within: float = 120.0

    def ready_time(self, driver_ready: float) -> float:
        """How long a worker placed here may take to answer its first get_state: its driver's own time,
        and on a Ray cluster the time Ray may take to place it first."""
        return driver_ready + (self.place_within if self.kind == "ray" else 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else
                dict(v) if isinstance(v, Mapping) else v for f in fields(self)}


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
    #: The most connections one job holds at once (said hello as it); one more is refused at hello.
    max_connections_per_job: int = 32
    #: Seconds a connection that said hello may sit with no request running and no subscription
    #: before the daemon closes it (0: never).
    connection_idle_close: float = 900.0

    #: Quotas (roost/rules/quotas.py; 0: no cap): jobs in one tree, spawns into one tree a minute,
    #: and bytes of one job's output its timeline keeps (past it the oldest output goes).
    max_tree_jobs: int = 500
    max_spawns_per_minute: int = 120
    max_timeline_bytes: int = 128 * 1024 * 1024
    #: How long an SSH host's link may stay down, retried with back-off, before its jobs fail.
    host_lost_after: float = 300.0
    #: Seconds an approval waits for a person before it is denied (0: it waits for ever).
    approval_timeout: float = 3600.0
    #: Stalls (roost/rules/stalls.py): a working job silent this long is flagged (0: never) ...
    stall_after: float = 300.0
    #: ... a turn running this long is flagged as over its time (0: off, the default) ...
    max_turn_time: float = 0.0
    #: ... and a message taken and not started this long is flagged (0: never).
    start_stall_after: float = 60.0
    #: At a rate limit's reset: "resume" its bounced turn by itself, or "ask" a person to.
    on_rate_limit: str = "resume"
    finished_row_lifetime: float = 30.0
    agent_view_subagents: str = "hide"
    notify: tuple[str, ...] = ("needs_input",)
    notify_via: tuple[str, ...] = ("bell",)
    #: The fewest seconds between two notifications (0: no limit).
    notify_interval: float = 10.0
    #: Seconds within which a second ``K`` must follow the first to stop (roost/tui/double_press.py).
    double_press_window: float = 2.0
    theme: str = "textual-dark"
    #: The most all jobs together may spend in one day, in dollars (None: no cap).
    budget_daily_usd: float | None = None
    #: ``[prices.MODEL]``: dollars per million tokens, for agents that report no cost.
    prices: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: MappingProxyType({}))
    #: Walls (docs/isolation.md): the bubblewrap program, what stays hidden beyond the defaults and
    #: what of those is shown, variables kept besides each driver's own, per-job limits (0: none).
    sandbox_bwrap: str = "bwrap"
    sandbox_hide: tuple[str, ...] = DEFAULT_HIDE
    sandbox_show: tuple[str, ...] = ()
    sandbox_read: tuple[str, ...] = ()
    sandbox_env: tuple[str, ...] = ()
    sandbox_memory_mb: int = 4096
    sandbox_processes: int = 1024
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
            elif f.name == "prices":
                value = {model: dict(price) for model, price in value.items()}
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
    "max_connections_per_job": _integer(1),
    "connection_idle_close": _seconds(),

    "max_tree_jobs": _integer(0),
    "max_spawns_per_minute": _integer(0),
    "max_timeline_bytes": _integer(0),
    "host_lost_after": _seconds(positive=True),
    "approval_timeout": _seconds(),
    "stall_after": _seconds(),
    "max_turn_time": _seconds(),
    "start_stall_after": _seconds(),
    "on_rate_limit": _choice(ON_RATE_LIMIT),
    "finished_row_lifetime": _seconds(),
    "agent_view_subagents": _choice(AGENT_VIEW_SUBAGENTS),
    "notify": _choices(NOTIFY, {"none": "to notify nothing: notify = []",
                                "bell": 'the bell is how: notify_via = ["bell"]'}),
    "notify_via": _choices(NOTIFY_VIA, {}),
    "notify_interval": _seconds(),
    "double_press_window": _seconds(positive=True),
    "theme": _theme,
    "budget_daily_usd": _dollars,
    "prices": _prices,
    "sandbox_bwrap": _string(nonempty=True),
    "sandbox_hide": _string_list(),
    "sandbox_show": _string_list(),
    "sandbox_read": _string_list(),
    "sandbox_env": _string_list(),
    "sandbox_memory_mb": _integer(0),
    "sandbox_processes": _integer(0),
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

def _host_patterns(value: Any) -> tuple[str, ...]:
    """A profile's ``allow``: host patterns (``api.anthropic.com``, ``*.github.com``, ``10.0.0.1:8080``)."""
    items = tuple(_string_list()(value))
    try:
        return egress.parse_list(items, "allow")
    except egress.PatternError as exc:
        raise _Bad(f"expected host patterns: {exc}") from None


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
                             "approval_rules": _allow_rules, "budget_usd": _dollars, "budget_tokens": _integer(0),
                             "num_cpus": _amount, "resources": _resources, "keep_ignored": _boolean,
                             "isolation": _choice(ISOLATION_LEVELS), "network": _choice(egress.MODES),
                             "allow": _host_patterns}


def _lost_after(value: Any) -> float:
    """A Ray host's ``lost_after``: its relay calls its actor every second, so a few seconds at least."""
    seconds = _seconds(positive=True)(value)
    if seconds < 3:
        raise _Bad(f"expected at least 3 seconds (a relay calls its actor every second), got {_describe(value)}")
    return seconds


#: How a host's workers are reached: over OpenSSH, or as actors of a Ray cluster.
HOST_KINDS = ("ssh", "ray")

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
    "kind": _choice(HOST_KINDS),
    "address": _string(nonempty=True),
    "token_env": _string(nonempty=True),
    "token_file": _string(nonempty=True),
    "insecure": _boolean,
    "num_cpus": _amount,
    "resources": _resources,
    "lost_after": _lost_after,
    "place_within": _seconds(positive=True),
}
#: The keys only a host of that kind has.
SSH_ONLY = ("ssh", "port", "identity", "options", "python", "command", "dir")
RAY_ONLY = ("address", "token_env", "token_file", "insecure", "num_cpus", "resources", "lost_after", "place_within")

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
