"""Approvals end to end: the real daemon, the built-in agent's ``ask-run`` asking for permission, the
`roost` CLI answering. Only a person's answer to the approval's id runs the command (the file it
writes appears); a message, a job, a stop never do (the file stays absent)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from roost.client import Client, ClientError
from tests.conftest import DaemonHarness

ROOT = Path(__file__).resolve().parents[1]
ROOST = f"{sys.executable} -m roost.cli"


def cli(daemon: DaemonHarness, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "roost.cli", *args], env=daemon.env, capture_output=True, text=True,
                          timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"roost {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def pending(daemon: DaemonHarness, job: str, count: int = 1) -> list[dict[str, Any]]:
    """Wait until the job waits on ``count`` approvals; their entries."""
    row = daemon.wait_row(job, lambda r: len(r.get("approvals") or []) >= count and r["state"] == "waiting",
                          what=f"job {job} to wait on an approval")
    return row["approvals"]


def decisions(daemon: DaemonHarness, job: str) -> list[dict[str, Any]]:
    return [e["data"] for e in daemon.timeline(job) if e["kind"] == "approval" and "decision" in e["data"]]


def env_of(path: Path) -> dict[str, str]:
    """The environment a job's ``run env > FILE`` wrote down."""
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def asking_job(daemon: DaemonHarness, where: Path, target: str = "made.txt", before: str = "") -> str:
    where.mkdir(exist_ok=True)
    return daemon.spawn(f"{before}ask-run echo made > {target}\nsay after", cwd=str(where))


def test_a_persons_approve_runs_the_command_at_once(daemon: DaemonHarness, tmp_path: Path) -> None:
    job = asking_job(daemon, tmp_path / "w")
    [entry] = pending(daemon, job)
    assert entry["tool"] == "shell" and entry["what"] == {"command": "echo made > made.txt", "cwd": str(tmp_path / "w")}
    assert not (tmp_path / "w" / "made.txt").exists()
    listed = cli(daemon, "approvals").stdout
    assert entry["id"] in listed and "shell: echo made > made.txt" in listed and job in listed
    assert [(a["id"], a["job"]) for a in json.loads(cli(daemon, "approvals", "--json").stdout)] == [(entry["id"], job)]
    assert "approve? shell: echo made > made.txt" in cli(daemon, "ls").stdout
    assert "waits for a person to approve" in cli(daemon, "show", job).stdout
    out = cli(daemon, "approve", job).stdout  # a job id with one pending approval names it
    assert f"allowed {entry['id']}" in out
    daemon.wait_for(lambda: (tmp_path / "w" / "made.txt").exists(), what="the approved command to run")
    daemon.wait_state(job, "idle")
    assert decisions(daemon, job)[-1]["by"] == "a person" and decisions(daemon, job)[-1]["decision"] == "allow"
    again = cli(daemon, "approve", entry["id"], check=False)
    assert again.returncode != 0 and "already settled: allowed by a person" in again.stderr


def test_deny_with_a_reason_the_agent_hears_and_the_turn_goes_on(daemon: DaemonHarness, tmp_path: Path) -> None:
    job = asking_job(daemon, tmp_path / "w")
    [entry] = pending(daemon, job)
    out = cli(daemon, "deny", entry["id"], "use make instead").stdout
    assert "denied" in out and "use make instead" in out
    daemon.wait_state(job, "idle")
    texts = daemon.texts(job)
    assert "not run: echo made > made.txt (denied: use make instead)" in texts and "after" in texts
    assert not (tmp_path / "w" / "made.txt").exists()


def test_a_message_before_the_request_is_a_prompt_afterwards_and_approves_nothing(daemon: DaemonHarness,
                                                                                 tmp_path: Path) -> None:
    where = tmp_path / "w"
    job = asking_job(daemon, where, before="run while [ ! -e go ]; do sleep 0.05; done\n")
    daemon.wait_state(job, "working")
    assert cli(daemon, "send", job, "yes").stdout.startswith("queued")  # sent while the turn works
    (where / "go").touch()
    [entry] = pending(daemon, job)
    assert "yes" not in daemon.texts(job)  # still in the inbox: not an answer
    cli(daemon, "deny", entry["id"])
    daemon.wait_for(lambda: "yes" in daemon.texts(job), what="the early message to come as a prompt")
    assert [e["data"]["text"] for e in daemon.timeline(job) if e["kind"] == "prompt"][-1] == "yes"
    assert not (where / "made.txt").exists()


def test_a_message_while_pending_denies_with_its_text(daemon: DaemonHarness, tmp_path: Path) -> None:
    job = asking_job(daemon, tmp_path / "w")
    [entry] = pending(daemon, job)
    out = cli(daemon, "send", job, "yes").stdout
    assert out.startswith("denied") and entry["id"] in out
    daemon.wait_state(job, "idle")
    assert "not run: echo made > made.txt (denied: yes)" in daemon.texts(job)
    assert decisions(daemon, job)[-1]["by"] == "a person's message"
    assert not (tmp_path / "w" / "made.txt").exists()


