"""Subtree figures across a daemon restart, in process (a real store, fake workers, a fake clock):
the ledger of subtree sums is made from the records when first needed, and the first call a job
reports after a restart must be in it once, not once from the record and once more as the call."""

from __future__ import annotations

from pathlib import Path

from roost.config import Config
from roost.daemon.engine.spend import show_fields
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=100, subagent_auto_close_delay=100, report_hold_max=60, max_running_jobs=0)


def call(rig: Rig, job: str, call_id: str, inp: int, out: int) -> None:
    rig.worker(job).on_event({"type": "usage", "call": {"id": call_id, "model": "m", "input": inp, "output": out}})


def subtree_input(rig: Rig, job: str) -> int:
    return show_fields(rig.sup.engine, job)["subtree_usage"]["input"]


async def test_the_first_call_after_a_restart_counts_once_in_every_subtree(tmp_path: Path) -> None:
    rig = Rig(tmp_path, CFG)
    lead = await rig.spawn("lead")
    kid = await rig.spawn("kid", caller=lead)
    call(rig, kid, "c1", 100, 10)
    rig.worker(kid).end_turn(text="one")
    await rig.settle()
    assert (subtree_input(rig, kid), subtree_input(rig, lead)) == (100, 100)

    again = Rig(tmp_path, CFG)  # a new daemon on the same store; nothing has asked for a subtree yet
    await again.sup.send(kid, "two", lead)
    await again.settle()
    call(again, kid, "c2", 20, 2)
    again.worker(kid).end_turn(text="two")
    await again.settle()
    assert again.job(kid).usage["input"] == 120
    assert (subtree_input(again, kid), subtree_input(again, lead)) == (120, 120)

    call(again, kid, "c2", 20, 2)  # the same call told again adds nothing
    await again.settle()
    assert (subtree_input(again, kid), subtree_input(again, lead)) == (120, 120)


async def test_a_call_whose_commit_fails_is_counted_once_when_it_is_applied_again(tmp_path: Path) -> None:
    """The ledger is not in the journal: a refused batch puts its figures back (EngineApi.undo), so
    the call applied again once the store takes writes counts once in every subtree and budget."""
    from tests.engine_fakes import FullDisk

    rig = Rig(tmp_path, CFG)
    disk = FullDisk.under(rig.store)
    lead = await rig.spawn("lead")
    kid = await rig.spawn("kid", caller=lead)
    call(rig, kid, "c1", 100, 10)
    await rig.settle()
    assert subtree_input(rig, lead) == 100  # the ledger exists before the refused change
    disk.full = True
    call(rig, kid, "c2", 20, 2)
    await rig.settle()
    assert kid in rig.sup.engine.stalled and subtree_input(rig, lead) == 100, "nothing of the refused call"
    disk.full = False
    rig.sup.engine.retry_stalled()
    await rig.settle()
    assert not rig.sup.engine.stalled
    assert rig.job(kid).usage["input"] == 120 and (subtree_input(rig, kid), subtree_input(rig, lead)) == (120, 120)
