"""Claude Code's permission requests as roost approvals, end to end: the real ``claude`` run by the real
daemon against tests/fake_anthropic.py, whose model asks for a Bash call that would write a file
(``echo pwned > pwned.txt``). The file is the proof: present only after a person's approval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from roost.client import ClientError

from approval_checks import asked, nothing_runs_after, roost
from conftest import DaemonHarness
from test_claude_driver import START, claude_bin, claude_daemon, fake, timeline  # noqa: F401 (fixtures)
from test_races import token_of

PWN = "echo pwned > pwned.txt"
#: A Bash call whose description (the model's words) says something else than what it runs.
CALL = "CALL Bash " + json.dumps({"command": PWN, "description": "List the files"})


def workdir(daemon: DaemonHarness) -> Path:
    work = daemon.home / "work"
    work.mkdir(parents=True, exist_ok=True)
    return work


def asking(daemon: DaemonHarness, prompt: str = CALL) -> tuple[str, Path, dict[str, Any]]:
    """A Claude Code job spawned with ``prompt`` in its own directory, and the approval it then waits on
    (a background subagent's comes while the job is idle)."""
    work = workdir(daemon)
    job = daemon.spawn(prompt, driver="claude", cwd=str(work))
    ended = ("failed",) if prompt.startswith("CALL Task") else ("idle", "failed")
    return job, work, asked(daemon, job, START, ended)


def decisions(daemon: DaemonHarness, job: str) -> list[dict[str, Any]]:
    return [e for e in timeline(daemon, job, "approval") if "decision" in e]


def background_task(prompt: str) -> str:
    return "CALL Task " + json.dumps({"description": "the helper", "prompt": prompt,
                                      "subagent_type": "general-purpose"})


@pytest.mark.claude
def test_the_approval_shows_the_command_and_a_persons_approval_runs_it_at_once(claude_daemon, fake):
    daemon = claude_daemon()
    job, work, pending = asking(daemon)
    assert pending["tool"] == "Bash"
    assert pending["what"] == {"command": PWN, "cwd": str(work)}, "what runs, not the model's words"
    assert pending["description"] == "List the files"
    assert "subagent" not in pending
    assert not (work / "pwned.txt").exists()
    assert roost(daemon, "approve", job) == f"allowed {pending['id']} ({job})", "a job's one approval, by the job's id"
    row = daemon.wait_state(job, "idle", timeout=START)
    assert (work / "pwned.txt").read_text() == "pwned\n"
    assert row["last_text"] == "tool said: (Bash completed with no output)"
    assert row["approvals"] == []
    assert [d["by"] for d in decisions(daemon, job)] == ["a person"]


@pytest.mark.claude
def test_a_denial_runs_nothing_and_claude_hears_the_reason(claude_daemon, fake):
    daemon = claude_daemon()
    job, work, pending = asking(daemon)
    roost(daemon, "deny", pending["id"], "write nothing, list them")
    row = daemon.wait_state(job, "idle", timeout=START)
    assert not (work / "pwned.txt").exists()
    assert row["last_text"] == "tool said: write nothing, list them", "the model heard the reason"
    with pytest.raises(ClientError) as again:
        daemon.call("answer_approval", approval=pending["id"], decision="once")
    assert "already settled" in again.value.message
    assert not (work / "pwned.txt").exists()


@pytest.mark.claude
def test_a_message_sent_before_the_question_approves_nothing(claude_daemon, fake):
    daemon = claude_daemon()
    work = workdir(daemon)
    job = daemon.spawn(f"LATER 2 {CALL}", driver="claude", cwd=str(work))  # the call comes 2 s into the turn
    daemon.wait_for(lambda: fake.bodies_with("LATER 2") and daemon.show(job)["state"] == "working", timeout=START,
                    what="the turn to work before it asks")
    assert daemon.call("send", job=job, text="ok")["outcome"] == "queued"
    pending = asked(daemon, job, START)
    assert not (work / "pwned.txt").exists()
    assert [e["text"] for e in timeline(daemon, job, "prompt")] == [f"LATER 2 {CALL}"], "ok was not handed over"
    daemon.call("answer_approval", approval=pending["id"], decision="deny", reason="no")
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["last_text"] == "echo: ok", timeout=START,
                    what="the queued ok, as a prompt of its own after the turn")
    assert not (work / "pwned.txt").exists()


