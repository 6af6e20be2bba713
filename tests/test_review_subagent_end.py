"""When the agent's last own subagent ends, the agent takes in its result in a turn of its own
(Claude Code's background ``Task``: roost/drivers/claude.py). The worker must still be there for
that turn: the time rules count the last word from a subagent like the end of a turn. In process:
a real store, fake workers (tests/engine_fakes.py), a fake clock."""

from __future__ import annotations

from tests.engine_fakes import Rig
from tests.test_engine_row_counts import rig, subagent  # noqa: F401  (the fixture: idle_timeout 100, delay 4)


async def idle_with_a_background_subagent(rig: Rig, caller: str | None = None) -> str:
    job = await rig.spawn("work", caller=caller)
    rig.worker(job).on_event(subagent("bg", "working", "survey the repo"))
    if caller:
        await rig.sup.report(job, "done", "handed back")
    rig.worker(job).end_turn()
    await rig.settle()
    return job


async def test_a_worker_whose_long_background_subagent_just_ended_is_kept_for_its_own_turn(rig: Rig) -> None:
    job = await idle_with_a_background_subagent(rig)
    worker = rig.worker(job)
    for _ in range(3):  # it runs well past the idle timeout, saying something now and then
        await rig.advance(60)
        worker.on_event(subagent("bg", "working", "still reading"))
    await rig.settle()
    worker.on_event(subagent("bg", "done", "all read"))
    await rig.settle()
    assert job in rig.sup.engine.slots, "closed the moment its subagent ended, before the agent took in the result"
    worker.begin_own_turn()  # what Claude Code does next
    await rig.settle()
    assert rig.state(job) == "working"
    worker.end_own_turn(text="took in: all read")
    await rig.settle()
    assert rig.state(job) == "idle" and rig.job(job).last_text == "took in: all read"
    await rig.advance(99.9)
    assert job in rig.sup.engine.slots
    await rig.advance(0.1)  # idle for the timeout after its own turn: reaped
    assert job not in rig.sup.engine.slots and rig.job(job).reaped


async def test_without_an_own_turn_the_worker_is_reaped_an_idle_timeout_after_the_last_word(rig: Rig) -> None:
    job = await idle_with_a_background_subagent(rig)
    worker = rig.worker(job)
    await rig.advance(90)
    worker.on_event(subagent("bg", "working", "half way"))
    await rig.settle()
    await rig.advance(90)  # held past the idle timeout while bg works
    assert job in rig.sup.engine.slots
    worker.on_event(subagent("bg", "done", "read"))
    await rig.settle()
    assert rig.sup.engine.next_deadline(job) == rig.clock.now + 100
    await rig.advance(100)
    assert job not in rig.sup.engine.slots


async def test_a_done_child_whose_background_subagent_ended_is_kept_for_its_own_turn(rig: Rig) -> None:
    parent = await rig.spawn("lead")
    child = await idle_with_a_background_subagent(rig, caller=parent)
    worker = rig.worker(child)
    await rig.advance(10)  # past the auto-close delay (4 s): held by bg
    assert child in rig.sup.engine.slots
    worker.on_event(subagent("bg", "done", "read"))
    await rig.settle()
    assert child in rig.sup.engine.slots, "auto-closed the moment its subagent ended"
    worker.begin_own_turn()
    await rig.settle()
    assert rig.state(child) == "working"
    worker.end_own_turn(text="took it in")
    await rig.settle()
    assert child in rig.sup.engine.slots  # its own turn ended idle, not done: no auto-close
