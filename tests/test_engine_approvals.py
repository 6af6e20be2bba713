"""Approvals in the engine, in process: a real store, fake workers, the fake clock. What a pending
approval does to the job, who and what settles it, the policy and its inheritance, the timeout."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from roost.config import Config
from roost.protocol import ProtocolError
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=100, subagent_auto_close_delay=4, report_hold_max=60, max_running_jobs=0,
             approval_timeout=600)


@pytest.fixture
async def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, CFG)


def decisions(rig: Rig, job: str) -> list[dict[str, Any]]:
    """The job's approval entries that settle one (every decision is on the timeline)."""
    return [e["data"] for e in rig.store.timeline_page(job, limit=2000)["entries"]
            if e["kind"] == "approval" and "decision" in e["data"]]


async def asked(rig: Rig, job: str, wid: str = "w1", command: str = "echo hi > f") -> str:
    rig.worker(job).ask(wid, command)
    await rig.settle()
    pending = rig.job(job).approvals
    assert pending and pending[-1]["what"]["command"] == command
    return pending[-1]["id"]


async def test_an_approval_makes_the_job_wait_and_a_persons_answer_lets_it_go_on(rig: Rig) -> None:
    job = await rig.spawn()
    aid = await asked(rig, job)
    assert aid.startswith("ap-")
    assert rig.state(job) == "waiting"
    row = rig.sup.index.row(job)
    assert [a["id"] for a in row["approvals"]] == [aid] and row["approvals"][0]["tool"] == "shell"
    assert set(row["approvals"][0]) == {"id", "wid", "tool", "what", "asked_at"}
    result = await rig.sup.answer_approval(aid, "once", "", None)
    await rig.settle()
    assert result == {"approval": aid, "job": job, "decision": "allow"}
    assert rig.worker(job).answers == [{"approval": "w1", "decision": "allow", "reason": "allowed by a person"}]
    assert rig.state(job) == "working" and rig.job(job).approvals == []
    assert decisions(rig, job)[-1] | {"what": None} == {"id": aid, "tool": "shell", "what": None, "decision": "allow",
                                                        "by": "a person"}
    with pytest.raises(ProtocolError) as again:
        await rig.sup.answer_approval(aid, "once", "", None)
    assert again.value.code == "refused" and "already settled: allowed by a person" in again.value.message
    assert len(rig.worker(job).answers) == 1


async def test_a_denial_carries_the_persons_reason_to_the_agent(rig: Rig) -> None:
    job = await rig.spawn()
    aid = await asked(rig, job)
    await rig.sup.answer_approval(aid, "deny", "use the test runner instead", None)
    await rig.settle()
    assert rig.worker(job).answers[-1] == {"approval": "w1", "decision": "deny", "reason": "use the test runner instead"}
    assert decisions(rig, job)[-1]["reason"] == "use the test runner instead"


async def test_a_message_while_pending_denies_with_its_text_and_is_not_a_prompt(rig: Rig) -> None:
    job = await rig.spawn()
    aid = await asked(rig, job)
    result = await rig.sup.send(job, "yes", None)
    await rig.settle()
    assert result == {"outcome": "denied", "job": job, "approvals": [aid]}
    assert rig.worker(job).answers == [{"approval": "w1", "decision": "deny", "reason": "yes"}]
    assert decisions(rig, job)[-1]["by"] == "a person's message"
    rig.worker(job).end_turn()
    await rig.settle()
    assert [p for _, p in rig.worker(job).prompts] == ["work"]  # the text was the reason, never a prompt


async def test_a_message_before_the_approval_is_queued_and_answers_nothing(rig: Rig) -> None:
    job = await rig.spawn()
    assert (await rig.sup.send(job, "ok", None))["outcome"] == "queued"
    aid = await asked(rig, job)
    assert rig.worker(job).answers == []
    assert [a["id"] for a in rig.job(job).approvals] == [aid]
    await rig.sup.answer_approval(aid, "once", "", None)
    rig.worker(job).end_turn()
    await rig.settle()
    assert [p for _, p in rig.worker(job).prompts] == ["work", "ok"]


@pytest.mark.parametrize("how", ["stop", "stop_tree", "archive"])
async def test_a_stop_denies_at_the_agent_before_the_abort(rig: Rig, how: str) -> None:
    job = await rig.spawn()
    aid = await asked(rig, job)
    if how == "archive":
        await rig.sup.archive(job)
    else:
        await rig.sup.stop(job, how == "stop_tree", None)
    await rig.settle()
    kinds = [k for k, _ in rig.worker(job).commands]
    assert kinds.index("approval_answer") < kinds.index("abort")
    if how == "archive":  # and its worker is closed only after both
        assert kinds.index("abort") < kinds.index("close")
    assert rig.worker(job).answers[0]["decision"] == "deny"
    assert rig.job(job).approvals == [] and rig.state(job) == "stopped"
    assert decisions(rig, job)[-1]["by"] == ("the archive" if how == "archive" else "a stop")
    with pytest.raises(ProtocolError):
        await rig.sup.answer_approval(aid, "once", "", None)


