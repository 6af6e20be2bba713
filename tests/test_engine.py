"""The engine's ordering and timing rules, in process: a real store, fake workers, a fake clock."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from roost.config import Config
from roost.protocol import ProtocolError
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=100, subagent_auto_close_delay=4, report_hold_max=60, max_running_jobs=0)


@pytest.fixture
async def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, CFG)


async def test_a_spawn_starts_a_worker_and_hands_it_the_prompt(rig: Rig) -> None:
    job = await rig.spawn("say hi")
    assert rig.state(job) == "working"
    assert rig.worker(job).prompts == [(rig.worker(job).prompts[0][0], "say hi")]
    rig.worker(job).end_turn(text="hi")
    await rig.settle()
    assert rig.state(job) == "idle"
    assert rig.job(job).last_text == "hi"


async def test_the_reaper_closes_an_idle_worker_at_its_deadline_and_not_before(rig: Rig) -> None:
    job = await rig.spawn()
    rig.worker(job).end_turn()
    await rig.settle()
    assert rig.sup.engine.next_deadline(job) == rig.clock.mono() + 100
    await rig.advance(99)
    assert job in rig.sup.engine.slots
    await rig.advance(1)
    assert job not in rig.sup.engine.slots
    assert rig.job(job).reaped and rig.job(job).pid is None
    assert rig.state(job) == "idle"


@pytest.mark.parametrize("message_first", [True, False])
async def test_a_message_racing_the_reaper_is_delivered_once_by_one_worker(rig: Rig, message_first: bool) -> None:
    job = await rig.spawn()
    rig.worker(job).end_turn()
    await rig.settle()
    rig.clock.advance(100)
    if message_first:
        send = rig.sup.send(job, "again", None)
        rig.sup.engine.fire_due()
        result = await send
    else:
        rig.sup.engine.fire_due()
        result = await rig.sup.send(job, "again", None)
    await rig.settle()
    prompts = [p for w in rig.workers[job] for _, p in w.prompts]
    assert prompts == ["work", "again"]
    assert sum(not w.exited for w in rig.workers[job]) == 1
    assert rig.state(job) == "working"
    assert result["outcome"] in ("delivered", "resumed")


async def test_a_done_child_closes_after_the_auto_close_delay(rig: Rig) -> None:
    parent = await rig.spawn("lead")
    child = await rig.spawn("sub", caller=parent)
    await rig.sup.report(child, "done", "all good")
    rig.worker(child).end_turn()
    await rig.settle()
    assert rig.state(child) == "done"
    await rig.advance(3.9)
    assert child in rig.sup.engine.slots
    await rig.advance(0.1)
    assert child not in rig.sup.engine.slots
    assert rig.job(child).reaped and rig.state(child) == "done"


async def test_a_report_is_held_during_the_parents_turn_and_steered_in_when_the_hold_runs_out(rig: Rig) -> None:
    parent = await rig.spawn("lead")
    child = await rig.spawn("sub", caller=parent)
    rig.worker(child).end_turn(text="half way")
    await rig.settle()
    assert rig.worker(parent).steers == []
    assert rig.sup.store.pending_reports(parent)
    await rig.advance(59)
    assert rig.worker(parent).steers == []
    await rig.advance(1)
    assert len(rig.worker(parent).steers) == 1 and "half way" in rig.worker(parent).steers[0]
    assert not rig.sup.store.pending_reports(parent)
    reports = [e for e in rig.recorder.entries if e["kind"] == "reports"]
    assert reports[-1]["data"]["reports"][0]["child"] == child
    assert reports[-1]["data"]["steer"] is True


async def test_a_report_held_during_a_turn_is_delivered_when_the_turn_ends(rig: Rig) -> None:
    parent = await rig.spawn("lead")
    child = await rig.spawn("sub", caller=parent)
    rig.worker(child).end_turn(text="result")
    await rig.settle()
    rig.worker(parent).end_turn()
    await rig.settle()
    assert [p for _, p in rig.worker(parent).prompts][1].startswith("<roost-report")
    assert rig.state(parent) == "working"


async def test_spawns_beyond_the_cap_are_queued_and_start_when_a_slot_frees(rig: Rig) -> None:
    rig.config = replace(CFG, max_running_jobs=2)
    jobs = [await rig.spawn(f"job {i}") for i in range(4)]
    assert [rig.state(j) for j in jobs] == ["working", "working", "queued", "queued"]
    assert rig.sup.status()["queued"] == 2
    assert jobs[2] not in rig.workers
    rig.worker(jobs[0]).end_turn()
    await rig.settle()
    assert [rig.state(j) for j in jobs] == ["idle", "working", "working", "queued"]


async def test_raising_the_cap_in_the_config_starts_queued_spawns(rig: Rig) -> None:
    rig.config = replace(CFG, max_running_jobs=1)
    jobs = [await rig.spawn(f"job {i}") for i in range(3)]
    assert [rig.state(j) for j in jobs] == ["working", "queued", "queued"]
    rig.config = replace(CFG, max_running_jobs=5)
    rig.sup.config_changed()
    await rig.settle()
    assert [rig.state(j) for j in jobs] == ["working", "working", "working"]


async def test_a_stop_cuts_the_turn_and_a_late_turn_end_cannot_settle_a_newer_turn(rig: Rig) -> None:
    job = await rig.spawn()
    result = await rig.sup.stop(job, False, None)
    await rig.settle()
    assert result["ids"] == [job] and rig.state(job) == "stopped"
    assert rig.worker(job).aborts == 1
    rig.worker(job).on_event({"type": "turn_end", "run": 1, "outcome": "ok"})
    await rig.settle()
    assert rig.state(job) == "stopped"


async def test_detaching_a_middle_job_fixes_its_descendants_depths(rig: Rig) -> None:
    a = await rig.spawn("a")
    b = await rig.spawn("b", caller=a)
    c = await rig.spawn("c", caller=b)
    d = await rig.spawn("d", caller=c)
    await rig.sup.detach(b)
    assert [rig.job(j).depth for j in (a, b, c, d)] == [0, 0, 1, 2]
    assert rig.sup.index.counts(a) == (0, 0)
    assert rig.sup.index.counts(b) == (2, 2)
    stored = {j.id: j.depth for j in rig.store.jobs()}
    assert [stored[j] for j in (b, c, d)] == [0, 1, 2]


async def test_counts_follow_children_as_they_finish(rig: Rig) -> None:
    parent = await rig.spawn("lead")
    kids = [await rig.spawn(f"sub {i}", caller=parent) for i in range(3)]
    assert rig.sup.index.counts(parent) == (3, 3)
    rig.worker(kids[0]).end_turn()
    await rig.settle()
    assert rig.sup.index.counts(parent) == (3, 2)
    await rig.sup.archive(kids[1])
    await rig.settle()
    assert rig.sup.index.counts(parent) == (2, 1)
    assert any(parent in ids for ids in rig.recorder.rows)


async def test_an_idle_daemon_arms_no_timer_for_jobs_without_a_worker(rig: Rig) -> None:
    job = await rig.spawn()
    rig.worker(job).end_turn()
    await rig.settle()
    await rig.advance(100)
    assert job not in rig.sup.engine.slots
    assert rig.sup.engine.next_deadline(job) is None


async def test_a_failed_or_stopped_row_says_why_and_other_states_say_nothing(rig: Rig) -> None:
    job = await rig.spawn()
    rig.worker(job).end_turn(outcome="failed")
    await rig.settle()
    assert rig.state(job) == "failed" and rig.job(job).reason == "the turn failed"
    assert rig.sup.index.row(job)["reason"] == "the turn failed"
    await rig.sup.send(job, "again", None)
    await rig.settle()
    assert rig.state(job) == "working" and rig.job(job).reason == ""
    await rig.sup.stop(job, False, None)
    assert rig.job(job).reason == "stopped by a person"


async def test_a_persons_message_restarts_a_stopped_job_and_an_agents_is_refused(rig: Rig) -> None:
    from roost.protocol import ProtocolError

    lead = await rig.spawn("lead")
    job = await rig.spawn("sub", caller=lead)
    await rig.sup.stop(job, False, None)
    await rig.settle()
    with pytest.raises(ProtocolError) as info:
        await rig.sup.send(job, "from the lead", lead)
    assert info.value.code == "stopped"
    result = await rig.sup.send(job, "go on", None)
    await rig.settle()
    assert result["outcome"] == "restarted"
    assert rig.state(job) == "working" and rig.worker(job).prompts[-1][1] == "go on"


async def test_rename_and_unarchive_bring_back_the_subtree_archived_with_it(rig: Rig) -> None:
    root = await rig.spawn("root")
    kid = await rig.spawn("kid", caller=root)
    grandkid = await rig.spawn("grandkid", caller=kid)
    await rig.sup.rename(kid, "  the   kid ")
    assert rig.job(kid).title == "the kid"
    await rig.sup.archive(kid)
    await rig.settle()
    assert rig.sup.index.counts(root) == (0, 0)
    assert {r["id"] for r in rig.sup.list_page(archived_only=True)["rows"]} == {kid, grandkid}
    await rig.sup.unarchive(kid)
    assert rig.job(kid).archived_at is None and rig.job(grandkid).archived_at is None
    assert rig.job(kid).parent == root and rig.sup.index.counts(root)[0] == 2
    assert rig.state(kid) == "stopped", "archived while it worked: it stays stopped"
    assert rig.sup.list_page(archived_only=True)["rows"] == []


async def test_unarchiving_a_child_of_an_archived_parent_makes_it_a_root(rig: Rig) -> None:
    root = await rig.spawn("root")
    kid = await rig.spawn("kid", caller=root)
    await rig.sup.archive(root)
    await rig.settle()
    await rig.sup.unarchive(kid)
    assert rig.job(kid).parent is None and rig.job(kid).depth == 0 and rig.job(root).archived_at is not None


async def test_a_lone_surrogate_a_worker_says_is_kept_as_a_replacement_character(rig: Rig) -> None:
    job = await rig.spawn()
    rig.worker(job).end_turn(text="half an emoji \ud83d here")
    await rig.settle()
    assert rig.job(job).last_text == "half an emoji \ufffd here"
    assert rig.sup.list_page()["rows"][0]["last_text"] == "half an emoji \ufffd here"


async def test_a_stopped_job_closes_at_once_even_before_its_aborted_turn_ends(rig: Rig) -> None:
    job = await rig.spawn()
    rig.worker(job).abort_gate = asyncio.Event()
    await rig.sup.stop(job, False, None)
    await rig.settle()
    assert rig.sup.engine.slots[job].turn is not None, "the abort's turn_end has not come"
    result = await rig.sup.close(job)
    assert result == {"closed": True} and job not in rig.sup.engine.slots
    assert rig.state(job) == "stopped" and rig.job(job).reaped



async def test_a_tree_at_max_tree_jobs_takes_no_more_children_until_one_is_archived(rig: Rig) -> None:
    rig.config = replace(CFG, max_tree_jobs=3, max_spawns_per_minute=0)
    root = await rig.spawn()
    kid = await rig.spawn(caller=root)
    grandkid = await rig.spawn(caller=kid)  # the tree holds 3 jobs: its cap
    for caller, parent in ((kid, None), (None, root)):  # from a job, and a person's spawn into the tree
        with pytest.raises(ProtocolError) as refused:
            await rig.spawn(caller=caller, **({"parent": parent} if parent else {}))
        assert refused.value.code == "quota"
        assert f"the tree of {root} holds 3 jobs, its cap (max_tree_jobs = 3)" in refused.value.message
    assert len(rig.sup.index.descendants(root)) == 2
    await rig.spawn("a root of its own")  # another tree is not this one
    await rig.sup.archive(grandkid)
    await rig.settle()
    await rig.spawn(caller=kid)  # the archived one's place is free again


async def test_spawns_into_a_tree_past_max_spawns_per_minute_are_refused_until_the_minute_moves_on(rig: Rig) -> None:
    rig.config = replace(CFG, max_tree_jobs=0, max_spawns_per_minute=3)
    root = await rig.spawn()
    first = await rig.spawn(caller=root)
    rig.clock.advance(30)
    await rig.spawn(caller=first)
    await rig.spawn(caller=root)  # the third in 60 s: at the cap, taken
    with pytest.raises(ProtocolError) as refused:
        await rig.spawn(caller=first)
    assert refused.value.code == "quota"
    assert "spawned 3 jobs in the last 60 s, its cap (max_spawns_per_minute = 3)" in refused.value.message
    rig.clock.advance(29.9)  # the first is 59.9 s old: still in the window
    with pytest.raises(ProtocolError):
        await rig.spawn(caller=root)
    rig.clock.advance(0.1)  # now it is 60 s old: one place
    await rig.spawn(caller=root)
    with pytest.raises(ProtocolError):
        await rig.spawn(caller=root)
    assert len(rig.sup.index.descendants(root)) == 4


def _output_bytes(rig: Rig, job: str) -> int:
    """The job's output as stored, read from the file (not the store's count)."""
    return rig.store._db.execute("SELECT COALESCE(SUM(LENGTH(CAST(data AS BLOB))), 0) FROM timeline WHERE job=? "
                                 "AND kind IN ('text', 'tool', 'note', 'error')", (job,)).fetchone()[0]


async def test_output_past_max_timeline_bytes_drops_the_oldest_keeps_the_newest_and_says_so(rig: Rig) -> None:
    job = await rig.spawn("say")
    piece = len('{"text": ""}') + 1000  # one text entry of 1,000 characters, as stored
    rig.config = replace(CFG, max_timeline_bytes=10 * piece)
    for n in range(10):
        rig.worker(job).on_event({"type": "text", "text": f"n{n:03d} " + "x" * 995})
    await rig.settle()
    assert _output_bytes(rig, job) == 10 * piece  # at the bound: all kept
    assert "note" not in rig.kinds(job)
    rig.worker(job).on_event({"type": "text", "text": "n010 " + "x" * 995})  # past it
    await rig.settle()
    entries = rig.store.timeline_page(job, limit=100)["entries"]
    texts = [e["data"]["text"][:4] for e in entries if e["kind"] == "text"]
    assert texts == ["n004", "n005", "n006", "n007", "n008", "n009", "n010"]  # the newest, down to 3/4 of it
    notes = [e["data"]["message"] for e in entries if e["kind"] == "note"]
    assert notes == [f"this job's output on its timeline reached its bound of {10 * piece} bytes "
                     f"(max_timeline_bytes): its oldest 4 output entries ({4 * piece} bytes) were dropped; "
                     "the newest output is kept"]
    assert entries[0]["kind"] == "spawned" and "prompt" in rig.kinds(job)  # what is not output stays
    assert _output_bytes(rig, job) == rig.store.output.of(job) <= 10 * piece
    found = [r["text"] for n in range(11) for r in rig.store.search(f"n{n:03d}", lambda _: True, 5, None)["results"]]
    assert len(found) == 7 and not any("n003" in t for t in found)  # the dropped left the search index too


async def test_the_output_count_is_read_from_the_store_once_forgotten(rig: Rig) -> None:
    job = await rig.spawn("say")
    rig.worker(job).on_event({"type": "text", "text": "y" * 500})
    await rig.settle()
    stored = _output_bytes(rig, job)
    assert rig.store.output.of(job) == stored
    rig.store.output.forget()
    assert rig.store.output.of(job) == stored
