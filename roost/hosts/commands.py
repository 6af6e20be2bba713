"""``roost hosts`` and ``roost hosts check NAME``: what the CLI shows of hosts, worked out on the
client's side (the masters' control sockets are the user's own; jobs come from the daemon's rows)."""

from __future__ import annotations

import collections
import importlib.util
import re
import shlex
import subprocess
from typing import Any, Iterable

from roost.config import Config, DriverProfile, HostSettings
from roost.drivers.pi import INSTALL_HINT, PI_NODE
from roost.hosts.bundle import bundle
from roost.hosts.link import Link, last_line, remote_dir_expr
from roost.paths import resolve

#: The oldest Python the shipped worker side runs on (the command worker reads TOML with tomllib).
MIN_PYTHON = (3, 11)


def _link(host: HostSettings) -> Link:
    paths = resolve()
    return Link(host, paths.runtime_dir, paths.socket)


def master_pid(host: HostSettings) -> int | None:
    """The pid of the daemon's master connection to ``host``, None when there is none."""
    link = _link(host)
    if not link.control.exists():
        return None
    try:
        done = subprocess.run([*link.base(), "-O", "check", host.ssh], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):  # no ssh to ask, or a master that does not answer: not up
        return None
    found = re.search(r"pid=(\d+)", done.stderr)
    return int(found.group(1)) if done.returncode == 0 and found else None


def host_lines(config: Config, rows: Iterable[dict[str, Any]]) -> list[str]:
    """One line per configured host: how it is reached, its master, its jobs by state."""
    by_host: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in rows:
        if row.get("host"):
            by_host[row["host"]][row["state"]] += 1
    lines = []
    for name, host in sorted(config.hosts.items()):
        jobs = ", ".join(f"{n} {state}" for state, n in sorted(by_host.pop(name, {}).items())) or "no jobs"
        if host.kind == "ray":  # each worker's relay connects on its own: there is no master to show
            lines.append(f"{name}  ray {host.address}{' (insecure)' if host.insecure else ''}  {jobs}")
            continue
        pid = master_pid(host)
        state = f"connected (master pid {pid})" if pid else "not connected"
        lines.append(f"{name}  {host.ssh}{':' + str(host.port) if host.port else ''}  {state}  {jobs}")
    lines += [f"{name}  (not in the config)  {sum(c.values())} jobs" for name, c in sorted(by_host.items())]
    return lines or ["no hosts: add a [hosts.NAME] table to the config (docs/hosts.md)"]