async def test_a_stop_of_the_tree_denies_the_childs_approval_too(rig: Rig) -> None:
    parent = await rig.spawn()
    child = await rig.spawn(caller=parent)
    await asked(rig, child)
    await rig.sup.stop(parent, True, None)
    await rig.settle()
    assert rig.worker(child).answers[0]["decision"] == "deny" and rig.state(child) == "stopped"


async def test_close_denies_a_background_request_and_the_job_goes_back(rig: Rig) -> None:
    job = await rig.spawn()
    rig.worker(job).end_turn()
    await rig.settle()
    await asked(rig, job)  # no turn in flight: a provider's background subagent asks
    assert rig.state(job) == "waiting"
    assert rig.sup.engine.next_deadline(job) == rig.clock.mono() + 600  # the reaper waits; the timeout does not
    await rig.sup.close(job)
    await rig.settle()
    kinds = [k for k, _ in rig.worker(job).commands]
    assert kinds.index("approval_answer") < kinds.index("close") and rig.worker(job).answers[0]["decision"] == "deny"
    assert rig.state(job) == "idle" and job not in rig.sup.engine.slots


async def test_the_timeout_denies_what_nobody_answered(rig: Rig) -> None:
    job = await rig.spawn()
    await asked(rig, job)
    await rig.advance(599)
    assert rig.job(job).approvals
    await rig.advance(1)
    assert rig.job(job).approvals == [] and rig.state(job) == "working"
    assert rig.worker(job).answers[0]["decision"] == "deny"
    assert "approval_timeout = 600s" in rig.worker(job).answers[0]["reason"]
    assert decisions(rig, job)[-1]["by"] == "the timeout"


async def test_a_timeout_of_zero_waits_for_ever(rig: Rig) -> None:
    rig.config = replace(CFG, approval_timeout=0, idle_timeout=0)
    job = await rig.spawn()
    await asked(rig, job)
    assert rig.sup.engine.next_deadline(job) is None
    await rig.advance(10 ** 7)
    assert rig.job(job).approvals


async def test_the_worker_ending_settles_its_approvals_as_gone(rig: Rig) -> None:
    job = await rig.spawn()
    aid = await asked(rig, job)
    rig.worker(job).exit(1)
    await rig.settle()
    assert rig.job(job).approvals == [] and rig.state(job) == "failed"
    assert decisions(rig, job)[-1]["decision"] == "gone"
    assert aid not in rig.sup.engine.approvals.jobs


async def test_a_withdrawn_approval_is_settled_and_the_job_works_again(rig: Rig) -> None:
    job = await rig.spawn()
    await asked(rig, job)
    rig.worker(job).on_event({"type": "approval_withdrawn", "approval": "w1"})
    await rig.settle()
    assert rig.job(job).approvals == [] and rig.state(job) == "working"
    assert decisions(rig, job)[-1]["decision"] == "withdrawn"


async def test_approve_for_the_job_adds_a_rule_that_allows_the_next_alike_request(rig: Rig) -> None:
    job = await rig.spawn()
    aid = await asked(rig, job, command="git status --short")
    result = await rig.sup.answer_approval(aid, "job", "", None)
    assert result["rule"] == "shell:git status*"
    rig.worker(job).ask("w2", "git status")
    await rig.settle()
    assert rig.job(job).approvals == []
    assert rig.worker(job).answers[-1]["decision"] == "allow"
    assert "a person granted" in decisions(rig, job)[-1]["reason"]
    rig.worker(job).ask("w3", "git status; rm -rf /")  # a prefix never covers a chained command
    await rig.settle()
    assert len(rig.job(job).approvals) == 1


@pytest.mark.parametrize("mode, verdict", [("allow", "allow"), ("deny", "deny")])
async def test_the_policy_decides_without_a_person(rig: Rig, mode: str, verdict: str) -> None:
    job = await rig.spawn(approvals=mode)
    rig.worker(job).ask("w1")
    await rig.settle()
    assert rig.job(job).approvals == [] and rig.state(job) == "working"
    assert rig.worker(job).answers[0]["decision"] == verdict
    assert decisions(rig, job)[-1]["by"] == "policy"


async def test_a_rule_allows_what_it_names_and_asks_for_the_rest(rig: Rig) -> None:
    job = await rig.spawn(approval_rules=["shell:npm test*"])
    rig.worker(job).ask("w1", "npm test -- --watch")
    await rig.settle()
    assert rig.worker(job).answers[0]["decision"] == "allow"
    assert "shell:npm test*" in decisions(rig, job)[-1]["reason"]
    await asked(rig, job, "w2", "npm publish")


