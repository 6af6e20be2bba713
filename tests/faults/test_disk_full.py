"""A store that takes no writes (a full disk): nobody is told "internal", no job keeps claiming
what is not true, and what waits goes ahead once the disk frees (issue 9, item 6)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from roost.client import ClientError
from roost.config import Config
from roost.protocol import ProtocolError
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=100, max_running_jobs=0)


class FullDisk:
    """Wraps the store's SQLite connection: while ``full``, every commit fails as SQLite's does
    on a full disk (the real-disk test below does it with a tmpfs)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.full = False

    def execute(self, sql: str, *args: Any) -> Any:
        if self.full and sql.strip().upper() == "COMMIT":
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


@pytest.fixture
async def rig(tmp_path: Path) -> tuple[Rig, FullDisk]:
    rig = Rig(tmp_path, CFG)
    disk = FullDisk(rig.store._db)
    rig.store._db = disk  # type: ignore[assignment]
    return rig, disk


async def test_a_turn_that_ends_on_a_full_disk_is_saved_once_the_disk_frees(rig: tuple[Rig, FullDisk]) -> None:
    rig_, disk = rig
    job = await rig_.spawn("work")
    disk.full = True
    rig_.worker(job).end_turn(text="finished")
    await rig_.settle()
    assert job in rig_.sup.engine.unsaved and "state directory is full" in rig_.sup.engine.unsaved[job]
    stored = {j.id: j for j in rig_.store.jobs()}[job]
    assert stored.state.value == "working", "nothing of the failed change was kept"
    with pytest.raises(ProtocolError) as info:
        await rig_.sup.send(job, "next", None)
    assert info.value.code == "store" and "state directory is full" in info.value.message
    rig_.sup.engine.retry_unsaved()  # still full: it stays on the list
    await rig_.settle()
    assert job in rig_.sup.engine.unsaved
    disk.full = False
    rig_.sup.engine.retry_unsaved()
    await rig_.settle()
    assert not rig_.sup.engine.unsaved
    stored = {j.id: j for j in rig_.store.jobs()}[job]
    assert stored.state.value == "idle" and stored.last_text == "finished"
    assert any("saved again" in e["data"].get("message", "") for e in rig_.store.timeline_page(job)["entries"])
    assert (await rig_.sup.send(job, "next", None))["outcome"] == "delivered"


async def test_a_spawn_on_a_full_disk_says_so_and_leaves_no_job_behind(rig: tuple[Rig, FullDisk]) -> None:
    rig_, disk = rig
    disk.full = True
    with pytest.raises(ProtocolError) as info:
        await rig_.spawn("work")
    assert info.value.code == "store" and "state directory is full" in info.value.message
    assert rig_.sup.index.jobs == {} and rig_.store.jobs() == []
    disk.full = False
    job = await rig_.spawn("work")
    assert rig_.state(job) == "working"


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 3 MB tmpfs to be the daemon's home (needs root to mount; CI runs as root)."""
    if os.getuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", str(mount)]).returncode != 0:
        pytest.skip("this machine does not let root mount a tmpfs")
    yield mount
    subprocess.run(["umount", "-l", str(mount)])


def test_a_real_disk_that_fills_and_frees(small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import LEAKY_ENV, DaemonHarness

    home = small_disk / "home"
    monkeypatch.setenv("ROOST_HOME", str(home))
    for name in LEAKY_ENV:
        monkeypatch.delenv(name, raising=False)
    daemon = DaemonHarness(home)
    daemon.write_config("")
    daemon.start()
    try:
        job = daemon.spawn("say ready")
        daemon.wait_state(job, "idle")
        filler = small_disk / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
        with pytest.raises(ClientError) as info:
            for i in range(200):  # until the WAL has no room left
                daemon.call("send", job=job, text=f"say {i} " + "x" * 2000)
        assert info.value.code == "store" and "state directory is full" in info.value.message
        assert daemon.show(job)["state"] in ("idle", "working")
        filler.unlink()
        row = daemon.wait_row(job, lambda r: r["state"] == "idle" and not daemon.call("status")["store_notice"],
                              timeout=30, what="the job to settle once the disk freed")
        assert row["state"] == "idle"
        assert daemon.call("send", job=job, text="say after")["outcome"] in ("delivered", "queued")
        daemon.wait_for(lambda: "after" in daemon.texts(job), timeout=15, what="the message after the disk freed")
    finally:
        daemon.stop()