def check(host: HostSettings, drivers: Iterable[DriverProfile] = ()) -> tuple[bool, list[str]]:
    """Whether ``host`` can run roost's workers, and a line per thing checked (what is missing and how
    to fix it), the pi programs of ``drivers``' pi profiles included. Over the daemon's master when it
    is up, else a connection of its own (batch mode). A Ray host: whether Ray is installed here."""
    if host.kind == "ray":
        if importlib.util.find_spec("ray") is None:
            return False, [f"missing: Ray on this machine (host {host.name} is a Ray cluster): pip install 'roost[ray]'"]
        return True, [f"a Ray cluster at {host.address}: Ray is installed here; each worker's relay checks the "
                      f"cluster (its token) when it starts"]
    link = _link(host)
    runner = shlex.join(host.command) if host.command else shlex.quote(host.python)
    shipped = "" if host.command else f"{remote_dir_expr(host.dir)}/{bundle().name}"
    pis = _pi_programs(drivers)
    script = (f"v=$({runner} -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' 2>/dev/null); echo python=$v; "
              f"echo system=$(uname -s); "
              + (f"[ -f {shipped} ] && echo bundle=yes; " if shipped else
                 f"{runner} -c 'import roost.hosts.remote' 2>/dev/null && echo bundle=yes; ")
              + "".join(_pi_probe(i, command, path) for i, (command, path, _) in enumerate(pis)) + "echo end")
    try:
        done = subprocess.run(link.session(script), capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, [f"host {host.name} did not answer within 30s"]
    except OSError as exc:
        return False, [f"host {host.name} unreachable: cannot run ssh: {exc.strerror or exc}"]
    if "end" not in done.stdout.splitlines():
        return False, [link.explain(done.stderr) if done.stderr.strip() else f"host {host.name}: {last_line(done.stdout)}"]
    found = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    lines, ok = [f"reachable: {host.ssh}"], True
    version = _version(found.get("python", ""))
    if len(version) < 2:
        ok = False
        lines.append(f"missing: python ({runner} not found there; install Python {'.'.join(map(str, MIN_PYTHON))}+ or "
                     f"set `python` in [hosts.{host.name}])")
    elif version < MIN_PYTHON:
        ok = False
        lines.append(f"too old: python {found['python']} (roost's worker side needs {'.'.join(map(str, MIN_PYTHON))}+)")
    else:
        lines.append(f"python {found['python']}")
    if found.get("system", "Linux") != "Linux":
        ok = False
        lines.append(f"not Linux: {found['system']} (roost's shim, which each worker there runs under, needs Linux: "
                     f"epoll and pidfds)")
    if found.get("bundle"):
        lines.append("roost's worker side: " + ("installed (command)" if host.command else f"shipped ({bundle().name})"))
    elif host.command:
        ok = False
        lines.append(f"missing: roost's worker side (`{runner} -c 'import roost.hosts.remote'` fails there)")
    else:
        lines.append("roost's worker side: not there yet (shipped over the connection at the first spawn)")
    for i, (command, _, profiles) in enumerate(pis):
        problem, line = _pi_line(command, profiles, found, i)
        lines.append(line)
        ok = ok and not (problem and any(p.host == host.name for p in profiles))  # a profile meant for there
    return ok, lines


def _pi_programs(drivers: Iterable[DriverProfile]) -> list[tuple[str, str, list[DriverProfile]]]:
    """Each pi program the pi profiles would run on a host: (its command, the PATH their ``env`` gives
    it or "", the profiles). With no profiles given, the default ``pi``."""
    found: dict[tuple[str, str], list[DriverProfile]] = {}
    for profile in drivers:
        if profile.kind == "pi":
            key = (str(profile.options.get("command", "pi")), str((profile.options.get("env") or {}).get("PATH", "")))
            found.setdefault(key, []).append(profile)
    return [(command, path, profiles) for (command, path), profiles in found.items()] or [("pi", "", [])]


def _pi_probe(i: int, command: str, path: str) -> str:
    """Shell that prints, for one pi program as the worker finds it there (the profile's PATH, else the
    login's): ``piI=`` its path, ``versionI=`` the last line ``--version`` said, ``okI=yes`` when that
    worked, ``nodeI=`` node's version."""
    env = f"PATH={shlex.quote(path)}; " if path else ""
    return (f"( {env}p=$(command -v {remote_dir_expr(command)}) && echo pi{i}=$p && "
            f"v=$(\"$p\" --version 2>&1 </dev/null) && echo ok{i}=yes; echo version{i}=$(echo \"$v\" | tail -n 1); "
            f"echo node{i}=$(node --version 2>/dev/null) ); ")


def _pi_line(command: str, profiles: list[DriverProfile], found: dict[str, str], i: int) -> tuple[bool, str]:
    """(whether something is missing, the line that says what) for the ``i``-th pi program."""
    names = ", ".join(p.name for p in profiles)
    who = f"pi (`{command}`" + (f", driver{'s' if len(profiles) > 1 else ''} {names})" if names else ")")
    program, said, node = found.get(f"pi{i}", ""), found.get(f"version{i}", ""), found.get(f"node{i}", "")
    need = f"Node.js {PI_NODE}+"
    if not program:
        return True, (f"missing: {who} is not found there (only pi jobs need it): install it there with "
                      f"`{INSTALL_HINT}` ({need}), or set the profile's `command` to its path there")
    on_node = f", on Node.js {node}" if node else ""
    if not found.get(f"ok{i}"):
        return True, f"broken: {who} is at {program} but does not run ({need}{on_node}): {said or 'it said nothing'}"
    if node and _version(node.lstrip("v")) < _version(PI_NODE):
        return True, f"too old: {who} at {program} runs on Node.js {node}; pi needs {need}"
    return False, f"{who}: {program} (version {said}{on_node})"


def _version(text: str) -> tuple[int, ...]:
    """``3.11`` or ``20.20.2`` as numbers (empty when it is no version)."""
    return tuple(int(p) for p in text.split(".") if p.isdigit())
