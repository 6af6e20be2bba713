""""Working" and "queued" are one definition (roost/rules/counts.py), the same in the daemon's
``status``, ``roost daemon status``, a queued row's reason and the app's top bar: with
``max_running_jobs = 3`` the bar said ``1 working · 4 queued`` while five workers ran (subagents
took run slots but were not counted as working)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

from roost.models import State
from roost.rules.counts import WorkCounts, slot_wait, work_counts, work_parts
from roost.tui.agent_view import AgentViewScreen

from conftest import DaemonHarness
from tui_helpers import SIZE, make_app, table_ids, until


def test_working_counts_subagents_and_starting_jobs_queued_its_own():
    tally = Counter({(State.WORKING, False): 1, (State.WORKING, True): 3, (State.STARTING, True): 1,
                     (State.QUEUED, False): 2, (State.QUEUED, True): 1, (State.IDLE, False): 7,
                     (State.WAITING, True): 2, (State.DONE, False): 0})
    counts = work_counts(tally, slots_used=3, cap=3)
    assert counts == WorkCounts(working=5, subagents=4, queued=3, slots_used=3, cap=3)
    assert work_parts(counts) == ["5 working (4 subagents)", "3 queued (3 of 3 run slots used)"]


def test_the_words_for_one_subagent_no_queue_and_no_cap():
    assert work_parts(WorkCounts(working=2, subagents=1)) == ["2 working (1 subagent)"]
    assert work_parts(WorkCounts()) == ["0 working"]
    assert work_parts(WorkCounts(working=1, queued=2, slots_used=1, cap=0)) == ["1 working", "2 queued"]
    assert slot_wait(3, 3) == "waiting for a run slot (3 of 3 used)"


def test_counts_from_the_wire_take_what_an_older_daemon_left_out_as_zero():
    counts = WorkCounts(working=4, subagents=3, queued=2, slots_used=3, cap=3)
    assert WorkCounts.from_wire(counts.to_wire()) == counts
    assert WorkCounts.from_wire({"working": 2}) == WorkCounts(working=2)
    assert WorkCounts.from_wire(None) == WorkCounts()


def _status_line(daemon: DaemonHarness) -> str:
    out = subprocess.run([sys.executable, "-m", "roost.cli", "daemon", "status"], env=daemon.env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return out.splitlines()[1]


def _full_cap(daemon: DaemonHarness) -> tuple[str, list[str]]:
    """A root whose three subagents take the three run slots, and two roots queued behind them."""
    root = daemon.spawn("spawn*3 wait-for go\nwait-for go", title="lead")
    daemon.wait_for(lambda: [c["state"] for c in daemon.children(root)] == ["working"] * 3,
                    what="three working subagents")
    queued = [daemon.spawn("wait-for go", title=f"later {n}") for n in range(2)]
    for job in queued:
        daemon.wait_row(job, lambda r: r["reason"], what="the queued row's reason")
    return root, queued


def test_status_counts_subagents_as_working_and_says_the_slots_queued_jobs_wait_for(daemon_factory):
    daemon = daemon_factory("max_running_jobs = 3\n")
    root, queued = _full_cap(daemon)
    assert daemon.call("status")["counts"] == {"working": 4, "subagents": 3, "queued": 2, "slots_used": 3, "cap": 3}
    assert _status_line(daemon) == "4 working (3 subagents) · 2 queued (3 of 3 run slots used)"
    assert [daemon.show(job)["reason"] for job in queued] == ["waiting for a run slot (3 of 3 used)"] * 2
    daemon.release("go")
    for job in [root, *queued]:
        daemon.wait_state(job, "idle", "done")
    daemon.wait_for(lambda: daemon.call("status")["counts"]["working"] == 0, what="nothing working")
    assert daemon.call("status")["counts"] == {"working": 0, "subagents": 0, "queued": 0, "slots_used": 0, "cap": 3}


async def test_the_top_bar_says_the_daemons_counts_and_follows_them(daemon_factory):
    daemon = daemon_factory("max_running_jobs = 3\n")
    root, queued = _full_cap(daemon)
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, AgentViewScreen)
        await until(pilot, lambda: {root, *queued} <= set(table_ids(app)), "the rows")
        assert str(screen.topbar.render()).endswith("3 jobs  ·  4 working (3 subagents)  ·  2 queued (3 of 3 run slots used)")
        daemon.release("go")
        await until(pilot, lambda: str(screen.topbar.render()).endswith("3 jobs  ·  0 working"),
                    "the counts to follow the daemon's")
