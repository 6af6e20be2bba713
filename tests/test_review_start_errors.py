"""A worker that cannot even be made because the machine refuses (a directory the driver makes
cannot be, say) fails its job with why, like a driver's own refusal: the spawn does not sit
``queued`` holding its place under the cap, and a message's sender is not told "internal". In
process: a real store, fake workers (tests/engine_fakes.py), a fake clock."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from roost.config import Config, ConfigError
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=100, subagent_auto_close_delay=4, report_hold_max=60, max_running_jobs=1)


@pytest.fixture
async def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, CFG)


def refuse_once(rig: Rig) -> None:
    make = rig._make
    calls = []

    def failing(job: Any, *args: Any) -> Any:
        if not calls:
            calls.append(job.id)
            raise PermissionError(13, "Permission denied", "/state/pi-agent")
        return make(job, *args)

    rig.sup.engine.make_worker = failing  # type: ignore[method-assign]


async def test_a_spawn_whose_worker_cannot_be_made_fails_with_why_and_frees_its_place(rig: Rig) -> None:
    refuse_once(rig)
    job = await rig.spawn("work")
    assert rig.state(job) == "failed"
    assert "Permission denied" in rig.job(job).reason and "/state/pi-agent" in rig.job(job).reason
    other = await rig.spawn("next")  # the cap of 1 is free again
    assert rig.state(other) == "working"


async def closed_job(rig: Rig) -> str:
    rig.config = replace(CFG, max_running_jobs=0)
    job = await rig.spawn("work")
    rig.worker(job).end_turn()
    await rig.settle()
    await rig.sup.close(job)
    await rig.settle()
    return job


async def test_a_message_whose_resume_cannot_be_made_is_refused_with_why_and_kept(rig: Rig) -> None:
    job = await closed_job(rig)
    refuse_once(rig)
    with pytest.raises(Exception) as info:
        await rig.sup.send(job, "again", None)
    assert "Permission denied" in str(info.value) and "kept for its next resume" in str(info.value)
    assert rig.store.pending_count(job) == 1 and rig.sup.engine.inbox[job] == 1
    [stored] = [j for j in rig.store.jobs() if j.id == job]
    assert stored.state.value == rig.state(job) == "failed"  # the store says what memory says
    assert "could not start its worker: Permission denied" in rig.sup.engine.last_error(rig.job(job))


async def test_a_message_to_a_job_whose_driver_is_gone_is_kept_for_its_next_resume(rig: Rig) -> None:
    job = await closed_job(rig)

    def gone(job: Any, *args: Any) -> Any:
        raise ConfigError("roost.toml", "drivers.builtin", "no driver profile builtin in the config")

    rig.sup.engine.make_worker = gone  # type: ignore[method-assign]
    with pytest.raises(Exception) as info:
        await rig.sup.send(job, "again", None)
    assert "no driver profile builtin" in str(info.value)
    assert rig.store.pending_count(job) == 1
    rig.sup.engine.make_worker = rig._make  # type: ignore[method-assign]
    await rig.sup.send(job, "and again", None)  # a person's next message resumes it with both
    await rig.settle()
    assert [p for _, p in rig.worker(job).prompts][-1] == "again"


async def test_a_worktree_setup_the_machine_refuses_fails_the_start_with_why(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    from roost.daemon.git import worktrees

    async def refused(job: Any, settings: Any) -> None:  # copying the configured files in: the disk is full
        raise OSError(28, "No space left on device", "/repo/.env")

    monkeypatch.setattr(worktrees, "before_start", refused)
    job = await rig.spawn("work")
    assert rig.state(job) == "failed", "the start task died and left the job queued with a slot"
    assert "No space left on device: /repo/.env" in rig.job(job).reason
    assert job not in rig.sup.engine.slots
