"""``roost hosts`` and ``roost hosts check NAME``: what the CLI shows of hosts, worked out on the
client's side (the masters' control sockets are the user's own; jobs come from the daemon's rows)."""

from __future__ import annotations

import collections
import re
import shlex
import subprocess
from typing import Any, Iterable

from roost.config import Config, HostSettings
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
    done = subprocess.run([*link.base(), "-O", "check", host.ssh], capture_output=True, text=True, timeout=10)
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
        pid = master_pid(host)
        state = f"connected (master pid {pid})" if pid else "not connected"
        jobs = ", ".join(f"{n} {state}" for state, n in sorted(by_host.pop(name, {}).items())) or "no jobs"
        lines.append(f"{name}  {host.ssh}{':' + str(host.port) if host.port else ''}  {state}  {jobs}")
    lines += [f"{name}  (not in the config)  {sum(c.values())} jobs" for name, c in sorted(by_host.items())]
    return lines or ["no hosts: add a [hosts.NAME] table to the config (docs/hosts.md)"]


def check(host: HostSettings) -> tuple[bool, list[str]]:
    """Whether ``host`` can run roost's workers, and a line per thing checked (what is missing and how
    to fix it). Over the daemon's master when it is up, else a connection of its own (batch mode)."""
    link = _link(host)
    runner = shlex.join(host.command) if host.command else shlex.quote(host.python)
    shipped = "" if host.command else f"{remote_dir_expr(host.dir)}/{bundle().name}"
    script = (f"v=$({runner} -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])' 2>/dev/null); echo python=$v; "
              + (f"[ -f {shipped} ] && echo bundle=yes; " if shipped else
                 f"{runner} -c 'import roost.hosts.remote' 2>/dev/null && echo bundle=yes; ")
              + "command -v pi >/dev/null 2>&1 && echo pi=yes; echo end")
    try:
        done = subprocess.run(link.session(script), capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, [f"host {host.name} did not answer within 30s"]
    if "end" not in done.stdout.split():
        return False, [link.explain(done.stderr) if done.stderr.strip() else f"host {host.name}: {last_line(done.stdout)}"]
    found = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    lines, ok = [f"reachable: {host.ssh}"], True
    version = tuple(int(p) for p in found.get("python", "").split(".") if p.isdigit())
    if len(version) < 2:
        ok = False
        lines.append(f"missing: python ({runner} not found there; install Python {'.'.join(map(str, MIN_PYTHON))}+ or "
                     f"set `python` in [hosts.{host.name}])")
    elif version < MIN_PYTHON:
        ok = False
        lines.append(f"too old: python {found['python']} (roost's worker side needs {'.'.join(map(str, MIN_PYTHON))}+)")
    else:
        lines.append(f"python {found['python']}")
    if found.get("bundle"):
        lines.append("roost's worker side: " + ("installed (command)" if host.command else f"shipped ({bundle().name})"))
    elif host.command:
        ok = False
        lines.append(f"missing: roost's worker side (`{runner} -c 'import roost.hosts.remote'` fails there)")
    else:
        lines.append("roost's worker side: not there yet (shipped over the connection at the first spawn)")
    lines.append("pi: found" if found.get("pi") else "pi: missing (only the pi driver needs it there: npm install -g "
                                                    "@mariozechner/pi-coding-agent)")
    return ok, lines
