"""A store that takes no writes (a full disk): nobody is told "internal", no job keeps claiming
what is not true, and what waits goes ahead once the disk frees (issue 9, item 6)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from roost.client import ClientError
from roost.config import Config
from roost.daemon.engine.core import RETRY_FIRST, RETRY_MAX
from roost.protocol import ProtocolError
from tests.engine_fakes import FullDisk, Rig

CFG = Config(idle_timeout=100, max_running_jobs=0)


@pytest.fixture
async def rig(tmp_path: Path) -> tuple[Rig, FullDisk]:
    rig = Rig(tmp_path, CFG)
    return rig, FullDisk.under(rig.store)


@pytest.mark.parametrize("where", ["commit", "statement"])
async def test_a_turn_that_ends_on_a_full_disk_is_applied_once_the_disk_frees(rig: tuple[Rig, FullDisk],
                                                                             where: str) -> None:
    """The worker's word is not lost: it waits, first in the job's mailbox, while memory stays what the
    store says; a person's command meanwhile is refused with the store's reason and changes nothing."""
    rig_, disk = rig
    eng = rig_.sup.engine
    job = await rig_.spawn("work")
    setattr(disk, "full" if where == "commit" else "timeline_full", True)
    rig_.worker(job).end_turn(text="finished")
    await rig_.settle()
    assert "state directory is full" in eng.stalled[job]
    stored = {j.id: j for j in rig_.store.jobs()}[job]
    assert stored.state.value == "working" == rig_.state(job), "memory is what the store kept"
    assert rig_.job(job).last_text == stored.last_text == ""
    for ask in (rig_.sup.send(job, "next", None), rig_.sup.set_pinned(job, True)):
        with pytest.raises(ProtocolError) as info:
            await ask
        assert info.value.code == "store" and "state directory is full" in info.value.message
    assert not rig_.job(job).pinned and eng.inbox[job] == 0
    eng.retry_stalled()  # still full: it waits again, and the next try is later
    await rig_.settle()
    assert job in eng.stalled and eng._retry is not None
    disk.full = disk.timeline_full = False
    eng.retry_stalled()
    await rig_.settle()
    assert not eng.stalled
    stored = {j.id: j for j in rig_.store.jobs()}[job]
    assert stored.state.value == "idle" == rig_.state(job) and stored.last_text == "finished"
    assert [k for k in rig_.kinds(job) if k in ("text", "turn_end")] == ["text", "turn_end"], "applied once"
    assert (await rig_.sup.send(job, "next", None))["outcome"] == "delivered"


async def test_a_message_refused_on_a_full_disk_leaves_memory_as_the_store_has_it(rig: tuple[Rig, FullDisk]) -> None:
    """A person's message whose hand-over the store refuses: no turn, no worker asked, the inbox count
    and the record as before (nothing undoes it by hand, nothing resynchronises it later)."""
    rig_, disk = rig
    eng = rig_.sup.engine
    job = await rig_.spawn("work")
    worker = rig_.worker(job)
    worker.end_turn()
    await rig_.settle()
    before = (rig_.state(job), rig_.job(job).to_dict(), len(worker.prompts), eng.slots[job].turn)
    disk.full = True
    with pytest.raises(ProtocolError) as info:
        await rig_.sup.send(job, "hello", None)
    await rig_.settle()
    assert info.value.code == "store"
    assert (rig_.state(job), rig_.job(job).to_dict(), len(worker.prompts), eng.slots[job].turn) == before
    assert eng.inbox[job] == 0 == rig_.store.pending_count(job) and not eng.stalled
    disk.full = False
    assert (await rig_.sup.send(job, "hello", None))["outcome"] == "delivered"
    assert worker.prompts[-1][1] == "hello"


async def test_the_retry_waits_longer_each_time_the_store_still_refuses(rig: tuple[Rig, FullDisk]) -> None:
    rig_, disk = rig
    eng = rig_.sup.engine
    job = await rig_.spawn("work")
    disk.full = True
    rig_.worker(job).end_turn()
    await rig_.settle()
    loop = asyncio.get_running_loop()
    waits = []
    for _ in range(3):
        assert eng._retry is not None
        waits.append(round(eng._retry.when() - loop.time()))
        eng.retry_stalled()
        await rig_.settle()
    assert waits[0] < waits[1] < waits[2] <= RETRY_MAX, waits
    disk.full = False
    eng.retry_stalled()
    await rig_.settle()
    assert rig_.state(job) == "idle" and eng._retry is None and eng._retry_delay == RETRY_FIRST


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
    from roost.daemon.storage.recovery import kill_stale_workers
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
        kill_stale_workers(daemon.paths.state_dir)  # what a stop that fell back to SIGTERM left running


async def test_a_batch_whose_commit_fails_is_put_back_whole_for_every_job(rig: tuple[Rig, FullDisk]) -> None:
    """Two jobs' turns end in one batch and a third job is spawned in it; the commit fails: both
    records, slots and counts are what the store has, no spawn is left, and both words apply later."""
    rig_, disk = rig
    eng = rig_.sup.engine
    first, second = await rig_.spawn("one"), await rig_.spawn("two")
    before = {j: (rig_.job(j).to_dict(), eng.slots[j].turn.run, rig_.sup.index.counts(j)) for j in (first, second)}
    disk.full = True
    rig_.worker(first).end_turn(text="first done")
    rig_.worker(second).end_turn(text="second done")
    with pytest.raises(ProtocolError) as info:
        await rig_.spawn("three")
    assert info.value.code == "store"
    for job in (first, second):
        assert (rig_.job(job).to_dict(), eng.slots[job].turn.run, rig_.sup.index.counts(job)) == before[job]
    assert set(rig_.sup.index.jobs) == {first, second} == set(eng.stalled)
    assert not eng.queue.spawns and eng.inbox[first] == eng.inbox[second] == 0
    disk.full = False
    eng.retry_stalled()
    await rig_.settle()
    assert rig_.state(first) == rig_.state(second) == "idle" and not eng.stalled
    assert rig_.job(second).last_text == "second done"
