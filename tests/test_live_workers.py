"""The live-worker cap (``max_live_workers``): the pure rules that choose which idle worker to
close, and the engine in process (real store, fake workers, fake clock) — idle workers count, the
least recently used one that nothing holds is closed for a start, a start with none to close waits
queued and says why, a reload that lowers or raises the cap, and a parent closed for room is woken
by its child's report."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from roost.config import Config
from roost.models import Job, State
from roost.rules.lifecycle import WorkerFacts
from roost.rules.live_workers import Idle, closable, places_short, to_close
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=1000, subagent_auto_close_delay=4, report_hold_max=60, max_running_jobs=0,
             max_live_workers=3)


# -- the rules ---------------------------------------------------------------------------------------------
def test_places_short_counts_live_workers_not_closing_and_the_waiting_starts():
    assert places_short(cap=3, live=3, closing=0, waiting=1) == 1
    assert places_short(cap=3, live=3, closing=1, waiting=1) == 0, "one already closing makes the place"
    assert places_short(cap=3, live=2, closing=0, waiting=1) == 0
    assert places_short(cap=2, live=5, closing=0, waiting=0) == 3, "a lowered cap"
    assert places_short(cap=0, live=500, closing=0, waiting=9) == 0, "0: no cap"


def test_to_close_takes_the_least_recently_used_first_and_ties_by_id():
    idle = [Idle("c", 30.0), Idle("a", 10.0), Idle("b", 10.0), Idle("d", 5.0)]
    assert to_close(idle, 2) == ["d", "a"]
    assert to_close(idle, 0) == [] and to_close(idle, 9) == ["d", "a", "b", "c"]


def test_to_close_takes_a_parent_whose_children_run_only_after_every_other():
    idle = [Idle("parent", 1.0, children_running=True), Idle("newer", 50.0)]
    assert to_close(idle, 1) == ["newer"] and to_close(idle, 2) == ["newer", "parent"]


JOB = Job(id="j", title="t", driver="builtin", cwd="/", state=State.IDLE)
UP = WorkerFacts(up=True, idle_since=1.0)


@pytest.mark.parametrize("job, facts, expected", [
    (JOB, UP, True),
    (replace(JOB, pinned=True), UP, False),
    (JOB, replace(UP, attached=True), False),
    (JOB, replace(UP, queued=1), False),
    (JOB, replace(UP, in_turn=True), False),
    (JOB, replace(UP, busy=True), False),
    (JOB, replace(UP, idle_since=None), False),
    (JOB, replace(UP, subagents_running=1), False),
    (JOB, replace(UP, up=False), False),
])
def test_closable_only_when_nothing_holds_the_worker(job, facts, expected):
    assert closable(job, facts) is expected


# -- the engine --------------------------------------------------------------------------------------------
@pytest.fixture
async def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, CFG)


async def idle_jobs(rig: Rig, count: int) -> list[str]:
    """``count`` jobs whose turns ended one second apart, oldest first."""
    jobs = []
    for i in range(count):
        job = await rig.spawn(f"job {i}")
        rig.worker(job).end_turn()
        await rig.settle()
        rig.clock.advance(1)
        jobs.append(job)
    return jobs


async def test_idle_workers_count_and_the_least_recently_used_is_closed_for_a_start(rig: Rig) -> None:
    old, mid, new = await idle_jobs(rig, 3)
    assert len(rig.sup.engine.slots) == 3
    fourth = await rig.spawn("the fourth")
    await rig.settle()
    assert set(rig.sup.engine.slots) == {mid, new, fourth}
    assert rig.state(fourth) == "working" and rig.job(old).reaped and rig.state(old) == "idle"
    closed = [e for e in rig.store.timeline_page(old, limit=50)["entries"] if e["kind"] == "closed"]
    assert closed[-1]["data"]["reason"] == "closed for room: max_live_workers = 3"
    # Its record stays: a message resumes it, closing the next least recently used (mid).
    await rig.sup.send(old, "again", None)
    await rig.settle()
    assert set(rig.sup.engine.slots) == {new, fourth, old}
    assert [p for w in rig.workers[old] for _, p in w.prompts] == ["job 0", "again"]


async def test_pinned_attached_and_waited_for_workers_are_not_closed(rig: Rig) -> None:
    pinned, attached, free = await idle_jobs(rig, 3)
    await rig.sup.set_pinned(pinned, True)
    await rig.sup.attach(attached, conn_id=7)
    await rig.settle()
    fourth = await rig.spawn("the fourth")
    await rig.settle()
    assert set(rig.sup.engine.slots) == {pinned, attached, fourth}, "the newest, but the only one free"


async def test_a_start_with_nothing_to_close_waits_queued_saying_why_and_goes_when_one_ends(rig: Rig) -> None:
    busy = [await rig.spawn(f"busy {i}") for i in range(3)]
    waiting = await rig.spawn("waits")
    later = await rig.spawn("later")
    await rig.settle()
    assert rig.state(waiting) == "queued" and rig.state(later) == "queued"
    assert len(rig.sup.engine.slots) == 3 and rig.sup.status()["queued"] == 2
    notes = [e["data"]["message"] for e in rig.store.timeline_page(waiting, limit=50)["entries"] if e["kind"] == "note"]
    assert notes == ["waiting for a live-worker place (max_live_workers = 3): an idle worker closes for it, "
                     "or the next one that ends"]
    rig.worker(busy[0]).end_turn()  # now idle: the least recently used, and closable
    await rig.settle()
    assert rig.state(waiting) == "working" and rig.state(later) == "queued", "first come, first served"
    assert busy[0] not in rig.sup.engine.slots and len(rig.sup.engine.slots) == 3


async def test_a_reload_that_lowers_the_cap_closes_idle_workers_and_one_that_raises_it_starts_waiting_ones(
        rig: Rig) -> None:
    jobs = await idle_jobs(rig, 3)
    rig.config = replace(CFG, max_live_workers=1)
    rig.sup.config_changed()
    await rig.settle()
    assert set(rig.sup.engine.slots) == {jobs[2]}, "the two least recently used closed"
    queued = [await rig.spawn(f"q {i}") for i in range(2)]
    await rig.settle()
    assert [rig.state(q) for q in queued] == ["working", "queued"], "the idle one closed for the first"
    rig.config = replace(CFG, max_live_workers=0)
    rig.sup.config_changed()
    await rig.settle()
    assert [rig.state(q) for q in queued] == ["working", "working"]


async def test_a_parent_closed_for_room_is_woken_by_its_childs_report(rig: Rig) -> None:
    rig.config = replace(CFG, max_live_workers=2)
    parent = await rig.spawn("parent")
    child = await rig.spawn("child", caller=parent, lifetime="workflow")
    await rig.sup.set_pinned(child, True)  # so the parent is the one the cap closes
    rig.worker(parent).end_turn()
    await rig.settle()
    rig.worker(child).end_turn(text="first")
    await rig.settle()
    rig.worker(parent).end_turn()  # the turn that took the first report
    await rig.settle()
    other = await rig.spawn("someone else")
    await rig.settle()
    assert set(rig.sup.engine.slots) == {child, other} and parent in rig.sup.engine.queue.closed_for_room
    await rig.sup.send(child, "more", None)
    await rig.settle()
    rig.worker(child).end_turn(text="second")
    await rig.settle()
    assert parent not in rig.sup.engine.slots, "no place yet: the other job is in its turn"
    rig.worker(other).end_turn()
    await rig.settle()
    assert set(rig.sup.engine.slots) == {child, parent}, "woken for the report, though wake_reaped_parent is off"
    assert rig.worker(parent).prompts[-1][1].startswith("<roost-report")


async def test_a_parent_closed_for_room_is_still_woken_by_its_childs_report_after_a_restart(
        rig: Rig, tmp_path: Path) -> None:
    """The run queue's memory of which workers it closed for room goes with the daemon; the next one
    finds them again from their ``closed`` entries, so the child's report still wakes its parent."""
    rig.config = replace(CFG, max_live_workers=2)
    parent = await rig.spawn("parent")
    child = await rig.spawn("child", caller=parent)
    await rig.sup.set_pinned(child, True)  # so the parent is the one the cap closes
    rig.worker(child).end_turn("waiting", "which one?")  # it stays waiting across the restart
    await rig.settle()
    rig.worker(parent).end_turn()
    await rig.settle()
    other = await rig.spawn("someone else")
    await rig.settle()
    assert parent in rig.sup.engine.queue.closed_for_room and rig.state(child) == "waiting"
    rig.sup.engine.cancel_tasks()
    rig.store.close()
    again = Rig(tmp_path, rig.config)
    assert again.sup.engine.queue.closed_for_room == {parent}, "nor the other, whose worker went with the daemon"
    assert other not in again.sup.engine.queue.closed_for_room


