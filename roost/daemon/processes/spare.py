"""Spare workers: built-in agent processes started ahead of any job, past their imports and
waiting on stdin, so that a spawn (or a resume) does not wait for Python and asyncio to load,
which is most of a worker's start (docs/performance.md, "Spawn -> ready").

``Spares`` keeps ``spare_workers`` of them for the default driver's profile, when that driver has
spares (``Driver.spare``: the built-in agent) and its jobs run here without worktrees. Each is a
process like any worker's: a session of its own, a mark, its tree written down under
``state/workers/`` (so a daemon killed by SIGKILL leaves none: the next one's recovery kills it),
and it counts as ready once it answered get_state. They hold no place under ``max_running_jobs``.

A job's start takes one (``Spares.open``, the job's worker's opener) when the job is on this
machine, has no worktree of its own, its profile is the one the spares were started for, its cwd
exists, and its environment is the spare's plus variables that fit in the room the spare kept at
the end of its environment. The tree's record becomes the job's, a ``bind`` command hands the
process the job's session, cwd and variables, and it goes on as a fresh launch would have; a new
spare starts behind it. Anything else, and a spare that died or never answered, gets a fresh
launch. A spare that dies before a job took it is replaced at once the first time, then after 1,
2, 4 ... seconds, up to BACKOFF_MAX, while they keep dying (said once in the daemon log), until a
job takes one again.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Coroutine

from roost.config import Config, ConfigError, DriverProfile
from roost.daemon.processes.process import PIPE_GRACE
from roost.daemon.processes.shim_link import token_hash
from roost.daemon.processes.shim_process import Process, know_shim, open_process, save_record
from roost.drivers import driver_for
from roost.drivers.base import Launch, LaunchContext
from roost.models import Job
from roost.paths import Paths
from roost.proctree import MARK_VAR, record_path
from roost.protocol import encode
from roost.worker_protocol import describe_exit

log = logging.getLogger("roost.daemon")

#: The variable that keeps room at the end of a spare's environment block for its job's variables
#: (the bound process writes them there, so /proc/PID/environ names its job), and how many bytes.
ROOM_VAR = "ROOST_SPARE_ROOM"
ROOM = 256
#: The longest wait before the next spare while they keep dying.
BACKOFF_MAX = 60.0
#: Lines of a spare's stderr kept to say why it died, and how long each may be.
STDERR_KEEP = 5
STDERR_LINE = 500


def backoff(failures: int) -> float:
    """Seconds before the next spare after ``failures`` died in a row: none after the first, then
    1, 2, 4 ... up to BACKOFF_MAX."""
    return 0.0 if failures <= 1 else min(BACKOFF_MAX, 2.0 ** (failures - 2))


def room_env() -> dict[str, str]:
    """What a spare's environment ends with: ``ROOM_VAR=xx...`` and its NUL take ROOM bytes."""
    return {ROOM_VAR: "x" * (ROOM - len(ROOM_VAR) - 2)}


def bind_frame(base: dict[str, str], launch: Launch, mark: str) -> dict[str, Any] | None:
    """The command that turns a spare, whose environment is ``base`` (its mark in it, the room not),
    into the worker ``launch`` would have started; None when it cannot be: the launch's environment
    (with the spare's mark) must hold all of ``base`` unchanged, and what it adds must fit in ROOM."""
    env = {**launch.env, MARK_VAR: mark}
    if launch.session is None or any(env.get(key) != value for key, value in base.items()):
        return None
    added = {key: value for key, value in env.items() if key not in base}
    if sum(len(os.fsencode(key)) + len(os.fsencode(value)) + 2 for key, value in added.items()) > ROOM:
        return None
    return {"type": "bind", "session": launch.session, "cwd": launch.cwd, "env": added, "unset": [ROOM_VAR]}


def profile_key(profile: DriverProfile) -> tuple[str, Any]:
    """What a worker's launch depends on in its profile: two profiles alike here share spares."""
    return profile.kind, profile.options


def _is_spare(line: Any) -> bool:
    """Whether a line is a spare's answer to get_state."""
    try:
        answer = json.loads(line) if isinstance(line, bytes) else None
    except ValueError:
        return False
    return isinstance(answer, dict) and isinstance(answer.get("data"), dict) and answer["data"].get("spare") is True


@dataclass
class Plan:
    """How many spares the config asks for, of which profile, started how."""

    count: int = 0
    key: tuple[str, Any] | None = None
    launch: Launch | None = None
    ready_timeout: float = 0.0


@dataclass(eq=False)
class Spare:
    process: Process
    #: Its environment as started, without the room: what a job's must hold.
    base: dict[str, str]
    record: Path
    #: True once it answered get_state; False when it died or never answered.
    ready: asyncio.Future[bool]
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=STDERR_KEEP))
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    on_exit: Callable[[asyncio.Future[int]], None] | None = None
    #: Killed on purpose (a reload, the shutdown): its end is no failure.
    dropped: bool = False
    #: Why it was killed, when it was for not answering.
    why: str = ""
    gone: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def answered(self) -> bool:
        return self.ready.done() and self.ready.result()


