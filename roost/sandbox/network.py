"""What a job's network (roost/rules/egress.py) adds to its walls: ``all`` keeps the machine's network;
``none`` is bwrap's ``--unshare-net`` (loopback only) and nothing else; ``allow`` is the same
namespace with one way out: a forwarder inside (roost/programs/egress_forwarder.py) listening on
127.0.0.1:PROXY_PORT, the agent's proxy variables pointing at it, relaying to the job's proxy socket
(bound in at ``INSIDE_SOCKET``), which the job's egress proxy serves (roost/programs/egress_proxy.py)
from outside the walls, started by the job's shim before bwrap: it outlives the daemon as the worker
does, so a re-adopted worker keeps its network."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from roost.drivers.base import Launch
from roost.paths import make_private_dir, open_private
from roost.programs import egress_forwarder
from roost.rules.egress import Policy, url_pattern

#: The forwarder's program (run by path with ``-I -S``: no site, nothing of roost imported).
FORWARDER = Path(egress_forwarder.__file__)
#: The port the forwarder listens on inside a job's namespace.
PROXY_PORT = 3128
#: The variables that point an agent's HTTP clients at the proxy (both spellings: tools read either).
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
#: Where the job's proxy socket is seen inside its walls (on its private /tmp).
INSIDE_SOCKET = "/tmp/.roost-egress.sock"
#: The directory of roost's runtime directory holding each job's proxy socket and, until its proxy
#: reads it, its spec.
EGRESS_DIR = "egress"


@dataclass(frozen=True)
class NetWalls:
    """A job's network as its walls build it: ``launch`` (its argv behind the forwarder, its proxy
    variables and placeholder keys) goes inside bwrap; ``proxy`` (outside socket, spec file) is
    what the job's proxy serves, None when nothing goes out."""

    launch: Launch
    share: bool
    proxy: tuple[str, str] | None = None


def proxy_env(port: int = PROXY_PORT) -> dict[str, str]:
    """The proxy variables for a job in ``allow``; NO_PROXY empty, so nothing is sent around it (there is
    no around: the namespace has loopback only)."""
    url = f"http://127.0.0.1:{port}"
    env = {name: url for name in PROXY_VARS}
    env.update({name.lower(): url for name in PROXY_VARS})
    env.update({"NO_PROXY": "", "no_proxy": ""})
    return env


def forwarder_argv(python: str, argv: list[str], socket: str, port: int = PROXY_PORT) -> list[str]:
    """The agent's command line behind the forwarder (the part after bwrap's ``--``) for ``allow``;
    ``socket``: where the job's proxy socket is seen inside its walls."""
    return [python, "-I", "-S", str(FORWARDER), socket, str(port), "--", *argv]


def proxy_argv(spec: str, argv: list[str]) -> list[str]:
    """``argv`` (bwrap's command line) started by the job's egress proxy, which serves it."""
    return [sys.executable, "-m", "roost.programs.egress_proxy", spec, "--", *argv]


def note_mark(token_hash: str) -> str:
    """What starts a line of the worker's stderr that its proxy writes for the job's timeline: made from
    the hash of the worker's token its shim's record keeps, so a daemon that re-adopts the worker knows
    it again."""
    return "roost-egress-" + hashlib.sha256(f"{token_hash}\0egress-note".encode()).hexdigest()[:16] + " "


def network_walls(launch: Launch, job_id: str, policy: Policy, provider_urls: list[str], token: str,
                  mark: str, runtime_dir: Path) -> NetWalls:
    """``launch`` as the job's network has it inside its walls. For ``allow`` the proxy's spec (its
    socket, policy, the real keys, ``mark`` for its notes) is written owner-only where no job reads it (roost's
    runtime directory is hidden in every sandbox); the proxy reads it and removes it at its start."""
    if policy.mode == "all":
        return NetWalls(launch, share=True)
    if policy.reaches_nothing():
        return NetWalls(launch, share=False)
    folder = runtime_dir / EGRESS_DIR
    make_private_dir(folder)
    socket, spec = folder / f"{job_id}.sock", folder / f"{job_id}.json"
    placeholders, keys = placeholder_keys(launch.env, provider_urls, token)
    body = {"job": job_id, "socket": str(socket), "mode": policy.mode, "chain": [list(c) for c in policy.chain],
            "provider": list(policy.provider), "keys": keys, "mark": mark}
    spec.unlink(missing_ok=True)
    with os.fdopen(open_private(spec), "w") as out:
        json.dump(body, out)
    inner = dataclasses.replace(launch, argv=forwarder_argv(sys.executable, launch.argv, INSIDE_SOCKET),
                                env={**launch.env, **proxy_env(), **placeholders})
    return NetWalls(inner, share=False, proxy=(str(socket), str(spec)))


def placeholder_keys(env: Mapping[str, str], provider_urls: list[str],
                     token: str) -> tuple[dict[str, str], list[list[str]]]:
    """For each ``*_KEY`` variable of a job's environment, a placeholder (what the job's environment
    says instead) and [placeholder, real key, provider host] for each provider host; none unless every
    provider URL is plain http (the proxy reads only those heads). A placeholder is made from the
    worker's token; it is worth nothing anywhere but this job's proxy."""
    patterns = [url_pattern(u) for u in provider_urls]
    if not patterns or not all(p and u.startswith("http://") for p, u in zip(patterns, provider_urls)):
        return {}, []
    names = [n for n, v in env.items() if n.endswith("_KEY") and v and not n.startswith("ROOST_")]
    placeholders = {n: "roost-placeholder-" + hashlib.sha256(f"{token}\0{n}".encode()).hexdigest()[:24] for n in names}
    return placeholders, [[placeholders[n], env[n], p] for n in names for p in patterns if p]
