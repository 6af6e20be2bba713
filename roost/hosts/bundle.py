"""The worker side as one zipapp, built from this roost's own source on the fly and shipped to a
host once per version: it is named by its hash there, so an upgraded daemon ships a new one and a
host shared by two daemons of one version keeps one copy. Files of roost's package that a driver's
launch names (pi's extension) are shipped the same way, each named by its own hash.

Only the modules the worker side imports go in (``WORKER_SIDE``; the tests check nothing else is
needed): no textual, click, platformdirs or daemon code, so a host needs nothing but Python.
"""

from __future__ import annotations

import functools
import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import roost

#: Package-relative files of the worker side: the programs, what they import, the remote wrapper.
WORKER_SIDE = (
    "__init__.py", "paths.py", "protocol.py", "socket_connect.py", "worker_protocol.py", "proctree.py", "bounds.py",
    "placeholders.py", "client/__init__.py", "client/wire.py", "client/blocking.py", "client/aio.py",
    "client/autostart.py", "client/daemon_wait.py",
    "programs/__init__.py", "programs/builtin_agent.py", "programs/command_worker.py",
    "programs/turn_output.py", "programs/worker_process.py", "programs/mcp_server.py",
    "hosts/__init__.py", "hosts/remote.py", "hosts/remote_shim.py",
)
#: roost's own package on this machine: a launch's argument inside it names a file to ship.
PACKAGE = Path(roost.__file__).parent
MAIN = b"from roost.hosts.remote import main\nmain()\n"
#: A fixed timestamp: the same source gives the same bytes, so the same hash.
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Bundle:
    """A file shipped to hosts, named there by its hash: the worker side, or a file of roost's own
    package that a driver's launch names (pi's extension)."""

    data: bytes
    digest: str
    stem: str = "worker"
    suffix: str = ".pyz"

    @property
    def name(self) -> str:
        return f"{self.stem}-{self.digest[:16]}{self.suffix}"


@functools.cache
def bundle() -> Bundle:
    """This roost's worker side as a zipapp (built once per daemon)."""
    root = PACKAGE
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in [("__main__.py", MAIN), *((f"roost/{rel}", (root / rel).read_bytes()) for rel in WORKER_SIDE)]:
            info = zipfile.ZipInfo(name, _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    data = buffer.getvalue()
    return Bundle(data=data, digest=hashlib.sha256(data).hexdigest())


def package_file(arg: str) -> Bundle | None:
    """``arg`` as a file to ship when it names a file inside roost's own package (only this machine
    has it), else None."""
    path = Path(arg)
    if not path.is_absolute() or not path.is_relative_to(PACKAGE) or not path.is_file():
        return None
    return _shipped(path)


def shim_file() -> Bundle:
    """roost's shim (roost/programs/shim.py: the standard library only, run by path), for a host's
    workers to run under (roost/hosts/remote_shim.py)."""
    return _shipped(PACKAGE / "programs" / "shim.py")


@functools.cache
def _shipped(path: Path) -> Bundle:
    data = path.read_bytes()
    return Bundle(data=data, digest=hashlib.sha256(data).hexdigest(), stem=path.stem, suffix=path.suffix)