@pytest.mark.parametrize("how", ["stop", "stop --tree", "archive"])
def test_after_a_stop_no_message_releases_the_request(daemon: DaemonHarness, tmp_path: Path, how: str) -> None:
    where = tmp_path / "w"
    where.mkdir()
    parent = daemon.spawn("wait-for never", cwd=str(where))
    job = daemon.spawn("ask-run echo made > made.txt", cwd=str(where), parent=parent)
    [entry] = pending(daemon, job)
    target = parent if how == "stop --tree" else job
    cli(daemon, *how.split(), target)
    daemon.wait_state(job, "stopped")
    assert decisions(daemon, job)[-1]["decision"] == "deny"
    if how != "archive":  # a person's message restarts a stopped job: a new turn, never the old request
        cli(daemon, "send", job, "ok")
        daemon.wait_for(lambda: "ok" in daemon.texts(job), what="the message to be a prompt of its own")
    refused = cli(daemon, "approve", entry["id"], check=False)
    assert refused.returncode != 0 and "already settled" in refused.stderr
    assert not (where / "made.txt").exists()


def test_no_job_may_answer_an_approval(daemon: DaemonHarness, tmp_path: Path) -> None:
    """The asking job, its parent, its child, its grandchild and a sibling, each with its own token,
    are refused; so is the roost CLI run from a child's shell. The command never runs."""
    where = tmp_path / "w"
    where.mkdir()
    root = daemon.spawn("run env > root.env\nwait-for never", cwd=str(where))
    asker = daemon.spawn("run env > asker.env\nask-run echo pwned > pwned.txt", cwd=str(where), parent=root)
    sibling = daemon.spawn("run env > sibling.env\nwait-for never", cwd=str(where), parent=root)
    [entry] = pending(daemon, asker)
    child = daemon.spawn(f"run env > child.env\nrun {ROOST} approve {asker}", cwd=str(where), parent=asker)
    grandchild = daemon.spawn("run env > grandchild.env\nwait-for never", cwd=str(where), parent=child)
    daemon.wait_state(child, "failed")  # its `roost approve` was refused: the run failed its turn
    assert "a person only" in daemon.show(child)["reason"]
    for name, job in (("root", root), ("asker", asker), ("sibling", sibling), ("child", child),
                      ("grandchild", grandchild)):
        env = daemon.wait_for(lambda: (where / f"{name}.env").exists() and env_of(where / f"{name}.env"),
                              what=f"{name}'s environment")
        assert env["ROOST_JOB_ID"] == job
        try:
            with Client.connect(daemon.paths.socket, client="test", job=job, token=env["ROOST_TOKEN"]) as client:
                for decision in ("once", "job", "deny"):
                    with pytest.raises(ClientError) as refused:
                        client.answer_approval(entry["id"], decision)
                    assert refused.value.code == "auth", name
        except ClientError as exc:  # its worker is gone (the child failed): its token died with it
            assert exc.code == "auth" and job == child, (name, exc)
    assert [a["id"] for a in daemon.show(asker)["approvals"]] == [entry["id"]]
    assert not (where / "pwned.txt").exists()
    cli(daemon, "deny", entry["id"])


def test_the_policy_of_a_driver_profile_decides_without_asking(daemon_factory: Any, tmp_path: Path) -> None:
    daemon = daemon_factory('[drivers.open]\nkind = "builtin"\napprovals = "allow"\n'
                            '[drivers.shut]\nkind = "builtin"\napprovals = "deny"\n'
                            '[drivers.some]\nkind = "builtin"\napproval_rules = ["shell:touch some*"]\n')
    where = tmp_path / "w"
    where.mkdir()
    allowed = daemon.spawn("ask-run echo made > open.txt", cwd=str(where), driver="open")
    denied = daemon.spawn("ask-run echo made > shut.txt", cwd=str(where), driver="shut")
    ruled = daemon.spawn("ask-run touch some.txt\nask-run touch some.txt > other.txt", cwd=str(where), driver="some")
    daemon.wait_state(allowed, "idle")
    daemon.wait_state(denied, "idle")
    assert (where / "open.txt").exists() and not (where / "shut.txt").exists()
    assert decisions(daemon, allowed)[-1]["by"] == decisions(daemon, denied)[-1]["by"] == "policy"
    [entry] = pending(daemon, ruled)  # the rule let `touch some.txt` go; with a redirection after it, it asks
    assert (where / "some.txt").exists() and entry["what"]["command"] == "touch some.txt > other.txt"
    cli(daemon, "deny", ruled)


