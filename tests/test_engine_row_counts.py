"""What a job's row says of its provider subagents and its question, kept by the daemon as its
worker's events come: in process, a real store, fake workers (tests/engine_fakes.py), a fake clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from roost.config import Config
from roost.daemon.storage.store import Store
from roost.models import PEEK_MAX, QUESTION_MAX, Row
from roost.protocol import ENTRY_MAX
from roost.rules.provider_subagents import provider_rows
from roost.rules.views import subagent_counts
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=100, subagent_auto_close_delay=4, report_hold_max=60, max_running_jobs=0)


@pytest.fixture
async def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, CFG)


def subagent(ident: str, state: str, text: str = "") -> dict[str, Any]:
    return {"type": "subagent", "id": ident, "title": f"task {ident}", "state": state, "text": text}


def row(rig: Rig, job_id: str) -> Row:
    return Row.from_wire(rig.sup.index.row(job_id))


def panel_counts(rig: Rig, job_id: str) -> tuple[int, int]:
    """What the panel shows of the job's own subagents: its rows from every recorded entry."""
    entries = [e for e in rig.store.timeline_page(job_id, limit=100_000, budget=1 << 40)["entries"]
               if e["kind"] == "subagent"]
    shown = provider_rows(entries, row(rig, job_id))
    return len(shown), sum(r.state.value == "working" for r in shown)


async def test_a_parents_row_counts_its_subagents_as_they_start_and_end(rig: Rig) -> None:
    job = await rig.spawn("lead")
    worker = rig.worker(job)
    for event in (subagent("t1", "working", "count"), subagent("t2", "working", "look"),
                  subagent("t3", "working", "grep")):
        worker.on_event(event)
    await rig.settle()
    assert subagent_counts(row(rig, job)) == (3, 3) == panel_counts(rig, job)
    rig.recorder.rows.clear()
    worker.on_event(subagent("t2", "working", "halfway"))  # progress: nothing to count, no row pushed
    await rig.sup.engine.idle()  # the event is applied and committed: a push would be recorded by now
    assert not any(job in ids for ids in rig.recorder.rows)
    worker.on_event(subagent("t2", "done", "42 files"))
    worker.on_event(subagent("t3", "failed", "no such file"))
    await rig.settle()
    assert any(job in ids for ids in rig.recorder.rows)  # pushed: the row's counts changed
    assert subagent_counts(row(rig, job)) == (3, 1) == panel_counts(rig, job)
    # the turn ends with t1 still "working": it runs on in the background, here as in the panel
    worker.end_turn()
    await rig.settle()
    assert rig.state(job) == "idle"
    assert subagent_counts(row(rig, job)) == (3, 1) == panel_counts(rig, job)
    await rig.sup.close(job)  # a person closes it: t1 went with the worker, and the timeline says so
    await rig.settle()
    assert subagent_counts(row(rig, job)) == (3, 0) == panel_counts(rig, job)
    assert rig.sup.index.row(job, full=True)["provider_running"] == 0
    last = rig.store.last_entry(job, "subagent")
    assert last is not None and last["id"] == "t1" and last["state"] == "failed"
    assert "ended with its parent's worker (closed by its owner)" in last["text"]


async def test_a_running_background_subagent_keeps_an_idle_worker_until_it_ends(rig: Rig) -> None:
    job = await rig.spawn("lead")
    worker = rig.worker(job)
    worker.on_event(subagent("bg", "working", "survey the repo"))
    worker.end_turn()
    await rig.settle()
    await rig.advance(50)
    worker.on_event(subagent("bg", "working", "half way"))  # a word from it: another idle timeout from now
    await rig.settle()
    await rig.advance(50)  # the idle timeout: the reaper would close it, but bg still works
    assert job in rig.sup.engine.slots
    await rig.advance(49)
    assert job in rig.sup.engine.slots
    worker.on_event(subagent("bg", "done", "all read"))  # it ended: idle from now (room for the agent's own turn)
    await rig.settle()
    await rig.advance(100)
    assert job not in rig.sup.engine.slots and rig.job(job).reaped


async def test_a_background_subagent_silent_for_the_idle_timeout_is_taken_as_lost(rig: Rig) -> None:
    job = await rig.spawn("lead")
    worker = rig.worker(job)
    worker.on_event(subagent("bg", "working", "survey the repo"))
    worker.end_turn()
    await rig.settle()
    await rig.advance(99.9)
    assert job in rig.sup.engine.slots
    await rig.advance(0.1)
    assert job not in rig.sup.engine.slots
    assert subagent_counts(row(rig, job)) == (1, 0) == panel_counts(rig, job)
    assert "idle for 100s" in (rig.store.last_entry(job, "subagent") or {}).get("text", "")


