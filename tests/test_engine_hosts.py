"""The per-host queue, in process: a real store, fake workers, a fake clock. Only the ssh transport
(``placement.prepare``: the master, the shipped worker side) is left out; tests/test_hosts.py runs
the same rule through a real sshd."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from roost.config import Config, HostSettings
from roost.hosts import placement
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=100, subagent_auto_close_delay=4, report_hold_max=60, max_running_jobs=0,
             hosts={"box": HostSettings(name="box", ssh="me@box", max_running_jobs=1),
                    "gpu": HostSettings(name="gpu", ssh="me@gpu", max_running_jobs=1)})


@pytest.fixture
async def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Rig:
    async def no_transport(job: Any, config: Config, host_socket: Any, worker: Any, opener: Any = None) -> None:
        return None

    monkeypatch.setattr(placement, "prepare", no_transport)
    return Rig(tmp_path, CFG)


async def on(rig: Rig, host: str, prompt: str = "work") -> str:
    return await rig.spawn(prompt, host=host)


async def idle(rig: Rig, job: str) -> None:
    rig.worker(job).end_turn()
    await rig.settle()


async def test_a_job_waiting_for_its_host_holds_no_place_under_the_global_cap(rig: Rig) -> None:
    rig.config = replace(CFG, max_running_jobs=2)
    first = await on(rig, "box")
    second = await on(rig, "box")
    local = await rig.spawn("here")
    assert [rig.state(j) for j in (first, second, local)] == ["working", "queued", "working"]
    assert second not in rig.workers and rig.sup.status()["queued"] == 1
    assert "waiting for room on host box (max_running_jobs = 1)" in [
        e["data"].get("message") for e in rig.store.timeline_page(second, limit=50)["entries"]]


async def test_the_hosts_place_is_a_live_worker_and_frees_when_it_ends(rig: Rig) -> None:
    first = await on(rig, "box")
    second = await on(rig, "box")
    await idle(rig, first)
    assert rig.state(second) == "queued"  # an idle worker on the box still holds it
    await rig.sup.close(first)
    await rig.settle()
    assert rig.state(second) == "working"
    assert rig.worker(second).prompts[0][1] == "work"


async def test_each_host_is_first_come_first_served_and_hosts_do_not_wait_for_each_other(rig: Rig) -> None:
    first = await on(rig, "box", "a")
    waiting = [await on(rig, "box", p) for p in ("b", "c")]
    gpu = await on(rig, "gpu")
    assert rig.state(gpu) == "working"
    await idle(rig, first)
    await rig.sup.close(first)
    await rig.settle()
    assert [rig.state(j) for j in waiting] == ["working", "queued"]


async def test_a_message_to_a_closed_job_on_a_full_host_waits_and_resumes_when_there_is_room(rig: Rig) -> None:
    first = await on(rig, "box")
    await idle(rig, first)
    await rig.sup.close(first)
    other = await on(rig, "box")  # takes the box's only place
    assert rig.state(other) == "working"
    answer = await rig.sup.send(first, "again", None)
    await rig.settle()
    assert answer == {"outcome": "queued", "job": first}
    assert len(rig.workers[first]) == 1 and rig.sup.engine.inbox[first] == 1
    await idle(rig, other)
    await rig.sup.close(other)
    await rig.settle()
    assert rig.state(first) == "working"
    assert [p for _, p in rig.worker(first).prompts] == ["again"]


async def test_a_spawn_let_go_by_its_host_still_waits_for_the_global_cap(rig: Rig) -> None:
    rig.config = replace(CFG, max_running_jobs=1)
    first = await on(rig, "box")
    waiting = await on(rig, "box")
    await idle(rig, first)
    local = await rig.spawn("here")  # the global place first's turn left
    assert rig.state(local) == "working"
    await rig.sup.close(first)
    await rig.settle()
    assert rig.state(waiting) == "queued"  # room on the box, none under the global cap
    await idle(rig, local)
    assert rig.state(waiting) == "working"


async def test_a_stopped_or_archived_job_leaves_its_hosts_queue(rig: Rig) -> None:
    first = await on(rig, "box")
    stopped, archived, last = [await on(rig, "box", p) for p in ("s", "a", "l")]
    await rig.sup.stop(stopped, False, None)
    await rig.sup.archive(archived)
    await idle(rig, first)
    await rig.sup.close(first)
    await rig.settle()
    assert rig.state(last) == "working"
    assert stopped not in rig.workers and archived not in rig.workers
    assert rig.sup.status()["queued"] == 0


async def test_raising_a_hosts_cap_in_the_config_starts_its_waiting_jobs(rig: Rig) -> None:
    jobs = [await on(rig, "box", str(i)) for i in range(3)]
    assert [rig.state(j) for j in jobs] == ["working", "queued", "queued"]
    rig.config = replace(CFG, hosts={**CFG.hosts, "box": replace(CFG.hosts["box"], max_running_jobs=3)})
    rig.sup.config_changed()
    await rig.settle()
    assert [rig.state(j) for j in jobs] == ["working"] * 3


async def test_thousands_waiting_on_one_host_start_one_by_one_in_order(rig: Rig) -> None:
    first = await on(rig, "box", "first")
    jobs = [await on(rig, "box", str(i)) for i in range(1500)]
    assert rig.sup.status()["queued"] == 1500
    await idle(rig, first)
    await rig.sup.close(first)
    await rig.settle()
    for i in range(3):
        assert rig.state(jobs[i]) == "working" and rig.state(jobs[i + 1]) == "queued"
        await idle(rig, jobs[i])
        await rig.sup.close(jobs[i])
        await rig.settle()
    assert rig.state(jobs[3]) == "working" and rig.sup.status()["queued"] == 1496


async def test_a_message_waiting_for_its_host_survives_a_restart_and_is_delivered(
        rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = await on(rig, "box")
    await idle(rig, first)
    await rig.sup.close(first)
    other = await on(rig, "box")
    await idle(rig, other)  # its idle worker holds the box's only place
    assert (await rig.sup.send(first, "after the restart", None))["outcome"] == "queued"
    await rig.sup.shutdown()
    again = Rig(tmp_path, CFG)  # the same state directory: a new daemon
    await again.settle()
    assert again.state(first) == "working" and again.state(other) == "idle"
    assert [p for _, p in again.worker(first).prompts] == ["after the restart"]