async def test_a_chain_deeper_than_the_cap_goes_to_its_end(rig: Rig) -> None:
    """Each job spawned under the last, all at once, each in its first turn: a parent in a turn
    whose child still runs waits for it and holds no place (``holds_place``), and one whose turn
    ended is closed for room, so the chain goes on; what the cap counts never passes it."""
    rig.config = replace(CFG, max_depth=20)
    chain = [await rig.spawn("level 0")]
    for level in range(1, 10):
        chain.append(await rig.spawn(f"level {level}", parent=chain[-1]))
    most = 0
    for _ in range(100):  # each round, every turn in flight ends (a woken parent's report turn too)
        eng = rig.sup.engine
        most = max(most, eng.queue.live_count())
        in_turn = [j for j, slot in eng.slots.items() if slot.turn is not None]
        if not in_turn:
            break
        for job in in_turn:
            rig.worker(job).end_turn(text="done")
        await rig.settle()
        rig.clock.advance(1)
    assert [p for job in chain for w in rig.workers[job] for _, p in w.prompts if p.startswith("level")] == \
        [f"level {n}" for n in range(10)], "every level ran its turn"
    assert most <= 3 and not rig.sup.engine.queue.live


# -- a real daemon, real built-in workers ------------------------------------------------------------------------
def test_three_hundred_children_run_within_a_cap_of_eight(daemon_factory) -> None:
    daemon = daemon_factory("max_live_workers = 8\nspare_workers = 0\n")
    parent = daemon.spawn("spawn*300 say hi\nsay spawned them all", title="many")
    most = 0

    def settled() -> bool:
        nonlocal most
        most = max(most, daemon.call("status")["workers"])
        kids = daemon.children(parent)
        return len(kids) == 300 and all(k["state"] == "idle" for k in kids)

    daemon.wait_for(settled, timeout=240, what="300 children to have run")
    # Eight children, and the parent while its turn spawns them (in a turn with children running,
    # it holds no place: holds_place); once its turn ended it counts again.
    assert most <= 9 and daemon.call("status")["workers"] <= 8
    assert all(daemon.texts(k["id"]) == ["hi"] for k in daemon.children(parent)[::30])
    closed = [e for e in daemon.call("logs", job=daemon.children(parent)[0]["id"])["entries"] if e["kind"] == "closed"]
    assert closed and closed[0]["data"]["reason"] == "closed for room: max_live_workers = 8"