async def test_a_done_child_is_not_auto_closed_while_its_background_subagent_runs(rig: Rig) -> None:
    parent = await rig.spawn("lead")
    child = await rig.spawn("sub", caller=parent)
    worker = rig.worker(child)
    worker.on_event(subagent("bg", "working", "survey"))
    await rig.sup.report(child, "done", "handed back")
    worker.end_turn()
    await rig.settle()
    await rig.advance(10)  # past the auto-close delay (4 s)
    assert child in rig.sup.engine.slots and rig.state(child) == "done"
    worker.on_event(subagent("bg", "done", "read"))
    await rig.settle()
    await rig.advance(4)  # the auto-close delay after its last word
    assert child not in rig.sup.engine.slots


async def test_a_subagents_long_id_title_and_state_are_cut_alike_so_it_counts_once(rig: Rig) -> None:
    job = await rig.spawn("lead")
    worker = rig.worker(job)
    long_id, title = "toolu_" + "9" * 100_000, "t" * 100_000
    worker.on_event({"type": "subagent", "id": long_id, "title": title, "state": "working" * 10_000, "text": "go"})
    worker.on_event({"type": "subagent", "id": long_id, "title": title, "state": "done", "text": "x" * 200_000})
    await rig.settle()
    entries = [e["data"] for e in rig.store.timeline_page(job)["entries"] if e["kind"] == "subagent"]
    assert [(len(e["id"]), len(e["title"]), len(e["state"])) for e in entries] == [(200, 200, 200), (200, 200, 4)]
    assert len(entries[1]["text"]) == ENTRY_MAX and entries[1]["cut"] == 200_000 - ENTRY_MAX
    assert subagent_counts(row(rig, job)) == (1, 0) == panel_counts(rig, job)


async def test_thousands_of_subagents_count_right_and_a_start_reads_no_timeline(
        rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = await rig.spawn("fan out")
    worker = rig.worker(job)
    for n in range(2000):
        worker.on_event(subagent(f"t{n}", "working", "go"))
        worker.on_event(subagent(f"t{n}", "working", "still going"))
        if n >= 3:  # three stay running
            worker.on_event(subagent(f"t{n}", "done" if n % 2 else "failed", "over"))
        if n % 200 == 0:
            await rig.settle()
    await rig.settle()
    assert subagent_counts(row(rig, job)) == (2000, 3) == panel_counts(rig, job)
    await rig.sup.shutdown()  # the three still running end with the worker, on its timeline
    await rig.settle()
    rig.store.close()

    reads: list[str] = []
    words = Store.subagent_words
    monkeypatch.setattr(Store, "subagent_words", lambda self, job_id: reads.append(job_id) or words(self, job_id))
    again = Rig(tmp_path, CFG)  # the daemon starts again on the same store
    assert reads == []  # its counts were on the record: no timeline was read to know them
    assert (again.job(job).provider_subagents, again.job(job).provider_running) == (2000, 0)
    await again.sup.send(job, "more", None)
    await again.settle()
    assert again.state(job) == "working"
    assert subagent_counts(row(again, job)) == (2000, 0) == panel_counts(again, job)  # a new worker runs none
    fresh = again.worker(job)
    fresh.on_event(subagent("t0", "working", "again"))  # one seen before the start: not counted twice
    fresh.on_event(subagent("new", "working"))
    fresh.on_event(subagent("t1", "done"))
    await again.settle()
    assert reads == [job]  # read once, at the first entry after the start
    assert subagent_counts(row(again, job)) == (2001, 2) == panel_counts(again, job)


async def test_a_waiting_row_carries_its_question_until_it_is_answered(rig: Rig) -> None:
    parent = await rig.spawn("lead")
    worker = rig.worker(parent)
    question = "Claude Code asks to use Bash: " + "x" * 10_000 + "\nallow it?"
    worker.on_event({"type": "text", "text": "I will clean the build first"})
    worker.on_event({"type": "turn_end", "run": worker.prompts[-1][0], "outcome": "waiting", "question": question})
    await rig.settle()
    slim, full = rig.sup.index.row(parent), rig.sup.index.row(parent, full=True)
    assert slim["state"] == "waiting" and slim["last_text"] == "I will clean the build first"
    assert len(slim["question"]) == PEEK_MAX
    assert slim["question"].startswith("Claude Code asks to use Bash: x") and slim["question"].endswith("x allow it?")
    assert len(full["question"]) == QUESTION_MAX and full["question"].endswith("x\nallow it?")
    # a child's report taken in while it waits leaves it waiting on the same question
    child = await rig.spawn("help", caller=parent)
    rig.worker(child).end_turn(text="the build dir is 3 GB")
    await rig.settle()
    assert len(worker.prompts) == 2  # the report went in as a turn of its own
    worker.end_turn()
    await rig.settle()
    assert rig.state(parent) == "waiting" and rig.sup.index.row(parent)["question"] == slim["question"]
    # answered: it works, and no question is on its row any more
    await rig.sup.send(parent, "yes", None)
    await rig.settle()
    assert rig.state(parent) == "working" and rig.sup.index.row(parent)["question"] == ""
    worker.end_turn(text="cleaned")
    await rig.settle()
    assert rig.state(parent) == "idle" and rig.sup.index.row(parent, full=True)["question"] == ""
