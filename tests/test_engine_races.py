"""Interleavings the end-to-end tests never see (they settle between two steps): in process, with
fake workers and the fake clock, so each step lands exactly where the test puts it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from roost.config import Config
from roost.daemon.engine import messages as m
from roost.models import State
from roost.rules.state_table import IllegalTransition
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=100, subagent_auto_close_delay=4, report_hold_max=60, max_running_jobs=0)


@pytest.fixture
async def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, CFG)


def states(rig: Rig, job_id: str) -> list[str]:
    return [e["data"]["state"] for e in rig.store.timeline_page(job_id, limit=2000)["entries"]
            if e["kind"] == "state"]


async def test_a_persons_message_while_a_stop_is_aborting_does_not_fail_the_child(rig: Rig) -> None:
    """Stop a child (answered at once), a person's message to it while the abort is still in
    flight, then the abort finishes: the aborted turn was the stop's, not the worker's own doing."""
    parent = await rig.spawn("lead")
    child = await rig.spawn("sub", caller=parent)
    worker = rig.worker(child)
    worker.abort_gate = asyncio.Event()
    assert (await rig.sup.stop(child, False, None))["stopped"] == 1
    await rig.settle()
    assert rig.sup.engine.slots[child].turn is not None, "the abort has not finished"
    sent = await rig.sup.send(child, "carry on", None)
    assert sent["outcome"] == "restarted"
    worker.abort_gate.set()
    await rig.settle()
    assert "failed" not in states(rig, child), states(rig, child)
    assert not [r for r in rig.store.pending_reports(parent) if r["state"] == "failed"]
    assert [p for _, p in worker.prompts] == ["sub", "carry on"]
    assert rig.state(child) == "working"


async def test_a_send_behind_a_stop_says_restarted_from_the_handler(rig: Rig) -> None:
    """The answer comes from the handler, in the job's order: a stop posted before the message
    decides it, though the send was asked while the job still ran."""
    parent = await rig.spawn("lead")
    child = await rig.spawn("sub", caller=parent)
    rig.sup.engine.post(child, m.Stop(None))  # posted, not yet applied: the job still reads working
    sent = await rig.sup.send(child, "again", None)
    assert sent["outcome"] == "restarted"
    assert rig.state(child) == "idle"  # restarted; "again" waits for the aborted turn's end


async def test_a_change_the_table_does_not_allow_raises_and_changes_nothing(rig: Rig) -> None:
    job = await rig.spawn()
    await rig.sup.stop(job, False, None)
    await rig.settle()
    record = rig.job(job)
    with pytest.raises(IllegalTransition, match="stopped -> working is not allowed for 'turn'"):
        rig.sup.engine.set_state(record, State.WORKING, "turn")
    with pytest.raises(IllegalTransition, match="not a kind of state change"):
        rig.sup.engine.set_state(record, State.IDLE, "whim")
    assert rig.state(job) == "stopped"


async def test_a_restart_by_a_message_is_saved_even_when_the_job_must_wait_to_start(tmp_path: Path) -> None:
    """Found by the model (tests/engine_model.py): the restart changed memory only, so a stopped job
    the cap kept from starting still read ``stopped`` in the store (and after a daemon restart)."""
    rig = Rig(tmp_path, Config(idle_timeout=100, max_running_jobs=0, max_live_workers=1))
    busy = await rig.spawn("busy")
    job = await rig.spawn("second")
    await rig.sup.stop(job, False, None)
    assert (await rig.sup.send(job, "again", None))["outcome"] == "restarted"
    await rig.settle()
    assert rig.state(busy) == "working" and rig.state(job) == "idle"
    assert {j.id: j.state for j in rig.store.jobs()}[job] == State.IDLE


async def test_a_turn_the_shutdown_cuts_ends_failed_once_and_its_report_waits_for_the_next_daemon(
        tmp_path: Path) -> None:
    """A stopping daemon closes a child mid-turn (its worker not left to the next daemon): the turn
    ends `failed` with one turn_end, settled at the worker's exit (neither the agent's own aborted
    turn_end nor the abort's answer settles it while it closes), and the report goes to the parent's
    outbox; the parent, its worker closed, is not woken by a daemon that is stopping."""
    rig = Rig(tmp_path, Config(idle_timeout=100, max_running_jobs=0, wake_reaped_parent=True))
    parent = await rig.spawn("lead")
    rig.worker(parent).end_turn()
    await rig.settle()
    await rig.sup.close(parent)
    await rig.settle()
    child = await rig.spawn("sub", caller=parent)
    await rig.sup.shutdown(close_workers=True)
    await rig.settle()
    assert rig.state(child) == "failed" and rig.job(child).reason == "the daemon shut down during its turn"
    ends = [e["data"] for e in rig.store.timeline_page(child, limit=2000)["entries"] if e["kind"] == "turn_end"]
    assert ends == [{"outcome": "failed", "error": "the daemon shut down during its turn"}]
    assert [(r["child"], r["state"]) for r in rig.store.pending_reports(parent)] == [(child, "failed")]
    assert len(rig.workers[parent]) == 1 and parent not in rig.sup.engine.slots, "no worker started while stopping"