#: A tree four levels deep, two wide: the root and each middle job spawn two children and wait for
#: them in their turn (``wait-children``); the eight leaves say a word and report done.
TREE = ("spawn*2 spawn*2 spawn*2 say leaf;;;; report done leaf;; wait-children;; report done l2; "
        "wait-children; report done l1\nwait-children\nreport done root")


def test_a_tree_of_parents_waiting_in_their_turns_deeper_and_wider_than_the_cap_finishes(daemon_factory) -> None:
    """Seven parents wait for their children in a turn (they cannot be closed) under a cap of three:
    were they counted, the leaves would wait for a place for good with every run slot free."""
    daemon = daemon_factory("max_live_workers = 3\nspare_workers = 0\nmax_depth = 5\n")
    root = daemon.spawn(TREE, title="tree")
    daemon.wait_state(root, "done", timeout=90)
    levels = [[root]]
    for _ in range(3):
        levels.append([k["id"] for j in levels[-1] for k in daemon.children(j)])
    assert [len(level) for level in levels] == [1, 2, 4, 8]
    for level, word in zip(levels, ["root", "l1", "l2", "leaf"]):
        for job in level:
            row = daemon.show(job)
            assert row["state"] == "done" and row["last_text"] == word, row
    assert all(daemon.texts(leaf) == ["leaf"] for leaf in levels[3])
