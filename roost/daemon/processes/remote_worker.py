"""A worker on an SSH host, run under roost's shim there (docs/hosts.md#a-dropped-link).

The shim is started on the host by the far side's ``--shim`` (roost/hosts/remote_shim.py), detached
from the ssh channel, listening on an owner-only socket in roost's directory there. The daemon
speaks to it through a session over the host's master that relays that socket (``--relay``): the
same ``ShimLink`` as for a local shim, with sequence numbers, so a connection opened again replays
nothing twice and loses nothing.

When the link drops (the master ended), the worker runs on; the link is tried again with back-off
(roost/rules/host_loss.py) until it is back — the turn goes on — or ``host_lost_after`` has passed:
then the worker counts as exited, with a reason that names the host and how long it was lost. A
host that is back with no shim at that socket: the worker there is gone, and the job fails saying so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import shlex
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable

from roost.daemon.processes.shim_process import Opener, Process
from roost.daemon.processes.shim_link import KEEP, SHIM_HELLO_TIMEOUT, ShimError, ShimLink, ShimRecord, handshake, token_hash
from roost.drivers.base import Launch
from roost.hosts.link import HostDown, Link, last_line
from roost.hosts.remote_shim import GONE, NOT_STARTED
from roost.proctree import WorkerTree
from roost.protocol import MAX_FRAME
from roost.rules.host_loss import after_failed_try, shim_alone_after

log = logging.getLogger(__name__)

#: How long signalling a remote tree may take (a session over the master).
SIGNAL_TIMEOUT = 15.0


class ShimGone(ShimError):
    """The host answers, and no shim listens at the worker's socket there: the worker is gone."""


@dataclass(frozen=True)
class RemoteTree(WorkerTree):
    """A worker's tree on a host: signalled there, over the master (its pids are the host's)."""

    link: Any = dataclasses.field(default=None, compare=False)
    command: tuple[str, ...] = ()
    tree_path: str = ""

    def members(self, table: Any, session_known: bool = False) -> dict[int, int]:
        """None here: its pids name processes of the host, never of this machine."""
        return {}

    def kill_now(self, deadline: float = 5.0) -> bool:
        return True  # nothing of it runs here (``end`` reaches the host)

    def signal(self, sig: int, session_known: bool = False) -> int:
        """Signal the tree there (in the background: a session over the master)."""
        if self.link is not None and self.link.up:
            self.link.keep(self._signal(sig))
        return 1

    async def _signal(self, sig: int) -> None:
        rc, _, err = await self.link.run(shlex.join([*self.command, "--signal", self.tree_path, str(sig)]),
                                         timeout=SIGNAL_TIMEOUT)
        if rc != 0:
            log.warning("job %s: cannot signal its worker on host %s: %s", self.job, self.link.host.name,
                        last_line(err) or f"exit {rc}")

    async def end(self, grace: float, deadline: float = 5.0, session_known: bool = False) -> bool:
        """End the tree there; True when the host is out of reach (nothing can be done from here:
        the job's next start there ends what is left)."""
        if self.link is None or not self.link.up:
            return True
        for _ in range(2):  # a master that dropped meanwhile: once more over a new one
            rc, _, _ = await self.link.run(shlex.join([*self.command, "--signal", self.tree_path, "0"]),
                                           timeout=SIGNAL_TIMEOUT)
            if rc != 255:
                return rc == 0
            try:
                await self.link.ensure()
            except HostDown:
                break
        return True