async def test_a_child_is_never_looser_than_its_parent(rig: Rig) -> None:
    parent = await rig.spawn(approval_rules=["shell:ls*"])
    child = await rig.spawn(caller=parent, approvals="allow", approval_rules=["shell:rm*"])
    rig.worker(child).ask("w1", "rm -rf build")
    await rig.settle()
    assert rig.job(child).approvals  # its own allow counts only within its parent's: asked
    rig.worker(child).ask("w2", "ls -la")
    await rig.settle()
    assert rig.worker(child).answers[-1] == {"approval": "w2", "decision": "allow",
                                             "reason": rig.worker(child).answers[-1]["reason"]}
    strict = await rig.spawn(approvals="deny")
    kid = await rig.spawn(caller=strict, approvals="allow")
    rig.worker(kid).ask("w1")
    await rig.settle()
    assert rig.worker(kid).answers[0]["decision"] == "deny"


async def test_the_daemons_restart_settles_a_pending_approval_as_gone(tmp_path: Path) -> None:
    rig = Rig(tmp_path, CFG)
    job = await rig.spawn()
    rig.worker(job).end_turn()
    await rig.settle()
    await asked(rig, job)
    assert rig.state(job) == "waiting"
    again = Rig(tmp_path, CFG)  # a new daemon on the same store: the worker is gone
    assert again.job(job).approvals == [] and again.state(job) == "idle"
    assert decisions(again, job)[-1]["by"] == "the daemon's restart"


async def test_past_pending_max_the_next_request_is_denied_at_once_saying_so(rig: Rig) -> None:
    from roost.rules.approvals import PENDING_MAX

    job = await rig.spawn()
    for i in range(PENDING_MAX):
        rig.worker(job).ask(f"w{i}")
    await rig.settle()
    assert len(rig.job(job).approvals) == PENDING_MAX and rig.worker(job).answers == []
    rig.worker(job).ask("one-more")
    await rig.settle()
    assert len(rig.job(job).approvals) == PENDING_MAX
    assert rig.worker(job).answers[0]["approval"] == "one-more" and rig.worker(job).answers[0]["decision"] == "deny"
    assert f"{PENDING_MAX} approvals already wait" in rig.worker(job).answers[0]["reason"]


async def test_the_row_carries_the_models_words_and_the_subagent_bounded(rig: Rig) -> None:
    from roost.rules.approvals import WHAT_MAX

    job = await rig.spawn()
    rig.worker(job).ask("w1", "x" * (4 * WHAT_MAX), description="List the files" * 1000, subagent="explorer")
    await rig.settle()
    [entry] = rig.sup.index.row(job)["approvals"]
    assert entry["subagent"] == "explorer" and len(entry["description"]) == 2000
    assert entry["what"]["cut"] > 0 and len(repr(entry["what"])) < WHAT_MAX + 100


async def test_a_request_without_a_usable_id_is_refused_on_the_timeline(rig: Rig) -> None:
    job = await rig.spawn()
    rig.worker(job).on_event({"type": "approval", "approval": 7, "tool": "shell", "what": {}})
    await rig.settle()
    assert rig.job(job).approvals == [] and rig.state(job) == "working"
    assert "without a usable id" in rig.store.last_entry(job, "error")["message"]


async def test_a_message_from_another_job_denies_too_and_says_whose(rig: Rig) -> None:
    other = await rig.spawn()
    job = await rig.spawn()
    await asked(rig, job)
    result = await rig.sup.send(job, "yes, go ahead", other)
    await rig.settle()
    assert result["outcome"] == "denied" and rig.worker(job).answers[0]["decision"] == "deny"
    assert decisions(rig, job)[-1]["by"] == f"a message from job {other}"


async def test_bad_answers_are_refused_saying_what_was_wrong(rig: Rig) -> None:
    from roost.rules.approvals import REASON_MAX

    job = await rig.spawn()
    aid = await asked(rig, job, command="$(ls *)")
    for args, says in [((aid, "once", "", "shell:ls*"), "goes with decision \"job\""),
                       ((aid, "job", "", "shell:"), "nothing after ':'"),
                       ((aid, "deny", "x" * (REASON_MAX + 1), None), f"at most {REASON_MAX}"),
                       ((aid, "job", "", None), "give the rule"),
                       (("ap-nothere", "once", "", None), "no pending approval")]:
        with pytest.raises(ProtocolError) as exc:
            await rig.sup.answer_approval(*args)
        assert exc.value.code == "bad_args" and says in exc.value.message, args
    assert rig.worker(job).answers == [] and len(rig.job(job).approvals) == 1
    result = await rig.sup.answer_approval(aid, "job", "", "shell")  # the person's own rule: any shell command
    assert result["rule"] == "shell" and rig.job(job).approval_grants == ["shell"]
    await rig.settle()
    assert rig.worker(job).answers[-1]["decision"] == "allow"


