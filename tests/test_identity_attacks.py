"""Who a job's processes are, attacked from a job's own shell with a real daemon (issue 31, items 2,
4 and 5; docs/reliability.md, "Identity"): another job's shim refuses the attacker and keeps its
daemon; a job that sheds its variables and leaves its parent (``setsid -f``) is still the job, also
after daemon restarts, for a built-in and a command job, and it ends with its worker; another job's
token, read from the records or /proc, makes nobody that job."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from conftest import DaemonHarness, environ_of, pid_alive, shims_of
from roost.proctree import read_proc

ATTACK = Path(__file__).resolve().parent / "attack_client.py"
SHIM_ATTACK = Path(__file__).resolve().parent / "shim_attack.py"
SHELL = '[drivers.shell]\nkind = "command"\ncommand = ["sh", "-c", "{prompt}"]\n'
UNSET = "env -u ROOST_WORKER_MARK -u ROOST_JOB_ID -u ROOST_TOKEN"


def test_a_job_cannot_take_another_jobs_shim_and_the_shim_keeps_its_daemon(daemon, tmp_path):
    victim = daemon.spawn("say first", cwd=str(tmp_path))
    row = daemon.wait_state(victim, "idle")
    out, marker = tmp_path / "shim-said", tmp_path / "pwned"
    sock = daemon.paths.state_dir / "workers" / f"{victim}.sock"
    attack = shlex.join([sys.executable, str(SHIM_ATTACK), str(out), str(sock), f"write {marker} yes"])
    attacker = daemon.spawn(f"run {attack}", cwd=str(tmp_path))
    assert daemon.wait_state(attacker, "idle", "failed")["state"] == "idle"
    said = json.loads(out.read_text())
    assert not said["injected"] and "worker_pid" not in said["said"], said
    assert "is not the roost daemon" in said["said"]["refused"], said
    daemon.call("send", job=victim, text="say still mine")  # its daemon is still connected to its shim
    after = daemon.wait_row(victim, lambda r: r["state"] == "idle" and r["last_text"] == "still mine",
                            what="the victim's next turn")
    assert after["pid"] == row["pid"] and after["worker_up"], "the same worker, never dropped"
    assert not marker.exists(), "nothing was injected"
    assert "prompt" not in " ".join(e["kind"] for e in daemon.timeline(victim) if e["kind"] == "failure")


def _escape(out: Path, approval: str) -> str:
    """A shell line: `setsid -f` with the job's variables shed answers the approval as a "person",
    and the line waits for its answer (a command job's worker kills what its turn left)."""
    argv = [sys.executable, str(ATTACK), str(out), "answer_approval",
            json.dumps({"approval": approval, "decision": "once"})]
    return (f"setsid -f {UNSET} ATTACK_ORPHAN=setsid {shlex.join(argv)}; "
            f"while [ ! -s {shlex.quote(str(out))} ]; do sleep 0.05; done")


def _pending(daemon: DaemonHarness, cwd: Path) -> tuple[str, str]:
    victim = daemon.spawn("ask-run echo pwned > pwned.txt", cwd=str(cwd))
    [pending] = daemon.wait_row(victim, lambda r: r["state"] == "waiting" and r["approvals"],
                                what="the approval")["approvals"]
    return victim, pending["id"]


def _refused(daemon: DaemonHarness, out: Path, attacker: str, victim: str, cwd: Path) -> None:
    said = daemon.wait_for(lambda: out.exists() and out.read_text(), what="the escaped process's attempt")
    assert said.startswith(f"auth: answer_approval is for a person only: job {attacker} may not call it"), said
    assert daemon.show(victim)["state"] == "waiting" and not (cwd / "pwned.txt").exists()


def test_a_job_that_sheds_its_variables_and_parent_is_still_the_job_after_restarts(daemon_factory, tmp_path):
    daemon = daemon_factory(SHELL)
    builtin_dir, shell_dir = tmp_path / "b", tmp_path / "s"
    builtin_dir.mkdir(), shell_dir.mkdir()
    victim, approval = _pending(daemon, tmp_path)
    builtin = daemon.spawn(f"run {_escape(builtin_dir / 'out0', approval)}", cwd=str(builtin_dir))
    shell = daemon.spawn(_escape(shell_dir / "out0", approval), cwd=str(shell_dir), driver="shell")
    _refused(daemon, builtin_dir / "out0", builtin, victim, tmp_path)
    _refused(daemon, shell_dir / "out0", shell, victim, tmp_path)
    for job in (builtin, shell):
        daemon.wait_state(job, "idle")
    for restart in (1, 2):  # re-adopted workers no longer descend from the daemon
        daemon.stop(keep_workers=True)
        daemon.start()
        for job in (builtin, shell):
            daemon.wait_for(lambda: any(e["kind"] == "worker" and e["data"].get("adopted")
                                        for e in daemon.timeline(job)[-20:]), what=f"{job} re-adopted")
        victim, approval = _pending(daemon, tmp_path)  # one pending at a restart is not re-adopted
        daemon.call("send", job=builtin, text=f"run {_escape(builtin_dir / f'out{restart}', approval)}")
        daemon.call("send", job=shell, text=_escape(shell_dir / f"out{restart}", approval))
        _refused(daemon, builtin_dir / f"out{restart}", builtin, victim, tmp_path)
        _refused(daemon, shell_dir / f"out{restart}", shell, victim, tmp_path)
        for job in (builtin, shell):
            daemon.wait_state(job, "idle")


def test_another_jobs_token_from_the_records_or_proc_makes_nobody_that_job(daemon, tmp_path):
    victim = daemon.spawn("say mine", cwd=str(tmp_path))
    pid = daemon.wait_state(victim, "idle")["pid"]
    token = environ_of(pid)["ROOST_TOKEN"]
    record = daemon.paths.state_dir / "workers" / f"{victim}.json"
    assert token not in record.read_text(), "the record holds no token"
    from_proc = f"$(tr '\\0' '\\n' < /proc/{pid}/environ | sed -n 's/^ROOST_TOKEN=//p')"
    from_record = (f"$({shlex.quote(sys.executable)} -c 'import json,sys; s = json.load(open(sys.argv[1]))[\"shim\"]; "
                   f"print(s.get(\"token\") or s.get(\"token_hash\"))' {shlex.quote(str(record))})")
    lines = []
    for name, source in (("proc", from_proc), ("record", from_record)):
        for op, args in (("spawn", {"prompt": "say planted"}), ("stop", {"job": victim})):
            argv = [sys.executable, str(ATTACK), str(tmp_path / f"{name}-{op}"), op, json.dumps(args)]
            lines.append(f"run ROOST_JOB_ID={victim} ROOST_TOKEN={source} {shlex.join(argv)}")
    attacker = daemon.spawn("\n".join(lines), cwd=str(tmp_path))
    assert daemon.wait_state(attacker, "idle", "failed")["state"] == "idle"
    for name in ("proc", "record"):
        for op in ("spawn", "stop"):
            said = (tmp_path / f"{name}-{op}").read_text()
            assert said.startswith("auth: process ") and f"is job {attacker}'s" in said \
                and f"cannot speak as job {victim}" in said, (name, op, said)
    assert daemon.show(victim)["state"] == "idle" and not daemon.children(victim), "not stopped, nothing planted"


def test_what_a_job_orphans_with_its_variables_shed_ends_with_its_worker(daemon, tmp_path):
    pid_file = tmp_path / "escaped"
    escape = f"setsid -f {UNSET} sh -c 'echo $$ > {pid_file}; exec sleep 1000' </dev/null >/dev/null 2>&1"
    job = daemon.spawn(f"run {escape}; while [ ! -s {pid_file} ]; do sleep 0.05; done", cwd=str(tmp_path))
    row = daemon.wait_state(job, "idle")
    escaped = int(pid_file.read_text())
    assert pid_alive(escaped) and "ROOST_WORKER_MARK" not in environ_of(escaped)
    shim = read_proc(row["pid"]).ppid
    assert shim in shims_of(daemon.paths.state_dir)
    assert read_proc(escaped).ppid == shim, "orphaned to the job's shim, not to PID 1"
    daemon.call("close", job=job)
    daemon.wait_row(job, lambda r: not r["worker_up"], what="the worker closed")
    daemon.wait_for(lambda: not pid_alive(escaped), what="the escaped process ended with its shim")
