"""In-process fakes for the engine's tests: a clock that moves when told, a worker that answers as
a test scripts it, and a publisher that records what would be pushed. The store is the real one."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roost.config import Config
from roost.daemon.storage.store import Store
from roost.daemon.supervisor import Supervisor
from roost.daemon.processes.launch import Made
from roost.models import Job
from roost.paths import Paths


class FakeClock:
    """Wall and monotonic time that only move when a test says so."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def wall(self) -> float:
        return self.now

    def mono(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeWorker:
    """Answers get_state and prompts at once; its turns end when the test calls ``end_turn``."""

    pids = itertools.count(40_000)

    def __init__(self, job: Job, on_event: Any, on_exit: Any) -> None:
        self.job = job
        self.on_event = on_event
        self.on_exit = on_exit
        self.pid: int | None = None
        self.closing = False
        self.prompts: list[tuple[int, str]] = []
        self.steers: list[str] = []
        self.aborts = 0
        #: Set, an abort is answered only once the event is set (a real agent may take its time).
        self.abort_gate: asyncio.Event | None = None
        #: Set, a prompt is answered only once the event is set (a worker slow to take it).
        self.prompt_gate: asyncio.Event | None = None
        self.exited = False
        #: In a turn it began by itself (``begin_own_turn``), which ends as ``own``, not by a run.
        self.own = False
        #: Every command it was sent, in order (kind and fields), and the approval answers among them.
        self.commands: list[tuple[str, dict[str, Any]]] = []
        self.answers: list[dict[str, Any]] = []

    async def start(self) -> None:
        self.pid = next(self.pids)

    async def request(self, kind: str, timeout: float, **fields: Any) -> dict[str, Any]:
        if self.exited:
            raise ConnectionError("worker exited")
        self.commands.append((kind, fields))
        if kind == "approval_answer":
            self.answers.append(fields)
        if kind == "prompt":
            self.prompts.append((fields["run"], fields["message"]))
            if self.prompt_gate is not None:
                await self.prompt_gate.wait()
        elif kind == "steer":
            self.steers.append(fields["message"])
        elif kind == "abort":
            self.aborts += 1
            if self.abort_gate is not None:
                await self.abort_gate.wait()
            if self.own and not self.exited:
                self.end_own_turn("aborted")
            elif self.prompts and not self.exited:
                self.on_event({"type": "turn_end", "run": self.prompts[-1][0], "outcome": "aborted"})
        return {"type": "response", "success": True, "data": {}}

    def end_turn(self, outcome: str = "ok", text: str = "") -> None:
        if text:
            self.on_event({"type": "text", "text": text})
        self.on_event({"type": "turn_end", "run": self.prompts[-1][0], "outcome": outcome})

    def ask(self, approval: str, command: str = "echo hi > f", tool: str = "shell", **more: Any) -> None:
        """The agent asks for permission to run ``command``."""
        self.on_event({"type": "approval", "approval": approval, "tool": tool,
                       "what": {"command": command, "cwd": "/repo"}, **more})

    def begin_own_turn(self) -> None:
        """A turn nobody prompted (Claude Code taking in a background subagent's result)."""
        self.own = True
        self.on_event({"type": "turn_start", "own": True})

    def end_own_turn(self, outcome: str = "ok", text: str = "", **fields: Any) -> None:
        self.own = False
        if text:
            self.on_event({"type": "text", "text": text})
        self.on_event({"type": "turn_end", "run": None, "own": True, "outcome": outcome, **fields})

    async def close(self, grace: float = 3.0) -> None:
        self.commands.append(("close", {}))
        self.closing = True
        self.exit(0)

    def kill(self) -> None:
        self.exit(-9)

    def exit(self, returncode: int) -> None:
        if not self.exited:
            self.exited = True
            asyncio.get_running_loop().create_task(self.on_exit(returncode, []))


class FullDisk:
    """Wraps a store's SQLite connection: while ``full``, every commit fails as SQLite's does on a
    full disk; while ``timeline_full``, so does every statement that adds a timeline entry (one
    message's savepoint fails, not the batch)."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.full = False
        self.timeline_full = False

    def execute(self, sql: str, *args: Any) -> Any:
        words = " ".join(sql.split()).upper()
        if (self.full and words == "COMMIT") or (self.timeline_full and words.startswith("INSERT INTO TIMELINE")):
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    @classmethod
    def under(cls, store: Store) -> "FullDisk":
        """Put one under ``store``."""
        disk = cls(store._db)
        store._db = disk  # type: ignore[assignment]
        return disk


@dataclass
class Recorder:
    """Stands in for the publisher: what would have been pushed."""

    rows: list[set[str]] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)

    def rows_changed(self, ids: Any) -> None:
        self.rows.append(set(ids))

    def timeline(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)


class Rig:
    """A supervisor on a real store in a temp dir, fake workers and a fake clock."""

    def __init__(self, tmp: Path, config: Config, adopt: Any = None) -> None:
        """``adopt``: the engine's ``adopt_worker`` (a later daemon that re-adopts workers)."""
        self.clock = FakeClock()
        self.config = config
        self.workers: dict[str, list[FakeWorker]] = {}
        self.recorder = Recorder()
        self.paths = Paths(tmp / "config", tmp / "state", tmp / "run")
        self.paths.ensure()
        self.store = Store(self.paths.store)
        self.sup = Supervisor(self.store, self.paths, lambda: self.config, clock=self.clock.wall,
                              monotonic=self.clock.mono, make_worker=self._make,
                              publisher=self.recorder)  # type: ignore[arg-type]
        self.sup.engine.adopt_worker = adopt
        self.sup.recover()
        self.sup.start()

    def _make(self, job: Job, token: str, on_event: Any, on_exit: Any) -> Made:
        worker = FakeWorker(job, on_event, on_exit)
        self.workers.setdefault(job.id, []).append(worker)
        return Made(worker=worker, ready_timeout=5.0, session=None)

    def worker(self, job_id: str) -> FakeWorker:
        return self.workers[job_id][-1]

    def job(self, job_id: str) -> Job:
        job = self.sup.index.get(job_id)
        assert job is not None
        return job

    def state(self, job_id: str) -> str:
        return self.job(job_id).state.value

    async def settle(self) -> None:
        """Let every effect task run to its end (nothing here waits on real time)."""
        for _ in range(20):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.sup.engine.fire_due()
        await self.settle()

    async def spawn(self, prompt: str = "work", caller: str | None = None, **args: Any) -> str:
        row = await self.sup.spawn({"prompt": prompt, "cwd": str(self.paths.state_dir), **args}, caller)
        await self.settle()
        return row["id"]

    def kinds(self, job_id: str) -> list[str]:
        return [e["kind"] for e in self.store.timeline_page(job_id, limit=2000)["entries"]]
