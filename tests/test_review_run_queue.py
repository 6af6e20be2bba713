"""The per-host queue under messages that come together, in process: a real store, fake workers, a
fake clock, the ssh transport left out (as in tests/test_engine_hosts.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.engine_fakes import Rig
from tests.test_engine_hosts import CFG, rig  # noqa: F401  (the fixture: hosts box and gpu, room for one each)


async def spawn_together(rig: Rig, host: str, prompts: list[str]) -> list[str]:
    """Spawns whose Start messages are all in their mailboxes before any is applied (a parent's
    tool spawning several children at once, a script of ``roost spawn``)."""
    ids = [(await rig.sup.spawn({"prompt": p, "cwd": str(rig.paths.state_dir), "host": host}, None))["id"]
           for p in prompts]
    await rig.settle()
    return ids


async def close(rig: Rig, job: str) -> None:
    rig.worker(job).end_turn()
    await rig.settle()
    await rig.sup.close(job)
    await rig.settle()


@pytest.mark.parametrize("cap", [1, 2])
async def test_spawns_on_a_host_that_come_together_start_first_come_first_served(rig: Rig, cap: int) -> None:
    rig.config = replace(CFG, hosts={**CFG.hosts, "box": replace(CFG.hosts["box"], max_running_jobs=cap)})
    jobs = await spawn_together(rig, "box", ["a", "b", "c", "d"])
    assert [rig.state(j) for j in jobs] == ["working"] * cap + ["queued"] * (4 - cap)
    await close(rig, jobs[0])
    assert rig.state(jobs[cap]) == "working"
    assert [rig.state(j) for j in jobs[cap + 1:]] == ["queued"] * (3 - cap)


async def test_spawns_that_come_together_under_a_global_cap_fill_their_host_in_order(rig: Rig) -> None:
    rig.config = replace(CFG, max_running_jobs=3)
    jobs = await spawn_together(rig, "box", ["a", "b", "c"])
    assert [rig.state(j) for j in jobs] == ["working", "queued", "queued"]
    local = await rig.spawn("here")  # the box's waiting jobs hold no global place
    assert rig.state(local) == "working"


async def test_a_parent_on_a_full_host_does_not_hold_back_its_own_child_there(rig: Rig) -> None:
    parent = await rig.spawn("lead", host="box")  # the box's only place
    child = await rig.spawn("sub", caller=parent)  # on its parent's host, as a child is by default
    assert rig.job(child).host == "box"
    rig.worker(parent).end_turn()  # the parent waits for its child's report
    await rig.settle()
    await rig.advance(1000)  # the parent is never reaped while its child runs: its place would never free
    assert rig.state(child) == "working", "the child waits for a place its own parent holds"
    rig.worker(child).end_turn()
    await rig.settle()
    assert [p for _, p in rig.worker(parent).prompts][-1].startswith("<roost-report")  # the report came back
    other = await rig.spawn("later", host="box")
    assert rig.state(other) == "queued"  # parent and child are both live there: the cap holds again
