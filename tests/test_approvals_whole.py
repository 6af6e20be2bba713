"""Rules decide on the whole request (issue 31, item 1), end to end with the real daemon and the
built-in agent's ``ask-run``: a command longer than the daemon keeps, whose middle chains another
command after the one an allow rule names, is never allowed by that rule; the person is asked, told
how much is hidden, and reads it all with ``roost approvals --full``. The file it would make is the
proof."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from roost.rules.approvals import WHAT_MAX
from tests.conftest import DaemonHarness
from tests.test_approvals import cli, decisions, pending

#: `echo hi <5,000 chars>; touch PWNED; <5,000 chars>`: the daemon once cut it to WHAT_MAX before its
#: rules read it, taking `; touch PWNED;` out of the middle, so `echo hi*` allowed it and it ran.
ATTACK = "echo hi " + "a" * 5000 + "; touch PWNED; echo " + "b" * 5000


def test_a_long_request_with_a_command_in_its_middle_is_not_allowed_by_a_prefix_rule(daemon_factory: Any,
                                                                                      tmp_path: Path) -> None:
    daemon = daemon_factory('[drivers.some]\nkind = "builtin"\napproval_rules = ["shell:echo hi*"]\n')
    where = tmp_path / "w"
    where.mkdir()
    job = daemon.spawn(f"ask-run echo hi there\nask-run {ATTACK}", cwd=str(where), driver="some")
    [entry] = pending(daemon, job)
    assert [d["by"] for d in decisions(daemon, job)] == ["policy"], "the short one went by the rule"
    assert not (where / "PWNED").exists()
    kept = entry["what"]
    assert len(json.dumps(kept).encode()) <= WHAT_MAX and kept["cut"] > 0
    shown = kept["command"].replace("…", "")  # where the middle went
    assert len(shown) + kept["cut"] == len(ATTACK), "exactly how much is hidden"
    assert "PWNED" not in shown
    listed = cli(daemon, "approvals").stdout
    assert f"{kept['cut']:,} characters of it hidden" in listed and f"roost approvals --full {entry['id']}" in listed
    whole = cli(daemon, "approvals", "--full", job).stdout
    assert whole == f"tool: shell\ncommand: {ATTACK}\ncwd: {where}\n", "the person reads all of it"
    asked = [e["data"] for e in daemon.timeline(job) if e["kind"] == "approval" and e["data"].get("asked")]
    assert asked[-1]["id"] == entry["id"]
    cli(daemon, "deny", entry["id"], "no")
    daemon.wait_state(job, "idle")
    assert not (where / "PWNED").exists()


def test_a_long_request_is_allowed_whole_by_its_persons_answer_and_runs_as_asked(daemon: DaemonHarness,
                                                                                 tmp_path: Path) -> None:
    where = tmp_path / "w"
    where.mkdir()
    command = "echo " + "c" * (3 * WHAT_MAX) + " > made.txt"
    job = daemon.spawn(f"ask-run {command}", cwd=str(where))
    [entry] = pending(daemon, job)
    assert entry["what"]["cut"] > 0
    page = daemon.call("approval_text", approval=entry["id"], offset=10)
    assert page["text"] == f"tool: shell\ncommand: {command}\ncwd: {where}\n"[10:] and page["next"] is None
    assert page["whole"] is True and page["total"] == len(f"tool: shell\ncommand: {command}\ncwd: {where}\n")
    cli(daemon, "approve", entry["id"])
    made = where / "made.txt"
    daemon.wait_for(lambda: made.exists() and made.read_text() == "c" * (3 * WHAT_MAX) + "\n",
                    what="the whole command to run")


# -- rules as narrow as what the person saw (issue 31, item 6) --------------------------------------------
def test_approving_a_wrapped_command_for_the_job_allows_that_command_and_not_another_behind_it(
        daemon: DaemonHarness, tmp_path: Path) -> None:
    where = tmp_path / "w"
    where.mkdir()
    job = daemon.spawn("ask-run env FOO=1 ls\nask-run env FOO=1 touch PWNED\nsay after", cwd=str(where))
    [entry] = pending(daemon, job)
    out = cli(daemon, "approve", "--for-job", entry["id"]).stdout
    assert out.endswith("the job may now: shell:env FOO=1 ls\n"), out
    [other] = daemon.wait_for(lambda: [a for a in pending(daemon, job) if a["id"] != entry["id"]],
                              what="the second request to be asked, not allowed by the rule")
    assert other["what"]["command"] == "env FOO=1 touch PWNED"
    assert not (where / "PWNED").exists()
    cli(daemon, "deny", other["id"])
    daemon.wait_state(job, "idle")
    assert not (where / "PWNED").exists()


def test_a_git_prefix_rule_does_not_allow_git_c_or_an_alias(daemon_factory: Any, tmp_path: Path) -> None:
    daemon = daemon_factory('[drivers.git]\nkind = "builtin"\napproval_rules = ["shell:git *"]\n')
    where = tmp_path / "repo"
    where.mkdir()
    subprocess.run(["git", "init", "-q", str(where)], check=True)
    attack = "git -c alias.x='!touch PWNED' x"
    job = daemon.spawn(f"ask-run git status --short\nask-run {attack}", cwd=str(where), driver="git")
    [entry] = pending(daemon, job)
    assert entry["what"]["command"] == attack and [d["by"] for d in decisions(daemon, job)] == ["policy"]
    assert not (where / "PWNED").exists()
    cli(daemon, "deny", entry["id"])
    daemon.wait_state(job, "idle")
    assert not (where / "PWNED").exists()
