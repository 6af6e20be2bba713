"""What a job's network policy adds to its sandbox's command line and environment.

``none``: ``--unshare-net`` and nothing else: loopback only, no way out. ``allow``: the same
namespace, plus the job's proxy socket reachable inside and the forwarder started before the agent,
with the proxy variables pointing at it. ``all``: the person's network as it is.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from roost.programs import egress_forwarder

#: The forwarder's program (run by path with ``-I -S``: no site, nothing of roost imported).
FORWARDER = Path(egress_forwarder.__file__)
#: The port the forwarder listens on inside a job's namespace.
PROXY_PORT = 3128
#: The variables that point an agent's HTTP clients at the proxy (both spellings: tools read either).
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def proxy_env(port: int = PROXY_PORT) -> dict[str, str]:
    """The proxy variables for a job in ``allow``; NO_PROXY empty, so nothing is sent around it (there is
    no around: the namespace has loopback only)."""
    url = f"http://127.0.0.1:{port}"
    env = {name: url for name in PROXY_VARS}
    env.update({name.lower(): url for name in PROXY_VARS})
    env.update({"NO_PROXY": "", "no_proxy": ""})
    return env


def forwarder_argv(python: str, argv: list[str], socket: Path, port: int = PROXY_PORT) -> list[str]:
    """The agent's command line behind the forwarder (the part after bwrap's ``--``) for ``allow``;
    ``socket``: where the job's proxy socket is seen inside its walls."""
    return [python, "-I", "-S", str(FORWARDER), str(socket), str(port), "--", *argv]


def unshared(argv: list[str]) -> list[str] | None:
    """``argv`` in a network namespace of its own with loopback only (the rest of the system as it
    is), or None when bubblewrap is not installed."""
    bwrap = shutil.which("bwrap")
    return None if bwrap is None else [bwrap, "--dev-bind", "/", "/", "--unshare-net", "--", *argv]