class Spares:
    def __init__(self, paths: Paths, config: Callable[[], Config]) -> None:
        self.paths = paths
        self._config = config
        #: Waiting for a job, ready or still starting; and given to a job's start, not yet bound.
        self.idle: list[Spare] = []
        self.taken: list[Spare] = []
        self.key: tuple[str, Any] | None = None
        self.failures = 0
        self.closed = False
        self._retry: asyncio.TimerHandle | None = None
        self._retry_at = 0.0
        self._opening: set[asyncio.Task[None]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- what the config asks for --------------------------------------------------------------------
    def _plan(self) -> Plan:
        config = self._config()
        try:
            profile = config.driver(config.default_driver)
        except ConfigError:
            return Plan()
        if config.spare_workers == 0 or profile.host or profile.worktree:
            return Plan()
        driver = driver_for(profile.kind)
        ctx = LaunchContext(socket=self.paths.socket, token="", sessions_dir=self.paths.sessions_dir,
                            state_dir=self.paths.state_dir, options=profile.options)
        launch = driver.spare(ctx)
        if launch is None:
            return Plan()
        return Plan(config.spare_workers, profile_key(profile), launch, driver.ready_timeout)

    def start(self) -> None:
        """Once the loop runs: start the spares the config asks for."""
        self.key = self._plan().key
        self._fill()

    def config_changed(self) -> None:
        """A reload: spares of a profile that changed (or that no longer has spares) are dropped and
        new ones started; fewer asked for, the extra are dropped."""
        plan = self._plan()
        if plan.key != self.key:
            self.key, self.failures = plan.key, 0
            self._cancel_retry()
            self._drop(list(self.idle))
        elif len(self.idle) > plan.count:
            self._drop(self.idle[plan.count:])
        self._fill()

    def serves(self, job: Job, profile: DriverProfile) -> bool:
        """Whether the job's start may take a spare (``open`` still checks its launch)."""
        return not self.closed and self.key is not None and not job.host and not job.worktree and \
            profile_key(profile) == self.key

    # -- a job's start ------------------------------------------------------------------------------------
    async def open(self, job_id: str, launch: Launch) -> Process:
        """The job's worker process: a spare bound to it when one fits, else a fresh launch."""
        spare, frame = self._take(launch)
        if spare is not None and frame is not None:
            if await asyncio.shield(spare.ready) and spare in self.taken and not spare.process.exited.done():
                return self._hand_over(spare, job_id, launch, frame)
            if spare in self.taken:
                self.taken.remove(spare)
                self._drop([spare])
        return await open_process(job_id, launch)

    def _take(self, launch: Launch) -> tuple[Spare | None, dict[str, Any] | None]:
        if not os.path.isdir(launch.cwd):  # a fresh launch says what is wrong with it
            return None, None
        for spare in sorted(self.idle, key=lambda s: not s.answered):  # a ready one first
            frame = bind_frame(spare.base, launch, spare.process.tree.mark)
            if frame is None:  # they differ in their marks only: none fits
                return None, None
            self.idle.remove(spare)
            self.taken.append(spare)
            self._fill()
            return spare, frame
        return None, None

    def _hand_over(self, spare: Spare, job_id: str, launch: Launch, frame: dict[str, Any]) -> Process:
        """The spare's process becomes the job's: its tree recorded as the job's (then the spare's
        record goes), nobody else reading its pipes, and the bind on its stdin."""
        self.taken.remove(spare)
        assert spare.on_exit is not None
        spare.process.exited.remove_done_callback(spare.on_exit)
        for task in spare.tasks:
            task.cancel()
        tree = dataclasses.replace(spare.process.tree, job=job_id)
        record = dataclasses.replace(spare.process.record, tree=tree,
                                     token_hash=token_hash(launch.env.get("ROOST_TOKEN", "")),
                                     adoptable=launch.adoptable)
        know_shim(record.shim_pid, record.shim_start, job_id)  # its processes are the job's from now on
        if launch.record is not None and save_record(record, launch.record):
            spare.process.link.keep()  # a job's worker, written down: it outlives the daemon
        spare.record.unlink(missing_ok=True)
        spare.process.link.write(encode(frame))
        self.failures = 0
        return dataclasses.replace(spare.process, tree=tree, record=record)

    # -- starting, losing and dropping spares -------------------------------------------------------
    def _fill(self) -> None:
        if self.closed or self._retry is not None:
            return
        plan = self._plan()
        if plan.key != self.key or plan.launch is None:
            return
        while len(self.idle) + len(self._opening) < plan.count:
            self._opening.add(asyncio.get_running_loop().create_task(self._start_one(plan)))

    async def _start_one(self, plan: Plan) -> None:
        """One more spare; it leaves ``_opening`` in the same step as it joins ``idle`` (or fails), so
        a take in between cannot find neither and start none."""
        assert plan.launch is not None and plan.key is not None
        record = record_path(self.paths.state_dir, f"spare-{secrets.token_hex(6)}")
        launch = dataclasses.replace(plan.launch, record=record)
        try:
            process: Process | None = await open_process("spare", launch, room_env(), ephemeral=True)
        except OSError as exc:
            process, error = None, exc
        self._opening.discard(asyncio.current_task())  # type: ignore[arg-type]
        if process is None:
            record.unlink(missing_ok=True)
            self._failed(f"could not start: {error}", [])
            return
        spare = Spare(process, {**launch.env, MARK_VAR: process.tree.mark}, record,
                      asyncio.get_running_loop().create_future())
        spare.on_exit = lambda fut: self._exited(spare, fut)
        process.exited.add_done_callback(spare.on_exit)
        process.link.on_stderr = lambda data: self._stderr(spare, data)
        spare.tasks = [asyncio.create_task(self._answer(spare, plan.ready_timeout))]
        self.idle.append(spare)
        if plan.key != self.key:  # the config changed while it started
            self._drop([spare])

    async def _answer(self, spare: Spare, timeout: float) -> None:
        """Ready once it answers get_state as a spare; killed, saying why, when it answers anything
        else, closes its stdout and lives on, or does not answer within ``timeout``."""
        spare.process.link.write(encode({"type": "get_state", "id": "spare"}))
        try:
            got = await asyncio.wait_for(spare.process.link.next_line(), timeout)
            line = got[1] if got is not None else None
        except asyncio.TimeoutError:
            why = f"did not answer get_state within {timeout:.0f}s"
        else:
            if _is_spare(line):
                if not spare.ready.done():
                    spare.ready.set_result(True)
                return
            if line is None:  # its stdout ended: most likely it did, and its exit says how
                await asyncio.wait({spare.process.exited}, timeout=1.0)
                if spare.process.exited.done():
                    return
            why = "closed its stdout without answering get_state" if line is None else \
                f"answered get_state with {repr(line)[:200]}"
        spare.why = why
        spare.process.tree.signal(signal.SIGKILL)

    @staticmethod
    def _stderr(spare: Spare, data: bytes) -> None:
        """Its stderr until a job takes it, kept only to say why it died."""
        spare.tail.extend(text[:STDERR_LINE] for line in data.splitlines()
                              if (text := line.decode(errors="replace").rstrip()))

    def _exited(self, spare: Spare, fut: asyncio.Future[int]) -> None:
        if not spare.ready.done():
            spare.ready.set_result(False)
        for where in (self.idle, self.taken):
            if spare in where:
                where.remove(spare)
        self._spawn(self._lost(spare, fut.result()))

    async def _lost(self, spare: Spare, returncode: int) -> None:
        """Its last stderr lines read, whatever is left of its tree killed, its pipes closed and its
        record gone; then, unless it was dropped on purpose, a failure (and the next spare)."""
        _, late = await asyncio.wait(spare.tasks, timeout=PIPE_GRACE)
        for task in late:
            task.cancel()
        await spare.process.tree.end(grace=0, session_known=True)
        spare.process.link.release()
        spare.record.unlink(missing_ok=True)
        spare.gone.set()
        if not spare.dropped and not self.closed:
            self._failed(spare.why or describe_exit(returncode), list(spare.tail))

    def _failed(self, reason: str, tail: list[str]) -> None:
        self.failures += 1
        if self.failures == 1:
            log.warning("spare worker %s%s; another starts now, and while they keep dying each waits longer "
                        "(up to %.0fs) until a job takes one", reason, ": " + " | ".join(tail) if tail else "",
                        BACKOFF_MAX)
        delay = backoff(self.failures)
        if delay > 0:
            self._cancel_retry()
            self._retry_at = time.monotonic() + delay
            self._retry = asyncio.get_running_loop().call_later(delay, self._retry_now)
        self._fill()

    def _retry_now(self) -> None:
        self._retry = None
        self._fill()

    def _cancel_retry(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def _drop(self, spares: list[Spare]) -> None:
        for spare in spares:
            if spare in self.idle:
                self.idle.remove(spare)
            spare.dropped = True
            spare.process.tree.signal(signal.SIGKILL)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """At shutdown: kill every spare (a start under way first finishes), and wait until they are gone."""
        self.closed = True
        self._cancel_retry()
        if self._opening:
            await asyncio.wait(set(self._opening), timeout=5.0)
        spares = [*self.idle, *self.taken]
        self.taken.clear()
        self._drop(spares)
        if spares:
            try:
                await asyncio.wait_for(asyncio.gather(*(s.gone.wait() for s in spares)), 5.0)
            except asyncio.TimeoutError:
                left = sum(not spare.gone.is_set() for spare in spares)
                log.error("shutdown: %d spare workers were not gone within 5s", left)

    def status(self) -> dict[str, Any]:
        """What `roost daemon status` may show: the spares by pid, and the back-off while they keep dying."""
        waiting = self._retry_at - time.monotonic() if self._retry is not None else None
        return {"wanted": self._plan().count if not self.closed else 0,
                "ready": [s.pid for s in self.idle if s.answered],
                "starting": [s.pid for s in self.idle if not s.answered], "opening": len(self._opening),
                "failures": self.failures, "retry_in": round(max(0.0, waiting), 3) if waiting is not None else None}  # 0: due, not run yet