def test_a_child_asking_for_allow_under_an_ask_parent_still_asks(daemon: DaemonHarness, tmp_path: Path) -> None:
    where = tmp_path / "w"
    where.mkdir()
    parent = daemon.spawn(f"run {ROOST} spawn --approvals allow 'ask-run echo made > kid.txt'\nwait-for never",
                          cwd=str(where))
    child = daemon.wait_for(lambda: daemon.children(parent), what="the child")[0]["id"]
    [entry] = pending(daemon, child)
    assert [lv["mode"] for lv in daemon.show(child)["approval_policy"]] == ["ask", "allow"]
    assert not (where / "kid.txt").exists()
    cli(daemon, "approve", entry["id"])
    daemon.wait_for(lambda: (where / "kid.txt").exists(), what="the person's approval to run it")


def test_a_restart_of_the_daemon_settles_a_pending_approval_as_gone(daemon: DaemonHarness, tmp_path: Path) -> None:
    job = asking_job(daemon, tmp_path / "w")
    [entry] = pending(daemon, job)
    daemon.kill()
    daemon.start()
    row = daemon.show(job)
    assert row["approvals"] == [] and row["state"] == "failed"  # its turn went with the worker
    assert decisions(daemon, job)[-1] | {"what": None, "reason": None} == {
        "id": entry["id"], "tool": "shell", "what": None, "decision": "gone", "by": "the daemon's restart",
        "reason": None}
    assert not (tmp_path / "w" / "made.txt").exists()


def test_a_daemon_stopped_while_a_job_waits_on_an_approval_it_cannot_carry_fails_the_turn_and_tells_the_parent(
        daemon: DaemonHarness, tmp_path: Path) -> None:
    """Issue 31, item 9: the built-in agent's approval is not carried across a restart (its worker
    keeps no snapshot), so a stopping daemon (SIGTERM, as `roost daemon stop`) closes that worker.
    The job was left `idle` with no turn end and its parent told nothing; now its turn ends `failed`
    (one turn_end), nothing it asked ran, and the next daemon hands its parent's agent the report."""
    where = tmp_path / "w"
    where.mkdir()
    parent = daemon.spawn("say lead", cwd=str(where))
    daemon.wait_state(parent, "idle")
    job = daemon.spawn("ask-run echo made > made.txt\nsay after", cwd=str(where), parent=parent)
    [entry] = pending(daemon, job)
    daemon.stop(keep_workers=True)
    daemon.start()
    row = daemon.show(job)
    assert row["state"] == "failed" and row["reason"] == "the daemon shut down during its turn"
    assert row["approvals"] == [] and row["pid"] is None
    ends = [e["data"] for e in daemon.timeline(job) if e["kind"] == "turn_end"]
    assert ends == [{"outcome": "failed", "error": "the daemon shut down during its turn"}]
    assert decisions(daemon, job)[-1]["id"] == entry["id"] and decisions(daemon, job)[-1]["decision"] == "gone"
    assert not (where / "made.txt").exists()

    def told() -> list[dict[str, Any]]:
        return [r for e in daemon.timeline(parent) if e["kind"] == "reports" for r in e["data"]["reports"]]

    daemon.wait_for(told, what="the parent's agent to be handed the child's report")
    daemon.wait_state(parent, "idle")
    assert [(r["child"], r["state"], r["text"]) for r in told()] == [
        (job, "failed", "the daemon shut down during its turn")]


def test_no_code_in_roost_reads_yes_words_as_an_answer() -> None:
    """A permission is answered by the approval's id, never by parsing what someone typed."""
    found = []
    for path in sorted((ROOT / "roost").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for pattern in (r"""\{\s*["']y["']\s*,\s*["']yes["']""", r"""==\s*["']yes["']""", r"""\bYES\b"""):
            if re.search(pattern, text):
                found.append(f"{path.relative_to(ROOT)}: {pattern}")
    assert found == []


class _Shown:
    """Stands in for a client whose `show` gives a row with these approvals."""

    def __init__(self, approvals: list[dict[str, Any]]) -> None:
        self.approvals = approvals

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        assert op == "show"
        return {"id": args["job"], "approvals": self.approvals}


def test_an_id_names_an_approval_or_a_job_with_exactly_one() -> None:
    from roost.cli.approvals import resolve

    one = {"id": "ap-aaaaaa", "tool": "shell", "what": {"command": "ls"}}
    two = {"id": "ap-bbbbbb", "tool": "shell", "what": {"command": "rm x"}}
    assert resolve(_Shown([]), "ap-cccccc") == "ap-cccccc"  # type: ignore[arg-type]  # an approval id as it is
    assert resolve(_Shown([one]), "k3m9") == "ap-aaaaaa"  # type: ignore[arg-type]
    with pytest.raises(ClientError, match="has no pending approval"):
        resolve(_Shown([]), "k3m9")  # type: ignore[arg-type]
    with pytest.raises(ClientError) as several:
        resolve(_Shown([one, two]), "k3m9")  # type: ignore[arg-type]
    assert "2 pending approvals; name one: ap-aaaaaa shell: ls; ap-bbbbbb shell: rm x" in several.value.message
