"""Rate limits and retries in the engine, in process: a real store, fake workers, the fake clock.

A turn the provider bounced (a final ``limited`` event, or a failed end whose words say 429) leaves
the job ``rate_limited`` with its message put back; the job's deadline timer resumes it at the reset
(docs/lifecycle.md#rate-limited)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from roost.config import Config
from roost.daemon.engine.limits import BACKOFF_FIRST, BACKOFF_MAX, backoff
from roost.models import Row
from roost.rules.row_text import activity_text
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=100, subagent_auto_close_delay=4, report_hold_max=60, max_running_jobs=0)


@pytest.fixture
async def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, CFG)


def bounce(rig: Rig, job: str, until: float | None, words: str = "Claude Code: You've hit your limit") -> None:
    """The agent says a limit bounced its call and gives up: the turn ends failed."""
    worker = rig.worker(job)
    worker.on_event({"type": "limited", "words": words, "retrying": False,
                     **({"until": until} if until is not None else {})})
    worker.on_event({"type": "turn_end", "run": worker.prompts[-1][0], "outcome": "failed", "error": words})


async def test_a_bounced_turn_is_rate_limited_and_goes_again_at_the_reset_and_not_before(rig: Rig) -> None:
    job = await rig.spawn("write the file")
    bounce(rig, job, until=rig.clock.wall() + 30)
    await rig.settle()
    record = rig.job(job)
    assert record.state.value == "rate_limited"
    assert record.limited_until == rig.clock.wall() + 30
    assert rig.sup.engine.inbox[job] == 1  # the bounced message waits, not lost
    assert rig.sup.engine.next_deadline(job) == rig.clock.mono() + 30
    said, failure = activity_text(Row(record), 200)
    assert said.startswith("rate limited until ") and said.endswith("· Claude Code: You've hit your limit")
    assert not failure
    await rig.advance(29)
    assert rig.state(job) == "rate_limited" and len(rig.worker(job).prompts) == 1
    await rig.advance(1)
    assert rig.state(job) == "working"
    assert [text for _, text in rig.worker(job).prompts] == ["write the file", "write the file"]
    assert rig.job(job).limited_until is None and rig.job(job).limited_words == ""
    rig.worker(job).end_turn(text="written")
    await rig.settle()
    assert rig.state(job) == "idle" and rig.sup.engine.inbox[job] == 0


async def test_messages_sent_by_agents_wait_for_the_reset_and_a_persons_message_goes_at_once(rig: Rig) -> None:
    parent = await rig.spawn("lead")
    job = await rig.spawn("first", caller=parent)
    bounce(rig, job, until=rig.clock.wall() + 600)
    await rig.settle()
    await rig.sup.send(job, "from the parent", caller=parent)
    await rig.settle()
    assert rig.state(job) == "rate_limited" and rig.sup.engine.inbox[job] == 2
    await rig.sup.send(job, "try now", None)
    await rig.settle()
    assert rig.state(job) == "working"
    assert rig.worker(job).prompts[-1][1] == "first"  # in order: the bounced one first
    note = rig.store.last_entry(job, "note")
    assert note is not None and note["message"] == "rate limit: trying again (a person's message)"


async def test_a_new_worker_for_a_rate_limited_job_still_waits_for_the_reset(rig: Rig) -> None:
    job = await rig.spawn("first")
    bounce(rig, job, until=rig.clock.wall() + 600)
    await rig.settle()
    await rig.sup.close(job)  # the worker goes (a restart, a close); the record keeps the reset
    await rig.settle()
    assert job not in rig.sup.engine.slots and rig.state(job) == "rate_limited"
    await rig.advance(100)
    await rig.sup.attach(job, conn_id=1, resume=True)  # a person opens it: its worker starts again
    await rig.settle()
    assert job in rig.sup.engine.slots and rig.state(job) == "rate_limited"
    assert rig.worker(job).prompts == []
    assert rig.sup.engine.next_deadline(job) == rig.clock.mono() + 500
    await rig.advance(500)
    assert rig.state(job) == "working" and rig.worker(job).prompts[-1][1] == "first"


async def test_with_no_reset_time_the_back_off_doubles_to_its_cap_and_resets_after_a_good_turn(rig: Rig) -> None:
    assert [backoff(n) for n in (1, 2, 3, 4, 5, 6)] == [60, 120, 240, 480, 900, 900]
    job = await rig.spawn("go")
    for wait in (BACKOFF_FIRST, 2 * BACKOFF_FIRST):
        bounce(rig, job, until=None, words="pi: 429 Too Many Requests")
        await rig.settle()
        assert rig.state(job) == "rate_limited"
        assert rig.sup.engine.next_deadline(job) == rig.clock.mono() + wait
        await rig.advance(wait)
        assert rig.state(job) == "working"
    rig.worker(job).end_turn()
    await rig.settle()
    await rig.sup.send(job, "again", None)
    await rig.settle()
    bounce(rig, job, until=None)
    await rig.settle()
    assert rig.sup.engine.next_deadline(job) == rig.clock.mono() + BACKOFF_FIRST
    assert backoff(100) == BACKOFF_MAX


async def test_a_failed_end_whose_words_say_429_is_a_limit_and_other_failures_are_failures(rig: Rig) -> None:
    job, other = await rig.spawn("go"), await rig.spawn("go")
    worker = rig.worker(job)
    worker.on_event({"type": "turn_end", "run": worker.prompts[-1][0], "outcome": "failed",
                     "error": "429 Rate limit reached. Please try again in 30s."})
    await rig.settle()
    assert rig.state(job) == "rate_limited"
    rig.worker(other).on_event({"type": "turn_end", "run": rig.worker(other).prompts[-1][0],
                                "outcome": "failed", "error": "the model is not there"})
    await rig.settle()
    assert rig.state(other) == "failed" and rig.sup.engine.inbox[other] == 0


async def test_a_reset_a_day_away_is_kept_and_a_reset_in_the_past_goes_at_once(rig: Rig) -> None:
    job, other = await rig.spawn("go"), await rig.spawn("go")
    bounce(rig, job, until=rig.clock.wall() + 90_000)
    await rig.settle()
    assert rig.sup.engine.next_deadline(job) == rig.clock.mono() + 86_400  # UNTIL_MAX
    day = time.strftime("%Y-%m-%d %H:%M", time.localtime(rig.clock.wall() + 86_400))
    assert activity_text(Row(rig.job(job)), 200)[0].startswith(f"rate limited until {day} · ")  # with its date
    bounce(rig, other, until=rig.clock.wall() - 5)
    await rig.settle()
    await rig.advance(0)
    assert rig.state(other) == "working"


async def test_on_rate_limit_ask_waits_for_a_person_after_the_reset(tmp_path: Path) -> None:
    rig = Rig(tmp_path, replace(CFG, on_rate_limit="ask"))
    job = await rig.spawn("go")
    bounce(rig, job, until=rig.clock.wall() + 10)
    await rig.settle()
    await rig.advance(10)
    assert rig.state(job) == "rate_limited" and len(rig.worker(job).prompts) == 1
    assert rig.sup.engine.next_deadline(job) is None  # no timer firing over and over
    await rig.advance(1000)
    assert rig.state(job) == "rate_limited"
    await rig.sup.send(job, "go on", None)
    await rig.settle()
    assert rig.state(job) == "working" and rig.worker(job).prompts[-1][1] == "go"


async def test_a_rate_limited_job_keeps_its_worker_past_the_idle_timeout(rig: Rig) -> None:
    job = await rig.spawn("go")
    bounce(rig, job, until=rig.clock.wall() + 500)
    await rig.settle()
    await rig.advance(150)  # idle_timeout = 100
    assert job in rig.sup.engine.slots and rig.state(job) == "rate_limited"


async def test_a_stop_ends_the_limit(rig: Rig) -> None:
    job = await rig.spawn("go")
    bounce(rig, job, until=rig.clock.wall() + 500)
    await rig.settle()
    await rig.sup.stop(job, tree=False, caller=None)
    await rig.settle()
    record = rig.job(job)
    assert record.state.value == "stopped" and record.limited_until is None and record.limited_words == ""
    await rig.advance(600)
    assert rig.state(job) == "stopped" and len(rig.worker(job).prompts) == 1


async def test_retry_words_show_on_the_row_while_working_and_clear_at_the_next_real_event(rig: Rig) -> None:
    job = await rig.spawn("go")
    worker = rig.worker(job)
    worker.on_event({"type": "retrying", "words": "pi: Connection error.", "attempt": 1, "of": 3, "delay": 2.0})
    await rig.settle()
    record = rig.job(job)
    assert record.state.value == "working" and record.notice == "pi: Connection error."
    assert activity_text(Row(record), 200) == ("pi: Connection error.", False)
    entry = rig.store.last_entry(job, "retrying")
    assert entry is not None and (entry["words"], entry["attempt"], entry["of"]) == ("pi: Connection error.", 1, 3)
    worker.on_event({"type": "limited", "words": "Claude Code: rate limited (429 rate_limit); retry 1 of 10",
                     "retrying": True, "until": rig.clock.wall() + 2, "attempt": 1})
    await rig.settle()
    assert rig.state(job) == "working"  # the agent retries by itself
    assert rig.job(job).notice.startswith("Claude Code: rate limited")
    assert "limited" in rig.kinds(job) and "note" not in rig.kinds(job)  # no "unknown worker event"
    worker.on_event({"type": "text", "text": "back"})
    await rig.settle()
    assert rig.job(job).notice == "" and activity_text(Row(rig.job(job)), 200)[0] == "back"


async def test_limit_words_are_bounded_and_made_plain(rig: Rig) -> None:
    job = await rig.spawn("go")
    rig.worker(job).on_event({"type": "retrying", "words": "x" * 5000 + " \x1b[31mboom\x1b[0m"})
    await rig.settle()
    notice = rig.job(job).notice
    assert notice.endswith("x boom") and len(notice) == 300 and "\x1b" not in notice


async def test_other_jobs_on_the_account_start_no_turn_until_the_reset(tmp_path: Path) -> None:
    builtin = CFG.driver("builtin")
    rig = Rig(tmp_path, replace(CFG, drivers={**CFG.drivers, "second": replace(builtin, name="second")}))
    limited, same, other = (await rig.spawn("a"), await rig.spawn("b"),
                            await rig.spawn("c", driver="second"))
    for job in (same, other):
        rig.worker(job).end_turn()
    await rig.settle()
    bounce(rig, limited, until=rig.clock.wall() + 40)
    await rig.settle()
    await rig.sup.send(same, "next", None)
    await rig.sup.send(other, "next", None)
    await rig.settle()
    assert rig.state(same) == "idle" and rig.sup.engine.inbox[same] == 1  # held: it waits, not lost
    notice = rig.job(same).notice
    assert notice.startswith("waits for the rate limit on builtin to reset at ") and f"job {limited}" in notice
    assert activity_text(Row(rig.job(same)), 200)[0] == notice
    assert rig.state(other) == "working"  # another profile is another account: not held
    assert rig.sup.engine.next_deadline(same) == rig.clock.mono() + 40
    await rig.advance(40)
    assert rig.state(same) == "working" and rig.worker(same).prompts[-1][1] == "next"
    assert rig.job(same).notice == ""
    assert rig.state(limited) == "working"


def test_the_model_check_steps_through_a_limit_its_reset_and_a_stall() -> None:
    """The model check's vocabulary (tests/engine_model.py) in one fixed sequence, its invariants
    checked after each step: a bounce with a reset, the reset's resume, a stall, a bounce with none."""
    from tests.engine_model import EngineModel

    model = EngineModel()
    checks = [getattr(model, name) for name in dir(EngineModel)
              if getattr(getattr(EngineModel, name), "hypothesis_stateful_invariant", None) is not None]
    assert "a_rate_limited_job_runs_no_turn_and_its_reset_is_kept" in [c.__name__ for c in checks]
    try:
        def step(name: str, **args: object) -> None:
            getattr(model, name)(**args)
            for check in checks:
                check()

        step("spawn", parent=9, by_job=False)
        step("time_passes", seconds=0.5)
        job = model.jobs[0]
        step("retrying", pick=0)
        assert model.rig.job(job).notice == "Connection error."
        step("limited", pick=0, until=3, retrying=False, fails=False)
        assert model.rig.state(job) == "rate_limited"
        step("time_passes", seconds=4)
        assert model.rig.state(job) == "working"  # resumed at the reset
        step("time_passes", seconds=51)  # stall_after = 45 in the model's config
        assert model.rig.job(job).stall == "stalled"
        step("limited", pick=0, until=None, retrying=False, fails=True)  # a 429 in the error only
        assert model.rig.state(job) == "rate_limited"
        assert model.rig.job(job).stall == ""
    finally:
        model.teardown()