@dataclass
class Connector:
    """Opens connections to one worker's shim on its host, the first and, after a drop, again."""

    link: Link
    command: tuple[str, ...]
    socket_path: str
    lost_after: Callable[[], float]
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Any] = asyncio.sleep

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, dict[str, Any]]:
        """A session over the master relaying the shim's socket, and the shim's hello; ShimGone when
        the host said no shim listens there, ShimError (ssh's words) when the host is not reached."""
        here, there = socket.socketpair()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.link.session(shlex.join([*self.command, "--relay", self.socket_path])),
                stdin=there.fileno(), stdout=there.fileno(), stderr=asyncio.subprocess.PIPE, start_new_session=True)
        finally:
            there.close()
        reader, writer = await asyncio.open_unix_connection(sock=here, limit=MAX_FRAME + (1 << 16))
        try:
            hello = await handshake(reader, writer, SHIM_HELLO_TIMEOUT)
        except ShimError as exc:
            if proc.returncode is None:
                try:
                    await asyncio.wait_for(proc.wait(), SHIM_HELLO_TIMEOUT)
                except asyncio.TimeoutError:
                    proc.kill()
            assert proc.stderr is not None
            err = (await proc.stderr.read()).decode(errors="replace")
            rc = await proc.wait()
            if rc == GONE:
                raise ShimGone(f"its worker on {self.link.host.name} is gone ({last_line(err)})") from None
            raise ShimError(self.link.explain(err) if rc == 255 else last_line(err) or str(exc)) from None
        self.link.keep(_drain(proc))
        return reader, writer, hello

    async def again(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, dict[str, Any]]:
        """The link dropped: try again, with back-off, until the shim answers; ShimError with the
        reason when its worker is gone there, or the host stayed out of reach ``host_lost_after``."""
        host = self.link.host.name
        since, attempt = self.clock(), 0
        log.warning("host %s: a worker's link dropped; trying again for %gs", host, self.lost_after())
        while True:
            try:
                await self.link.verify()
                await self.link.ensure()
                return await self.open()
            except ShimGone as exc:
                raise ShimError(f"{exc}: it ended while the link to {host} was down, or the host restarted; "
                                f"a message resumes the job from its session") from None
            except (HostDown, ShimError, OSError) as exc:
                why = str(exc)
            verdict = after_failed_try(host, since, self.clock(), self.lost_after(), attempt, why)
            if verdict.reason:
                raise ShimError(verdict.reason)
            await self.sleep(verdict.wait)
            attempt += 1


async def _drain(proc: asyncio.subprocess.Process) -> None:
    """Read what a relay's ssh says (nobody needs it once connected) and reap it."""
    assert proc.stderr is not None
    while await proc.stderr.read(1 << 12):
        pass
    await proc.wait()


def remote_opener(link: Link, command: tuple[str, ...], setup_path: str, shim_path: str,
                  lost_after: Callable[[], float]) -> Opener:
    """An opener that starts the job's worker under a shim on ``link``'s host (``command`` runs roost's
    far side there) and connects to it."""
    socket_path = setup_path.removesuffix(".json") + ".sock"

    async def open_remote(job_id: str, launch: Launch) -> Process:
        try:
            await link.ensure()
            rc, out, err = await link.run(shlex.join([*command, "--shim", setup_path, shim_path, socket_path, str(KEEP),
                                                      str(MAX_FRAME), str(shim_alone_after(lost_after()))]))
        except HostDown as exc:
            raise ShimError(str(exc)) from None
        if rc != 0:
            raise ShimError(link.explain(err) if rc == 255 else last_line(err) or
                            f"the worker's launcher on {link.host.name} exited {rc}" +
                            (" (not started)" if rc == NOT_STARTED else ""))
        try:
            info = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ShimError(f"host {link.host.name}: the worker's launcher said {last_line(out)!r}") from None
        tree = RemoteTree(job=job_id, pid=int(info["pid"]), start=int(info["start"]), floor=int(info["floor"]),
                          mark=str(info["mark"]), boot=str(info["boot"]), link=link, command=command,
                          tree_path=socket_path.removesuffix(".sock") + ".tree")
        connector = Connector(link, command, socket_path, lost_after)
        try:
            reader, writer, hello = await connector.open()
        except ShimError:
            await tree.end(grace=0)
            raise
        shim = ShimLink(reader, writer, hello, 0, reconnect=connector.again, place=link.host.name)
        record = ShimRecord(tree, int(info["shim_pid"]), int(info["shim_start"]), socket_path,
                            token_hash(launch.env.get("ROOST_TOKEN", "")), False)
        return Process(shim.worker_pid, tree, record, shim, remote=True)

    return open_remote