@pytest.mark.claude
def test_after_a_stop_the_next_message_runs_nothing(claude_daemon, fake):
    daemon = claude_daemon()
    job, work, pending = asking(daemon)
    assert daemon.call("stop", job=job)["stopped"] == 1
    row = daemon.wait_state(job, "stopped", timeout=START)
    assert row["approvals"] == []
    assert decisions(daemon, job)[-1]["by"] == "a stop"
    daemon.wait_for(lambda: [e["outcome"] for e in timeline(daemon, job, "turn_end")] == ["aborted"],
                    timeout=START, what="the turn cut")
    nothing_runs_after(daemon, job, pending, work / "pwned.txt", START)


@pytest.mark.claude
def test_no_job_answers_an_approval_not_a_child_nor_a_sibling(claude_daemon, fake):
    daemon = claude_daemon()
    job, work, pending = asking(daemon)
    child = daemon.spawn("say ready", parent=job)
    sibling = daemon.spawn("say ready")
    for other in (child, sibling):
        token = token_of(daemon.wait_state(other, "idle"))
        with daemon.client(job=other, token=token) as as_job, pytest.raises(ClientError) as info:
            as_job.call("answer_approval", approval=pending["id"], decision="once")
        assert info.value.code == "auth", info.value.message
    assert [a["id"] for a in daemon.show(job)["approvals"]] == [pending["id"]], "still pending"
    assert not (work / "pwned.txt").exists()
    daemon.call("answer_approval", approval=pending["id"], decision="deny")
    daemon.wait_state(job, "idle", timeout=START)
    assert not (work / "pwned.txt").exists()


@pytest.mark.claude
def test_a_background_subagents_request_after_its_parents_turn_reaches_the_person(claude_daemon, fake):
    daemon = claude_daemon()
    job, work, pending = asking(daemon, background_task(f"LATER 3 {CALL}"))
    kinds = [e["kind"] for e in daemon.timeline(job)]
    assert kinds.index("turn_end") < kinds.index("approval"), "asked after the parent's turn ended"
    [entry] = {e["id"]: e for e in timeline(daemon, job, "subagent")}.values()
    assert pending["subagent"] == entry["id"], "the subagent that asks, by the id its entries have"
    assert pending["what"] == {"command": PWN, "cwd": str(work)}
    assert daemon.show(job)["provider_running"] == 1
    daemon.call("answer_approval", approval=pending["id"], decision="once")
    daemon.wait_for(lambda: (work / "pwned.txt").exists(), timeout=START, what="the subagent's command to run")
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["provider_running"] == 0, timeout=START,
                    what="the subagent done and the parent idle again")
    assert timeline(daemon, job, "subagent")[-1]["state"] == "done"


@pytest.mark.claude
def test_a_background_subagent_is_stopped_by_roost_stop_and_its_row_says_so(claude_daemon, fake):
    daemon = claude_daemon()
    job = daemon.spawn(background_task("SLOW"), driver="claude")
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["provider_running"] == 1, timeout=START,
                    what="the parent idle while its subagent streams")
    assert roost(daemon, "stop", job) == f"stopped 1 job: {job} (and 1 subagent of the agent's own)"
    row = daemon.wait_row(job, lambda r: r["provider_running"] == 0, timeout=START, what="the subagent stopped")
    assert row["state"] == "stopped"
    last = timeline(daemon, job, "subagent")[-1]
    assert last["state"] == "stopped" and last["text"].startswith("stopped before it finished")


@pytest.mark.claude
def test_a_stop_of_a_background_subagent_waiting_on_a_request_denies_it_at_the_agent(claude_daemon, fake):
    daemon = claude_daemon()
    job, work, pending = asking(daemon, background_task(f"LATER 3 {CALL}"))
    assert daemon.call("stop", job=job, tree=True)["ids"] == [job]
    daemon.wait_row(job, lambda r: r["state"] == "stopped" and r["provider_running"] == 0, timeout=START,
                    what="the subagent stopped")
    assert decisions(daemon, job)[-1]["by"] == "a stop"
    nothing_runs_after(daemon, job, pending, work / "pwned.txt", START)


@pytest.mark.claude
def test_the_cwd_an_approval_shows_is_where_the_command_runs_after_a_cd_too(claude_daemon, fake):
    daemon = claude_daemon()
    work = workdir(daemon)
    (work / "sub").mkdir()
    job = daemon.spawn('CALL Bash {"command": "cd sub"}', driver="claude", cwd=str(work))  # allowed: it writes nothing
    daemon.wait_state(job, "idle", timeout=START)
    daemon.call("send", job=job, text='CALL Bash {"command": "pwd > where.txt"}')
    pending = asked(daemon, job, START, ended=("failed",))
    assert pending["what"] == {"command": "pwd > where.txt", "cwd": str(work)}
    daemon.call("answer_approval", approval=pending["id"], decision="once")
    # The shell makes the file before pwd writes to it: wait for its line, not for the file.
    daemon.wait_for(lambda: (work / "where.txt").exists() and (work / "where.txt").read_text().endswith("\n"),
                    timeout=START, what="the command to run")
    assert (work / "where.txt").read_text() == f"{work}\n" and not (work / "sub" / "where.txt").exists()


