"""A job's record is written once per batch (issue 19): many events of one job in one drain save its
record once, before the commit, and a message whose savepoint fails is still undone alone — what is
written is what the kept messages made, and memory equals the store after the commit."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from roost.config import Config
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=100, max_running_jobs=0)
#: Events posted in one go, so one batch applies them all.
BURST = 40


class Watched:
    """Wraps a store's SQLite connection: counts the writes of job records, and while ``fail_at`` is
    set, fails that timeline insert (counted from when it was set) as a full disk does."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.saves = 0
        self.inserts = 0
        self.fail_at: int | None = None

    def execute(self, sql: str, *args: Any) -> Any:
        words = " ".join(sql.split()).upper()
        if words.startswith("INSERT INTO JOBS"):
            self.saves += 1
        if words.startswith("INSERT INTO TIMELINE (") and self.fail_at is not None:
            self.inserts += 1
            if self.inserts == self.fail_at:
                raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


@pytest.fixture
async def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, CFG)


def watch(rig: Rig) -> Watched:
    watched = Watched(rig.store._db)
    rig.store._db = watched  # type: ignore[assignment]
    return watched


def stored(rig: Rig, job_id: str) -> dict[str, Any]:
    return rig.store.records([job_id])[job_id].to_dict()


def texts(rig: Rig, job_id: str) -> list[str]:
    return [e["data"]["text"] for e in rig.store.timeline_page(job_id, limit=2000)["entries"] if e["kind"] == "text"]


async def test_a_burst_of_text_saves_the_record_once(rig: Rig) -> None:
    job_id = await rig.spawn("work")
    worker = rig.worker(job_id)
    watched = watch(rig)
    for n in range(BURST):
        worker.on_event({"type": "text", "text": f"piece {n}\n", "continues": True})
    await rig.settle()
    assert watched.saves == 1, watched.saves
    assert texts(rig, job_id) == [f"piece {n}\n" for n in range(BURST)]
    assert stored(rig, job_id) == rig.job(job_id).to_dict()
    assert rig.job(job_id).last_text.endswith(f"piece {BURST - 1}\n")


async def test_a_failed_savepoint_in_the_burst_undoes_that_event_alone(rig: Rig) -> None:
    """The 10th event's timeline insert fails: the nine before it are committed, with the record as
    they left it (not as the failed one did); the failed one and those behind it wait, and are applied
    in order once the store takes writes."""
    job_id = await rig.spawn("work")
    worker = rig.worker(job_id)
    watched = watch(rig)
    watched.fail_at = 10
    for n in range(BURST):
        worker.on_event({"type": "text", "text": f"piece {n}\n", "continues": True})
    await rig.settle()
    assert texts(rig, job_id) == [f"piece {n}\n" for n in range(9)]
    assert job_id in rig.sup.engine.stalled
    assert rig.job(job_id).last_text.endswith("piece 8\n")
    assert stored(rig, job_id) == rig.job(job_id).to_dict()
    assert watched.saves == 1
    watched.fail_at = None
    rig.sup.engine.retry_stalled()
    await rig.settle()
    assert texts(rig, job_id) == [f"piece {n}\n" for n in range(BURST)]
    assert stored(rig, job_id) == rig.job(job_id).to_dict()
    assert rig.job(job_id).last_text.endswith(f"piece {BURST - 1}\n")


async def test_a_failed_commit_writes_nothing_and_puts_memory_back(rig: Rig) -> None:
    job_id = await rig.spawn("work")
    worker = rig.worker(job_id)
    before = stored(rig, job_id)
    watched = watch(rig)
    real = watched.execute

    def no_commit(sql: str, *args: Any) -> Any:
        if " ".join(sql.split()).upper() == "COMMIT":
            raise sqlite3.OperationalError("database or disk is full")
        return real(sql, *args)

    watched.execute = no_commit  # type: ignore[method-assign]
    for n in range(BURST):
        worker.on_event({"type": "text", "text": f"piece {n}\n"})
    await rig.settle()
    assert stored(rig, job_id) == before == rig.job(job_id).to_dict()
    assert texts(rig, job_id) == []
    watched.execute = real  # type: ignore[method-assign]
    rig.sup.engine.retry_stalled()
    await rig.settle()
    assert texts(rig, job_id) == [f"piece {n}\n" for n in range(BURST)]
    assert stored(rig, job_id) == rig.job(job_id).to_dict()


async def test_a_workers_step_is_committed_whole_with_its_seq_and_snapshot_or_not_at_all(rig: Rig) -> None:
    """One line of pi's may give several events (a text and its call's usage): they are one message,
    so a store that refuses the second refuses the first and the line's seq with them, and a daemon
    re-adopting the worker then gets the whole line again; never the first twice nor the second lost."""
    job_id = await rig.spawn("work")
    worker = rig.worker(job_id)
    acks: list[int] = []
    worker.ack = acks.append  # type: ignore[attr-defined]
    worker.line_seq, worker.adapter_state = 7, {"run": 1, "said": "two"}  # type: ignore[attr-defined]
    watched = watch(rig)
    watched.fail_at = 2  # the second event's timeline entry hits a full disk
    worker.on_event([{"type": "text", "text": "one\n"}, {"type": "text", "text": "two\n"}])
    await rig.settle()
    assert texts(rig, job_id) == [] and acks == []
    live = stored(rig, job_id)["live"] or {}
    assert live.get("seq", 0) == 0 and "adapter" not in live
    watched.fail_at = None
    rig.sup.engine.retry_stalled()
    await rig.settle()
    assert texts(rig, job_id) == ["one\n", "two\n"] and acks == [7]
    live = stored(rig, job_id)["live"]
    assert live["seq"] == 7 and live["adapter"] == {"run": 1, "said": "two"}
