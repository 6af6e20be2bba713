"""What a driver is: how to start one kind of agent, and how to speak to it in the worker protocol."""

from __future__ import annotations

import json
import re
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from roost.models import Job
from roost.proctree import record_path
from roost.rules.egress import url_pattern
from roost.protocol import encode, loads
from roost.text import failure_line
from roost.worker_protocol import Oversize, note


#: The variables that name a worker's job (with ROOST_SOCKET, ``LaunchContext.roost_env``).
JOB_VARS = ("ROOST_JOB_ID", "ROOST_TOKEN")


class DriverError(Exception):
    """A worker cannot be started; the message says why and what to do about it."""


@dataclass(frozen=True)
class LaunchContext:
    """What the daemon hands a driver to start a job's worker."""

    socket: Path
    token: str
    sessions_dir: Path
    state_dir: Path
    options: Mapping[str, Any] = field(default_factory=dict)
    #: The worker runs on another host (roost/hosts): its program and cwd are that host's, not
    #: this machine's, so the driver checks neither here (`roost hosts check` does, there).
    remote: bool = False

    def roost_env(self, job: Job) -> dict[str, str]:
        """The variables through which a worker's tools reach the daemon as its job."""
        return {"ROOST_SOCKET": str(self.socket), "ROOST_JOB_ID": job.id, "ROOST_TOKEN": self.token}

    def record(self, job: Job) -> Path:
        """Where the daemon writes down the job's worker tree while it runs (for recovery)."""
        return record_path(self.state_dir, job.id)


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    #: The session file when the driver knows it before the worker starts.
    session: str | None = None
    #: Where the worker's tree is written down while it runs; None: nowhere (a test's own worker).
    record: Path | None = None
    #: Whether a later daemon may take the running worker over (its adapter keeps nothing in memory,
    #: or writes it down and restores it); the worker sets it from ``Adapter.survives_restart``.
    adoptable: bool = False
    #: The agent's own state outside the job's tree that it writes (its config or session directory,
    #: a session file): what a sandbox lets it write besides the tree (roost/sandbox/enclose.py).
    writable: tuple[str, ...] = ()
    #: Limits the shim takes on before it starts the agent, so the agent's whole tree has them with no
    #: wrapper process (a sandbox's: roost/sandbox/enclose.py): (resource, most) rlimits, and a cgroup
    #: it joins (removed once the shim is reaped).
    rlimits: tuple[tuple[int, int], ...] = ()
    cgroup: Path | None = None


class Adapter:
    """Translates the worker protocol to an agent's own stdio. This one is the identity:
    for workers that speak the worker protocol natively (the built-in agent, the command driver)."""

    #: Whether a daemon that did not start the worker can speak for it: true for the identity, and for
    #: an adapter that writes down what it learned (``snapshot``) and takes it back (``restore``): pi's,
    #: Claude Code's. One that cannot (Codex's) says False, and its worker is not re-adopted after a
    #: restart of the daemon (docs/reliability.md, "Workers that outlive the daemon").
    survives_restart = True

    def snapshot(self) -> dict[str, Any] | None:
        """What the adapter knows now, as a small JSON object (at most about SNAPSHOT_MAX bytes), or
        None when it keeps nothing (the identity). The daemon takes it after each step whose events it
        commits and writes it down with the step's line (``Job.live``), so a daemon that re-adopts the
        worker ``restore``s the adapter as it was right after the last committed line."""
        return None

    def restore(self, state: dict[str, Any], run: Any = None) -> None:
        """Take back what ``snapshot`` wrote down (before ``bind``; the lines after it come again).
        ``run``: the prompt's run token of the turn the daemon's record has in flight (None: none, or
        one of the agent's own), for a prompt written to the agent after the last snapshot."""

    def bind(self, emit: Callable[[dict[str, Any]], None], write: Callable[[bytes], None]) -> None:
        """Called once the agent runs. An adapter that answers some commands itself, or decides
        something only after a delay (pi: whether an error ends the turn), hands the daemon those
        events and responses with ``emit``, and sends the agent commands of its own with ``write``.
        The identity adapter needs neither."""

    def encode(self, command: dict[str, Any]) -> bytes:
        return encode(command)

    def decode(self, line: bytes) -> list[dict[str, Any]]:
        """Worker-protocol events for one line of the agent's stdout."""
        try:
            event = loads(line)
        except ValueError:  # not JSON, or JSON roost does not take (roost.protocol.loads)
            return [{"type": "malformed", "line": line[:200].decode(errors="replace")}]
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            return [{"type": "malformed", "line": line[:200].decode(errors="replace")}]
        return [event]

    def oversize(self, line: Oversize) -> list[dict[str, Any]]:
        """Events for a stdout line over the frame limit, which the daemon skipped unread: a note, so
        the timeline says what was lost. An adapter that can tell what the line was may say more."""
        return [note(f"skipped {line.describe()} from the worker")]

    #: Openings of the stderr lines the agent prints at every start, whatever happens after: never
    #: what explains its exit.
    stderr_noise: tuple[str, ...] = ()

    def exit_words(self, stderr_tail: list[str]) -> list[str]:
        """The last stderr lines that explain a worker's exit, as plain words (no colour codes or other
        control sequences; the agent's startup noise left out); at most the last five."""
        lines = (failure_line(line, self.stderr_noise) for line in stderr_tail)
        return [line for line in lines if line][-5:]


