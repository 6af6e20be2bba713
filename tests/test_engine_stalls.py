"""Stalls in the engine, in process: the stall rules (roost/rules/stalls.py) on the job's deadline
timer, with fake workers and the fake clock (docs/lifecycle.md#stalls)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from roost.config import Config
from roost.models import Row
from roost.rules.row_text import activity_text
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=0, report_hold_max=60, max_running_jobs=0, stall_after=300, start_stall_after=60)


@pytest.fixture
async def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, CFG)


async def test_a_silent_working_job_is_flagged_at_stall_after_and_the_next_event_clears_it(rig: Rig) -> None:
    job = await rig.spawn("go")
    worker = rig.worker(job)
    await rig.advance(100)
    worker.on_event({"type": "tool", "name": "shell", "args": {"command": "make"}})
    await rig.settle()
    assert rig.sup.engine.next_deadline(job) == rig.clock.mono() + 300
    await rig.advance(299)
    assert rig.job(job).stall == ""
    await rig.advance(1)
    record = rig.job(job)
    assert record.state.value == "working" and record.stall == "stalled"  # a flag, not a state
    assert record.stall_words == "stalled: nothing from the agent for 5m (last: tool, stall_after = 300s)"
    assert activity_text(Row(record), 200) == (record.stall_words, False)
    entry = rig.store.last_entry(job, "stall")
    assert entry is not None and entry["flag"] == "stalled"
    assert rig.sup.engine.next_deadline(job) is None  # flagged once, no timer over and over
    worker.on_event({"type": "text", "text": "still here"})
    await rig.settle()
    assert rig.job(job).stall == "" and rig.job(job).stall_words == ""
    assert rig.sup.engine.next_deadline(job) == rig.clock.mono() + 300


async def test_a_prompt_the_worker_does_not_take_is_flagged_at_start_stall_after(rig: Rig) -> None:
    job = await rig.spawn("first")
    worker = rig.worker(job)
    worker.end_turn()
    await rig.settle()
    worker.prompt_gate = asyncio.Event()
    sent = asyncio.ensure_future(rig.sup.send(job, "second", None))  # answered once the worker takes it
    await rig.settle()
    await rig.advance(59)
    assert rig.job(job).stall == ""
    await rig.advance(1)
    record = rig.job(job)
    assert record.stall == "not_started"
    assert record.stall_words == ("a message waits to start: taken 1m ago, no turn began "
                                  "(start_stall_after = 60s)")
    worker.prompt_gate.set()
    await rig.settle()
    assert (await sent)["outcome"] == "delivered"
    assert rig.job(job).stall == "" and rig.state(job) == "working"


async def test_a_turn_over_max_turn_time_fails_saying_so_and_is_aborted(tmp_path: Path) -> None:
    rig = Rig(tmp_path, replace(CFG, max_turn_time=600))
    parent = await rig.spawn("lead")
    job = await rig.spawn("long", caller=parent)
    for _ in range(3):  # the agent talks: not stalled, but the turn runs on
        await rig.advance(200)
        rig.worker(job).on_event({"type": "text", "text": "working on it"})
        await rig.settle()
    assert rig.state(job) == "failed"
    record = rig.job(job)
    assert record.reason == "the turn has run 10m, over max_turn_time = 600s: roost aborted it"
    assert rig.worker(job).aborts == 1
    kinds = rig.kinds(job)
    assert "turn_end" in kinds
    end = rig.store.last_entry(job, "turn_end")
    assert end is not None and end["note"] == "over max_turn_time" and end["by"] == "daemon"
    assert "the worker aborted its turn by itself" not in str(rig.store.timeline_page(job, limit=200))
    assert rig.store.pending_reports(parent) or rig.store.last_entry(parent, "reports")  # the parent hears


async def test_max_turn_time_is_off_by_default_and_stall_after_zero_never_flags(tmp_path: Path) -> None:
    rig = Rig(tmp_path, replace(CFG, stall_after=0))
    job = await rig.spawn("go")
    assert rig.sup.engine.next_deadline(job) is None
    await rig.advance(100_000)
    assert rig.state(job) == "working" and rig.job(job).stall == ""
