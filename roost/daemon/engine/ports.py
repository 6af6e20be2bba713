"""What the handlers see of the engine: the one ``Protocol`` every transition module is written
against, so none of them imports the engine itself (roost/daemon/engine/core.py implements it and
imports them; tests/test_layout.py keeps the import graph free of cycles)."""

from __future__ import annotations

import asyncio
import collections
import itertools
from pathlib import Path
from typing import Any, Awaitable, Callable, Coroutine, Iterable, Protocol

from roost.config import Config
from roost.daemon.engine.book import Book
from roost.daemon.engine.journal import Journal
from roost.daemon.engine.messages import Message, WorkerMessage
from roost.daemon.engine.run_queue import RunQueue
from roost.daemon.engine.slot import Hold, Slot, Turn, WorkerHandle
from roost.daemon.processes.launch import AdoptFactory, WorkerFactory
from roost.daemon.storage.index import JobIndex
from roost.daemon.storage.store import Store
from roost.models import Job, State
from roost.rules.lifecycle import WorkerFacts


class EngineApi(Protocol):
    """The engine's state and the calls a handler makes: writes go to the batch's transaction,
    effects (tasks, posts, kills) run once it is committed."""

    store: Store
    index: JobIndex
    slots: dict[str, Slot]
    inbox: collections.Counter[str]
    queue: RunQueue
    approvals: Book
    journal: Journal
    closing_down: bool
    teardowns: dict[str, str]
    #: Each provider account's known rate limit (roost/daemon/engine/limits.py ``account``).
    accounts: dict[str, Hold]
    #: When each tree's recent spawns were (root -> monotonic times; roost/daemon/engine/spawn.py).
    spawn_times: dict[str, collections.deque[float]]
    runs: itertools.count[int]
    make_worker: WorkerFactory
    #: Makes the handle of a worker a past daemon left running (None: nothing re-adopts, a test's engine).
    adopt_worker: AdoptFactory | None
    host_socket: Callable[[str], Path] | None
    #: Readies a job's worker on its host (roost/hosts/placement.py, given by the supervisor): the
    #: reason it cannot be, or None.
    prepare_host: Callable[[str, WorkerHandle], Awaitable[str | None]]
    clock: Callable[[], float]
    monotonic: Callable[[], float]

    @property
    def config(self) -> Config: ...

    def post(self, job_id: str, message: Message) -> None: ...
    def spawn_task(self, coro: Coroutine[Any, Any, Any], bounded: bool = False) -> None: ...
    def effect(self, run: Callable[[], None]) -> None: ...
    def undo(self, back: Callable[[], None]) -> None: ...
    def pump(self) -> None: ...
    def settle(self, fut: asyncio.Future[Any] | None, value: Any = None, error: BaseException | None = None) -> None: ...
    def answer_turn(self, turn: Turn, value: dict[str, Any]) -> None: ...
    def timeline(self, job: Job, kind: str, **data: Any) -> dict[str, Any]: ...
    def add_message(self, job_id: str, text: str) -> None: ...
    def take_message(self, job_id: str, msg_id: int) -> None: ...
    def put_back_message(self, job_id: str, msg_id: int) -> None: ...
    def drop_messages(self, job_id: str) -> None: ...
    def save(self, job: Job) -> None: ...
    def save_quietly(self, job: Job) -> None: ...
    def changed(self, ids: Iterable[str]) -> None: ...
    def set_state(self, job: Job, state: State, kind: str, **data: Any) -> None: ...
    def kids_changed(self, job: Job) -> None: ...
    def current(self, job: Job, msg: WorkerMessage) -> Slot | None: ...
    def last_error(self, job: Job) -> str: ...
    def recheck_parent(self, job: Job) -> None: ...
    def facts(self, job: Job) -> WorkerFacts: ...