#: About how many bytes an adapter's snapshot may take (``kept`` cuts what it holds of the agent's words).
SNAPSHOT_MAX = 64 * 1024
#: The most entries of one kind (tool calls in flight, subagents) a snapshot keeps; the most bytes of one value.
SNAPSHOT_ENTRIES = 16
SNAPSHOT_VALUE = 2000


def kept(value: Any) -> Any:
    """``value`` as a snapshot keeps it: itself when its JSON is at most SNAPSHOT_VALUE bytes, else a note
    saying it was too big (what the agent's tool call said shows on the timeline, cut, after a restart)."""
    try:
        size = len(json.dumps(value))
    except (TypeError, ValueError):
        return "(not kept across the daemon's restart)"
    return value if size <= SNAPSHOT_VALUE else f"({size} bytes, too big to keep across the daemon's restart)"


def newest(entries: dict[str, Any]) -> dict[str, Any]:
    """The newest SNAPSHOT_ENTRIES of a dict (insertion order), each value ``kept``."""
    return {k: kept(v) for k, v in list(entries.items())[-SNAPSHOT_ENTRIES:]}


def line_field(data: bytes, name: str, last: bool = False) -> Any:
    """The first (or last) string, boolean or integer value of ``"name":`` in a piece of a JSON line
    pi, Claude Code or Codex wrote (compact, as JSON.stringify writes it), or None."""
    found = re.findall(rb'"%s":("(?:[^"\\]|\\.)*"|true|false|-?\d+)' % name.encode(), data)
    try:
        return json.loads(found[-1 if last else 0]) if found else None
    except ValueError:  # a string cut short at the piece's edge
        return None


def text_of(content: Any) -> str:
    """The text blocks of a message's content (a string, or a list of blocks as pi and the
    Messages API write them), joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


class Driver:
    """One kind of agent runtime."""

    kind = ""
    #: Openings of the names of variables its agent needs from the daemon's environment (its provider's
    #: key and base URL): the rest stay out of a sandboxed worker's environment (roost/sandbox/walls.py).
    env_prefixes: tuple[str, ...] = ()
    #: How long a worker may take to answer its first get_state.
    ready_timeout = 30.0
    #: Whether its worker starts with the job's budget as its agent's own cap (Claude Code's
    #: ``--max-budget-usd``): then a budget set later reaches it only by a restart of the worker.
    caps_spend = False

    def check(self, options: Mapping[str, Any]) -> None:
        """Raise DriverError when this driver cannot run at all (say, its binary is missing),
        so a spawn is refused at once with a clear reason instead of failing later."""

    def launch(self, job: Job, ctx: LaunchContext) -> Launch:
        raise NotImplementedError

    def spare(self, ctx: LaunchContext) -> Launch | None:
        """A worker to start ahead of any job (roost/daemon/processes/spare.py), or None when this driver has
        none. Its contract: given a ``bind`` with a launch's session, cwd and the variables that
        launch's environment adds to this one's, it is the worker that launch would have started."""
        return None

    def adapter(self, job: Job) -> Adapter:
        return Adapter()

    def provider_urls(self, options: Mapping[str, Any]) -> list[str]:
        """The base URLs of the model its agent reaches: a job in ``network = "allow"`` always reaches
        their hosts. Here: the ``*_BASE_URL`` variables of the profile's ``env`` (else the daemon's); a
        driver adds its own settings and its provider's default."""
        return base_urls(options)

    def provider_hosts(self, options: Mapping[str, Any]) -> list[str]:
        """The host:port patterns of :meth:`provider_urls` (roost/rules/egress.py)."""
        return [p for p in dict.fromkeys(map(url_pattern, self.provider_urls(options))) if p]

    def fork(self, source: Job, sessions_dir: Path, new_id: str) -> tuple[str | None, str | None]:
        """How a fork of ``source`` (job ``new_id``) starts with the conversation so far: its
        session, or the session its first start forks with the agent's own fork (``fork_of``).
        Blocking file work is fine: the daemon runs this in a thread."""
        raise DriverError(f"jobs of the {self.kind} driver cannot be forked: it keeps no conversation roost can copy")