@pytest.mark.claude
def test_a_long_command_with_another_in_its_middle_is_asked_not_allowed_by_a_prefix_rule(claude_daemon, fake):
    """Issue 31, item 1, with Claude Code: its request comes whole (once cut at 16 KiB by the adapter,
    then to 8 KiB by the daemon before its rules read it, so `Bash:echo hi*` allowed what hid `touch`)."""
    daemon = claude_daemon('approval_rules = ["Bash:echo hi*"]\n')
    command = "echo hi " + "a" * 5000 + "; touch PWNED; echo " + "b" * 12000
    job, work, pending = asking(daemon, "CALL Bash " + json.dumps({"command": command}))
    assert not (work / "PWNED").exists()
    assert pending["what"]["cut"] > 0 and "PWNED" not in pending["what"]["command"]
    assert f"roost approvals --full {pending['id']}" in roost(daemon, "approvals")
    assert roost(daemon, "approvals", "--full", pending["id"]) == f"tool: Bash\ncommand: {command}\ncwd: {work}"
    roost(daemon, "deny", pending["id"], "no")
    daemon.wait_state(job, "idle", timeout=START)
    assert not (work / "PWNED").exists()
    assert [d["by"] for d in decisions(daemon, job)] == ["a person"]


@pytest.mark.claude
def test_a_path_rule_does_not_allow_a_write_through_a_link_that_leads_outside_its_directory(claude_daemon, fake,
                                                                                           tmp_path):
    """Issue 31, item 6: ``Write:WORK/*`` matched ``WORK/link/x`` with the link leading out of WORK (the
    daemon resolves it; Claude Code takes ``..`` out of a path itself, and the rules do too:
    tests/test_rules_approval_scope.py)."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (work / "link").symlink_to(outside)
    daemon = claude_daemon(f'approval_rules = ["Write:{work}/*"]\n')
    job = daemon.spawn("CALL Write " + json.dumps({"file_path": f"{work}/fine.txt", "content": "ok\n"}),
                       driver="claude", cwd=str(work))
    daemon.wait_state(job, "idle", timeout=START)
    assert (work / "fine.txt").read_text() == "ok\n", "the rule allows a write inside"
    target = f"{work}/link/PWNED"
    daemon.call("send", job=job, text="CALL Write " + json.dumps({"file_path": target, "content": "x\n"}))
    pending = asked(daemon, job, START, ended=("failed",))
    assert pending["what"]["path"] == target, "the person sees the path as asked"
    roost(daemon, "deny", pending["id"], "no")
    daemon.wait_state(job, "idle", timeout=START)
    assert not (outside / "PWNED").exists()


@pytest.mark.claude
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_an_approval_outlives_a_restart_of_the_daemon_with_its_worker_asked_again_under_the_same_id(
        claude_daemon, fake, how):
    """Issue 31, item 9: a restart while a Claude Code job waited on an approval left it idle with no
    turn end and no word to its parent (SIGTERM), or failed (SIGKILL). Its worker outlives the daemon,
    so the approval is re-adopted with it: the same id asked again, nothing run meanwhile."""
    daemon = claude_daemon()
    job, work, pending = asking(daemon)
    pid = daemon.show(job)["pid"]
    daemon.kill() if how == "SIGKILL" else daemon.stop(keep_workers=True)
    daemon.start()
    row = daemon.wait_for(lambda: (r := daemon.show(job)) and [a["id"] for a in r["approvals"]] == [pending["id"]]
                          and [e for e in timeline(daemon, job, "approval") if e.get("again")] and r,
                          timeout=START, what="the approval asked again")
    assert row["state"] == "waiting" and row["pid"] == pid
    assert not (work / "pwned.txt").exists(), "nothing ran meanwhile"
    assert roost(daemon, "approve", pending["id"]) == f"allowed {pending['id']} ({job})"
    daemon.wait_state(job, "idle", timeout=START)
    assert (work / "pwned.txt").read_text() == "pwned\n"
    assert [e["outcome"] for e in timeline(daemon, job, "turn_end")] == ["ok"]
    assert [d["by"] for d in decisions(daemon, job)] == ["a person"]