async def test_a_spawn_with_a_bad_policy_is_refused(rig: Rig) -> None:
    with pytest.raises(ProtocolError) as exc:
        await rig.spawn(approval_rules=["two words:x"])
    assert exc.value.code == "bad_args" and "one word" in exc.value.message
    assert rig.sup.index.jobs == {}


async def test_an_older_question_is_not_shown_while_the_job_waits_on_an_approval(rig: Rig) -> None:
    job = await rig.spawn()
    rig.worker(job).on_event({"type": "turn_end", "run": rig.worker(job).prompts[-1][0], "outcome": "waiting",
                              "question": "which branch?"})
    await rig.settle()
    assert rig.sup.index.row(job)["question"] == "which branch?"
    await rig.sup.send(job, "main", None)
    await rig.settle()
    await asked(rig, job)  # a new turn, and now an approval: the old question is not what it asks
    assert rig.sup.index.row(job)["question"] == ""


async def test_a_shutdown_denies_at_the_agent_before_it_aborts_and_closes(rig: Rig) -> None:
    job = await rig.spawn()
    await asked(rig, job)
    await rig.sup.shutdown()
    kinds = [k for k, _ in rig.worker(job).commands]
    assert kinds[kinds.index("approval_answer"):] == ["approval_answer", "abort", "close"]
    assert rig.worker(job).answers[0]["reason"] == "the roost daemon shut down"
    assert rig.job(job).approvals == [] and decisions(rig, job)[-1]["decision"] == "gone"


def test_the_daemon_remembers_how_the_last_settled_approvals_went_and_no_more() -> None:
    from roost.daemon.engine.book import SETTLED_KEPT, Book

    book = Book()
    ids = [book.new_id() for _ in range(SETTLED_KEPT + 1)]
    assert len(set(ids)) == len(ids) and all(i.startswith("ap-") and len(i) == 9 for i in ids)
    for aid in ids[:SETTLED_KEPT]:
        book.done(aid, "allowed by a person")
    assert "already settled: allowed by a person" in book.refusal(ids[0]).message
    book.done(ids[-1], "denied by a stop")
    assert len(book.settled) == SETTLED_KEPT
    assert book.refusal(ids[0]).code == "bad_args"  # the oldest is forgotten: "no pending approval"
    assert book.refusal(ids[-1]).code == "refused"


async def test_a_long_tool_name_is_cut_to_its_bound(rig: Rig) -> None:
    from roost.rules.approvals import WORD_MAX

    job = await rig.spawn()
    rig.worker(job).ask("w1", tool="T" * WORD_MAX)
    rig.worker(job).ask("w2", tool="T" * (WORD_MAX + 50))
    await rig.settle()
    first, second = rig.job(job).approvals
    assert first["tool"] == "T" * WORD_MAX and len(second["tool"]) == WORD_MAX and "…" in second["tool"]


async def test_a_request_after_a_stop_is_denied_at_once(rig: Rig) -> None:
    job = await rig.spawn()
    await rig.sup.stop(job, False, None)
    await rig.settle()
    rig.worker(job).ask("late")  # a provider's subagent that still runs asks after the stop
    await rig.settle()
    assert rig.job(job).approvals == [] and rig.state(job) == "stopped"
    assert rig.worker(job).answers == [{"approval": "late", "decision": "deny",
                                        "reason": "denied by roost: the job is stopped: nothing it asks runs"}]
    assert decisions(rig, job)[-1]["by"] == "a stop"


@pytest.mark.parametrize("how", ["answered", "restart"])
async def test_an_approval_asked_while_the_job_waits_on_its_question_leaves_it_waiting(tmp_path: Path,
                                                                                       how: str) -> None:
    """Found by the model check: settling the approval (a person's answer, or a restart that takes it
    away) put the job back in the state it waited from — waiting, on its question — which the
    table refuses as a change; it stays waiting, its question kept."""
    rig = Rig(tmp_path, CFG)
    job = await rig.spawn()
    rig.worker(job).end_turn("waiting", text="which one?")
    await rig.settle()
    aid = await asked(rig, job)
    assert rig.state(job) == "waiting"
    if how == "answered":
        await rig.sup.answer_approval(aid, "once", "", None)
        await rig.settle()
        after = rig
    else:
        after = Rig(tmp_path, CFG)
        await after.settle()
    assert after.state(job) == "waiting" and after.job(job).approvals == [] and after.job(job).question