def copy_session(source: Job, target: Path) -> str | None:
    """A copy of ``source``'s session file at ``target`` (None when it has none yet: the fork starts
    fresh), made whole before it is put in place so a fork never reads half a file."""
    if not source.session or not os.path.isfile(source.session):
        return None
    part = target.with_name(target.name + ".part")
    shutil.copyfile(source.session, part)
    os.replace(part, target)
    return str(target)


def base_urls(options: Mapping[str, Any], defaults: Mapping[str, str] = MappingProxyType({})) -> list[str]:
    """Every ``*_BASE_URL`` variable in the profile's ``env`` or the daemon's environment (the
    profile's first), and ``defaults`` (variable -> the provider's own URL) for those unset."""
    env = {**os.environ, **(options.get("env") or {})}
    urls = [v for k, v in env.items() if k.endswith("_BASE_URL")]
    return urls + [url for name, url in defaults.items() if not env.get(name)]


def own_file(path: str) -> str:
    """``path`` made (empty, 0600, in a private directory) when missing: a session file its agent
    appends to, which a sandbox can then let it write alone (``Launch.writable``)."""
    from roost.paths import make_private_dir, open_private

    target = Path(path)
    if not target.exists():
        make_private_dir(target.parent)
        os.close(open_private(target))
    return path


def inherited_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment plus ``extra``; what local, trusted workers get."""
    env = dict(os.environ)
    env.update(extra)
    return env


def find_agent_program(name: str, command: str, env: Mapping[str, str], install: str, node: str) -> str:
    """An agent program's full path (``command`` looked up on the worker's PATH); DriverError saying how
    to install it when there is none, or when it runs on Node.js and there is no ``node``."""
    search = env.get("PATH") or os.environ.get("PATH", "")
    program = shutil.which(os.path.expanduser(command), path=search)
    if program is None and (found := not_executable(os.path.expanduser(command), search)):
        raise DriverError(f"{name} cannot run: {found} exists but is not an executable program (its mode is "
                          f"{stat.filemode(os.stat(found).st_mode)}). Make it executable (`chmod +x {found}`), or "
                          f"set `command` of the {name} driver in the config to the {name} program's path.")
    if program is None:
        raise DriverError(f"{name} is not installed: no program {command!r} was found on PATH. Install it with "
                          f"`{install}` (it needs Node.js {node} or newer), or set `command` of the {name} "
                          f"driver in the config to the {name} program's path.")
    if _runs_on_node(program) and shutil.which("node", path=search) is None:
        raise DriverError(f"{name} ({program}) runs on Node.js, and `node` is not on PATH: install Node.js {node} "
                          f"or newer, or put it on the daemon's PATH.")
    return program


def not_executable(command: str, search: str) -> str | None:
    """The file ``command`` names (a path, or a name looked up on ``search``) when one exists but may
    not be run (a mode without x, a directory), or None: so "not installed" is said only when it is not."""
    paths = [command] if os.sep in command else [os.path.join(d, command) for d in search.split(os.pathsep) if d]
    return next((p for p in paths if os.path.exists(p) and not (os.path.isfile(p) and os.access(p, os.X_OK))), None)


def _runs_on_node(program: str) -> bool:
    try:
        with open(program, "rb") as fh:
            first = fh.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"node" in first


def existing_cwd(job: Job, name: str) -> str:
    """The job's working directory; DriverError when it is gone (an agent resumes a session only where
    it began)."""
    if not os.path.isdir(job.cwd):
        raise DriverError(f"the job's working directory {job.cwd} no longer exists; {name} resumes a session "
                          f"only in the directory it started in")
    return job.cwd
