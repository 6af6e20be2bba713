"""A turn the agent began by itself (Claude Code taking in a background subagent's result after its
parent's turn ended), in process: a real store, fake workers, a fake clock. The job works for it as
for any turn, and its end settles it like a prompt's."""

from __future__ import annotations

from pathlib import Path

import pytest

from roost.config import Config
from tests.engine_fakes import Rig

# stall_after = 0: a running turn arms no stall deadline, so a deadline here is the reaper's
CFG = Config(idle_timeout=100, subagent_auto_close_delay=4, report_hold_max=60, max_running_jobs=0, stall_after=0)


@pytest.fixture
async def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, CFG)


async def idle_job(rig: Rig, prompt: str = "work", caller: str | None = None) -> str:
    job = await rig.spawn(prompt, caller=caller)
    rig.worker(job).end_turn(text="started a subagent")
    await rig.settle()
    assert rig.state(job) == "idle"
    return job


def notes(rig: Rig, job: str) -> list[str]:
    return [e["data"]["message"] for e in rig.store.timeline_page(job, limit=2000)["entries"] if e["kind"] == "note"]


async def test_an_own_turn_makes_the_job_work_and_its_end_leaves_it_idle_with_its_text(rig: Rig) -> None:
    job = await idle_job(rig)
    rig.worker(job).begin_own_turn()
    await rig.settle()
    assert rig.state(job) == "working"
    turn = rig.sup.engine.slots[job].turn
    assert turn is not None and turn.kind == "own"
    rig.worker(job).end_own_turn(text="the subagent found 3 files")
    await rig.settle()
    assert rig.state(job) == "idle"
    assert rig.job(job).last_text == "the subagent found 3 files"
    assert rig.sup.engine.slots[job].turn is None
    assert not any("older turn" in n for n in notes(rig, job))
    [working] = [e["data"] for e in rig.store.timeline_page(job, limit=2000)["entries"]
                 if e["kind"] == "state" and e["data"]["state"] == "working" and e["data"].get("note")]
    assert working["note"] == "a turn of the agent's own"


async def test_the_reaper_leaves_a_worker_in_its_own_turn_alone_and_counts_idle_from_its_end(rig: Rig) -> None:
    job = await idle_job(rig)
    await rig.advance(60)
    rig.worker(job).begin_own_turn()
    await rig.settle()
    assert rig.sup.engine.next_deadline(job) is None
    await rig.advance(500)
    assert job in rig.sup.engine.slots and rig.state(job) == "working"
    rig.worker(job).end_own_turn(text="done taking it in")
    await rig.settle()
    assert rig.sup.engine.next_deadline(job) == rig.clock.mono() + 100
    await rig.advance(100)
    assert job not in rig.sup.engine.slots and rig.state(job) == "idle"


async def test_a_done_child_in_its_own_turn_is_not_auto_closed_and_a_report_in_it_applies(rig: Rig) -> None:
    parent = await rig.spawn("lead")
    child = await rig.spawn("sub", caller=parent)
    await rig.sup.report(child, "done", "first part")
    rig.worker(child).end_turn()
    await rig.settle()
    assert rig.state(child) == "done"
    await rig.advance(2)
    rig.worker(child).begin_own_turn()
    await rig.settle()
    await rig.advance(10)
    assert child in rig.sup.engine.slots and rig.state(child) == "working"
    answer = await rig.sup.report(child, "done", "both parts, with the subagent's")
    assert answer["applies"] == "at the end of this turn"
    rig.worker(child).end_own_turn(text="merged")
    await rig.settle()
    assert rig.state(child) == "done"
    texts = [r["text"] for r in rig.store.pending_reports(parent)]
    assert texts[-1] == "both parts, with the subagent's"
    await rig.advance(4)
    assert child not in rig.sup.engine.slots, "done again: auto-closed on the usual rule"


async def test_a_message_sent_during_an_own_turn_waits_for_its_end(rig: Rig) -> None:
    job = await idle_job(rig)
    rig.worker(job).begin_own_turn()
    await rig.settle()
    result = await rig.sup.send(job, "next please", None)
    await rig.settle()
    assert result["outcome"] == "queued"
    assert [p for _, p in rig.worker(job).prompts] == ["work"]
    rig.worker(job).end_own_turn(text="took it in")
    await rig.settle()
    assert [p for _, p in rig.worker(job).prompts] == ["work", "next please"]
    assert rig.state(job) == "working"


async def test_a_stop_aborts_an_own_turn_and_a_persons_message_restarts_the_job(rig: Rig) -> None:
    job = await idle_job(rig)
    rig.worker(job).begin_own_turn()
    await rig.settle()
    await rig.sup.stop(job, False, None)
    await rig.settle()
    assert rig.worker(job).aborts == 1
    assert rig.state(job) == "stopped" and rig.sup.engine.slots[job].turn is None
    ends = [e["data"] for e in rig.store.timeline_page(job, limit=2000)["entries"] if e["kind"] == "turn_end"]
    assert ends[-1] == {"outcome": "aborted", "note": "stopped", "by": "person"}
    await rig.sup.send(job, "go on", None)
    await rig.settle()
    assert [p for _, p in rig.worker(job).prompts] == ["work", "go on"]
    assert rig.state(job) == "working"


async def test_an_own_turn_of_a_stopped_job_is_aborted_at_once(rig: Rig) -> None:
    job = await rig.spawn()
    await rig.sup.stop(job, False, None)
    await rig.settle()
    assert rig.worker(job).aborts == 1
    rig.worker(job).begin_own_turn()
    await rig.settle()
    assert rig.worker(job).aborts == 2
    assert rig.state(job) == "stopped" and rig.sup.engine.slots[job].turn is None
    assert "the agent began a turn of its own after a stop; it is aborted" in notes(rig, job)


async def test_an_own_turn_that_fails_fails_the_job_with_its_error(rig: Rig) -> None:
    job = await idle_job(rig)
    rig.worker(job).begin_own_turn()
    await rig.settle()
    rig.worker(job).end_own_turn("failed", error="API Error: 500 fake server down")
    await rig.settle()
    assert rig.state(job) == "failed"
    assert rig.job(job).reason == "API Error: 500 fake server down"


async def test_an_own_turn_start_while_a_prompt_is_in_flight_is_that_prompts_turn(rig: Rig) -> None:
    job = await rig.spawn()
    run = rig.worker(job).prompts[0][0]
    rig.worker(job).on_event({"type": "turn_start", "own": True})
    await rig.settle()
    turn = rig.sup.engine.slots[job].turn
    assert turn is not None and turn.kind == "prompt" and turn.run == run
    rig.worker(job).end_turn(text="answered")
    await rig.settle()
    assert rig.state(job) == "idle" and rig.job(job).last_text == "answered"


async def test_the_end_of_an_own_turn_when_none_runs_is_only_a_note(rig: Rig) -> None:
    job = await idle_job(rig)
    rig.worker(job).end_own_turn(text="stray")
    await rig.settle()
    assert rig.state(job) == "idle"
    assert notes(rig, job)[-1] == "ignored the end of a turn of the agent's own"
