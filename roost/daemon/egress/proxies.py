"""The daemon's egress proxies, one per live local job whose network is not ``all``, and what that
policy does to the job's launch (its command line under ``bwrap --unshare-net``, the proxy variables).

This is the minimal hook: until the job's whole sandbox (roost/sandbox) wraps the launch, the network
walls are a bwrap of their own around the worker, with the rest of the system as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

from roost.daemon.egress.proxy import JobProxy
from roost.daemon.egress.request_head import SecretKey
from roost.daemon.egress.sandbox_net import forwarder_argv, proxy_env, unshared
from roost.drivers.base import Launch
from roost.rules.egress import Policy, url_pattern
from roost.worker_protocol import note

#: Takes a list of worker events (roost/daemon/processes/launch.py ``EventSink``).
EventSink = Callable[[list[dict[str, Any]]], None]
ExitSink = Callable[[int, list[str]], Awaitable[None]]


class Proxies:
    """Each job's proxy socket is ``root/JOB.sock``, served while its worker lives."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.live: dict[str, JobProxy] = {}

    def wall(self, job_id: str, launch: Launch, policy: Policy, on_event: EventSink,
             provider_urls: tuple[str, ...] = (), token: str = "") -> Launch:
        """``launch`` inside the job's network walls; as it is for ``all``. Without bubblewrap the walls
        cannot be had: the launch runs as it is and its timeline says so. In ``allow``, when every
        provider URL is plain http, its keys (``*_KEY`` variables) become placeholders the proxy swaps
        back on the way there only; over https (a tunnel the proxy cannot read) the job keeps them."""
        if policy.mode == "all":
            return launch
        walled = unshared(launch.argv)
        if walled is None:
            words = [note(f"network = {policy.mode!r} is not enforced: bubblewrap (bwrap) is not installed; "
                          f"this job reaches the whole network")]
            asyncio.get_running_loop().call_soon(on_event, words)  # once the worker is the job's
            return launch
        if policy.reaches_nothing():
            return replace(launch, argv=walled)
        placeholders, keys = placeholder_keys(launch.env, list(provider_urls), token)
        path = self.open(job_id, policy, on_event, keys)
        env = {**launch.env, **proxy_env(), **placeholders}
        bwrap = walled[:walled.index("--") + 1]
        return replace(launch, argv=bwrap + forwarder_argv(sys.executable, launch.argv, path), env=env)

    def open(self, job_id: str, policy: Policy, on_event: EventSink, keys: tuple[SecretKey, ...] = ()) -> Path:
        """Serve the job's socket (a worker re-adopted after a restart gets it again at the same path)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self.root / f"{job_id}.sock"
        proxy = JobProxy(job_id, policy, lambda job, target, why: on_event([note(f"network: refused {why}")]),
                         keys)
        proxy.listen(path)
        old, self.live[job_id] = self.live.get(job_id), proxy
        if old is not None:
            asyncio.get_running_loop().create_task(old.close())
        return path

    def closing(self, job_id: str, on_exit: ExitSink) -> ExitSink:
        """``on_exit`` after the job's proxy is closed."""

        async def exited(returncode: int, tail: list[str]) -> None:
            await self.close(job_id)
            await on_exit(returncode, tail)

        return exited

    async def close(self, job_id: str) -> None:
        """The job's worker is gone: stop its proxy and cut what it had open."""
        proxy = self.live.pop(job_id, None)
        if proxy is not None:
            await proxy.close()
            with contextlib.suppress(FileNotFoundError):
                (self.root / f"{job_id}.sock").unlink()


def placeholder_keys(env: Mapping[str, str], provider_urls: list[str],
                     token: str) -> tuple[dict[str, str], tuple[SecretKey, ...]]:
    """For each ``*_KEY`` variable of a job's environment, a placeholder (what the job's environment
    says instead) and the real key for each provider host; none unless every provider URL is plain
    http (the proxy reads only those heads). A placeholder is made from the worker's token, so a
    daemon that re-adopts the worker knows it again; it is worth nothing anywhere but this proxy."""
    patterns = [url_pattern(u) for u in provider_urls]
    if not patterns or not all(p and u.startswith("http://") for p, u in zip(patterns, provider_urls)):
        return {}, ()
    names = [n for n, v in env.items() if n.endswith("_KEY") and v and not n.startswith("ROOST_")]
    placeholders = {n: "roost-placeholder-" + hashlib.sha256(f"{token}\0{n}".encode()).hexdigest()[:24] for n in names}
    return placeholders, tuple(SecretKey(placeholders[n], env[n], p) for n in names for p in patterns if p)
