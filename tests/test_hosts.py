"""Workers on another host over OpenSSH: a real sshd on 127.0.0.1 (tests/sshd.py), this machine as
the "remote", the daemon reaching it through one master connection."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import RawClient, assert_token_in_no_argv, procs_where
from roost.config import ConfigError, parse_config
from roost.protocol import PROTOCOL_VERSION
from roost.socket_connect import ClientError
from roost.hosts.bundle import bundle
from tests.sshd import Sshd, find_sshd, free_port

SSHD = find_sshd()
pytestmark = pytest.mark.skipif(SSHD is None or shutil.which("ssh") is None, reason="no sshd/ssh here (.ci/run installs openssh-server and openssh-client)")
FINISHED = ("idle", "done", "failed", "stopped", "blocked")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    server = _server(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def _server(root: Path) -> Sshd:
    server = Sshd(str(SSHD), root, free_port())
    try:
        server.prepare()
        server.start()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot start a test sshd: {exc}")
    return server


def _config(server: Sshd, remote: Path, extra: str = "", known_hosts: Path | None = None) -> str:
    return extra + server.host_table("h", remote, known_hosts)


def remote_procs(job_id: str) -> list[int]:
    """Processes of this job's remote side (the wrapper and the agent name its files there)."""
    names = (f"sessions/{job_id}.jsonl".encode(), f"run/{job_id}.json".encode())
    return procs_where(lambda argv: any(n in a for a in argv for n in names) and b"ssh" not in argv[0])


def master_pid(daemon) -> int:
    from roost.config import load_config
    from roost.hosts.commands import master_pid as pid_of

    return daemon.wait_for(lambda: pid_of(load_config(daemon.config_path).host("h")), what="the master")


def test_a_command_agent_runs_on_the_host_and_its_program_is_the_hosts_to_have(daemon_factory, sshd, tmp_path):
    remote = tmp_path / "remote"
    program = tmp_path / "agent.sh"
    program.write_text('#!/bin/sh\necho "the host says: $1"\n')
    program.chmod(0o755)
    daemon = daemon_factory(_config(sshd, remote, f'[drivers.far]\nkind = "command"\ncommand = ["{program}", "{{prompt}}"]\n\n'
                                                  '[drivers.ghost]\nkind = "command"\ncommand = ["roost-no-such-agent", "{prompt}"]\n\n'))
    job = daemon.spawn("hello there", host="h", driver="far", cwd=str(tmp_path))
    row = daemon.wait_state(job, *FINISHED, timeout=30)
    assert row["state"] == "idle", row["reason"]
    assert row["host"] == "h" and any("the host says: hello there" in t for t in daemon.texts(job))
    # A program is the host's to have: not looked for here at spawn, and its absence there is the
    # job's failure, in the host's words; here the same profile is refused at once.
    far = daemon.spawn("hello", host="h", driver="ghost", cwd=str(tmp_path))
    failed = daemon.wait_state(far, "failed", timeout=30)
    assert "roost-no-such-agent" in failed["reason"]
    with pytest.raises(ClientError) as info:
        daemon.spawn("hello", driver="ghost", cwd=str(tmp_path))
    assert info.value.code == "driver" and "not found" in info.value.message


def test_a_job_on_the_host_takes_a_turn_and_its_row_says_where(daemon_factory, sshd, tmp_path):
    remote = tmp_path / "remote"
    daemon = daemon_factory(_config(sshd, remote))
    started = time.monotonic()
    job = daemon.spawn("say hello from afar", host="h", cwd=str(tmp_path))
    row = daemon.wait_state(job, *FINISHED, timeout=30)
    first = time.monotonic() - started
    assert row["state"] == "idle", row["reason"]
    assert row["host"] == "h" and "hello from afar" in daemon.texts(job)
    assert row["session"] == f"{remote}/sessions/{job}.jsonl" and Path(row["session"]).exists()
    assert (remote / bundle().name).exists() and not list((remote / "run").glob("*.json"))  # setup read and removed
    assert (remote / "run" / f"{job}.sock").is_socket()  # its shim's there, owner-only
    assert (remote / "run" / f"{job}.sock").stat().st_mode & 0o777 == 0o600
    started = time.monotonic()
    second = daemon.spawn("say again", host="h", cwd=str(tmp_path))  # over the master, bundle cached
    assert daemon.wait_state(second, *FINISHED, timeout=30)["state"] == "idle"
    print(f"first spawn {first:.2f}s (master + ship), second {time.monotonic() - started:.2f}s")


def test_stop_mid_turn_and_close_reach_the_remote_tree(daemon_factory, sshd, tmp_path):
    daemon = daemon_factory(_config(sshd, tmp_path / "remote"))
    job = daemon.spawn("wait-for never", host="h", cwd=str(tmp_path))
    daemon.wait_state(job, "working", timeout=30)
    daemon.wait_for(lambda: remote_procs(job), what="the remote worker")
    daemon.call("stop", job=job)
    assert daemon.wait_state(job, "stopped", timeout=10)["state"] == "stopped"
    daemon.close_after_turn(job, timeout=10)
    daemon.wait_row(job, lambda r: r["pid"] is None, timeout=10)
    daemon.wait_for(lambda: not remote_procs(job), timeout=10, what="the remote tree to end")


def test_a_tree_across_hosts_reports_both_ways(daemon_factory, sshd, tmp_path):
    daemon = daemon_factory(_config(sshd, tmp_path / "remote"))
    parent = daemon.spawn("say parent here", cwd=str(tmp_path))
    daemon.wait_state(parent, "idle", timeout=20)
    child = daemon.spawn("ask go on?;report done child on h", host="h", parent=parent, cwd=str(tmp_path))
    daemon.wait_state(child, "waiting", timeout=30)
    grandchild = daemon.spawn("report done grandchild here", parent=child, host="local", cwd=str(tmp_path))
    assert daemon.show(grandchild)["host"] == ""

    def reports(job_id: str) -> list[str]:
        return [r["child"] for e in daemon.timeline(job_id) if e["kind"] == "reports" for r in e["data"]["reports"]]

    daemon.wait_for(lambda: grandchild in reports(child), timeout=20, what="the local child's report on the remote job")
    daemon.call("send", job=child, text="yes")
    daemon.wait_for(lambda: child in reports(parent), timeout=20, what="the remote child's report on the local job")
    again = daemon.spawn("wait-for never", host="h", parent=parent, cwd=str(tmp_path))
    daemon.wait_state(again, "working", timeout=30)
    daemon.call("stop", job=parent, tree=True)  # reaches the job working on the host
    assert daemon.wait_state(again, "stopped", timeout=15)["state"] == "stopped"


def test_the_reaper_closes_the_remote_worker_and_a_message_resumes_it(daemon_factory, sshd, tmp_path):
    daemon = daemon_factory(_config(sshd, tmp_path / "remote", "idle_timeout = 1\n"))
    job = daemon.spawn("say first", host="h", cwd=str(tmp_path))
    daemon.wait_row(job, lambda r: r["reaped"] and r["pid"] is None, timeout=30)
    daemon.wait_for(lambda: not remote_procs(job), timeout=10, what="the remote worker to end")
    daemon.call("send", job=job, text="recall")
    daemon.wait_for(lambda: any("earlier prompts: say first" in t for t in daemon.texts(job)), timeout=30,
                    what="the resumed worker to recall its session")


def test_a_host_that_is_down_fails_spawns_at_once_with_the_reason(daemon_factory, tmp_path):
    (tmp_path / "own-sshd").mkdir()
    server = _server(tmp_path / "own-sshd")
    daemon = daemon_factory(_config(server, tmp_path / "remote", "host_lost_after = 1\n"))
    job = daemon.spawn("say up", host="h", cwd=str(tmp_path))
    assert daemon.wait_state(job, *FINISHED, timeout=30)["state"] == "idle"
    server.stop()
    os.kill(master_pid(daemon), signal.SIGKILL)
    daemon.wait_for(lambda: daemon.show(job)["pid"] is None, timeout=15, what="the worker to go with its host")
    daemon.wait_for(lambda: not remote_procs(job), timeout=15, what="its shim there to end it, alone")
    started = time.monotonic()
    refused = daemon.spawn("say down", host="h", cwd=str(tmp_path))
    row = daemon.wait_state(refused, "failed", timeout=15)
    assert time.monotonic() - started < 8
    print("down:", row["reason"], f"({time.monotonic() - started:.2f}s)")
    assert "host h unreachable" in row["reason"] and "refused" in row["reason"].lower(), row["reason"]


def test_an_unknown_host_key_is_refused_with_the_command_that_fixes_it(daemon_factory, sshd, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    daemon = daemon_factory(_config(sshd, tmp_path / "remote", known_hosts=empty))
    job = daemon.spawn("say hi", host="h", cwd=str(tmp_path))
    reason = daemon.wait_state(job, "failed", timeout=20)["reason"]
    assert "host key is not known" in reason and f"-p {sshd.port}" in reason and "root@127.0.0.1 true" in reason


def test_hosts_lists_the_connection_and_check_says_what_is_there(daemon_factory, sshd, tmp_path):
    daemon = daemon_factory(_config(sshd, tmp_path / "remote"))
    job = daemon.spawn("say hi", host="h", cwd=str(tmp_path))
    daemon.wait_state(job, "idle", timeout=30)
    env = {**daemon.env}
    listed = subprocess.run([sys.executable, "-m", "roost.cli", "hosts"], env=env, capture_output=True, text=True)
    assert "h  root@127.0.0.1" in listed.stdout and "connected (master pid" in listed.stdout and "1 idle" in listed.stdout
    checked = subprocess.run([sys.executable, "-m", "roost.cli", "hosts", "check", "h"], env=env, capture_output=True,
                             text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"shipped ({bundle().name})" in checked.stdout and "python 3." in checked.stdout


def test_the_worker_side_runs_from_the_bundle_alone_without_the_apps_libraries(tmp_path):
    (tmp_path / "w.pyz").write_bytes(bundle().data)
    probe = ("import sys; import roost.programs.builtin_agent, roost.programs.command_worker, roost.hosts.remote; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'textual', 'click', 'platformdirs'}"
             " | {m for m in sys.modules if m.startswith(('roost.config', 'roost.daemon', 'roost.rules'))}"
             " - {'roost.rules', 'roost.rules.quotas'}))")  # the programs' output rules: standard library only
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path[:0] = [{str(tmp_path / 'w.pyz')!r}]; {probe}"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_host_config_is_strict():
    base = '[hosts.box]\nssh = "me@127.0.0.1"\n'
    assert parse_config(base + "port = 2222\n", "t").hosts["box"].port == 2222
    for bad, key in ((base + "prot = 1\n", "hosts.box.prot"), ("[hosts.box]\nport = 1\n", "hosts.box.ssh"),
                     ('[drivers.far]\nkind = "builtin"\nhost = "nope"\n', "drivers.far.host"),
                     ('[hosts.local]\nssh = "x"\n', "hosts.local")):
        with pytest.raises(ConfigError) as info:
            parse_config(bad, "t")
        assert info.value.key == key


def test_a_hosts_max_running_jobs_holds_the_next_worker_until_one_there_ends(daemon_factory, sshd, tmp_path):
    daemon = daemon_factory(_config(sshd, tmp_path / "remote") + "max_running_jobs = 1\n")
    first = daemon.spawn("say one", host="h", cwd=str(tmp_path))
    daemon.wait_state(first, "idle", timeout=30)
    second = daemon.spawn("say two", host="h", cwd=str(tmp_path))
    row = daemon.show(second)  # the host's only slot is the first worker's: no process for it yet
    assert row["state"] == "queued" and row["pid"] is None
    daemon.call("close", job=first)
    assert daemon.wait_state(second, "idle", timeout=30)["state"] == "idle"


def _token(pid: int) -> str | None:
    try:
        env = dict(i.split("=", 1) for i in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in i)
    except OSError:
        return None
    return env.get("ROOST_TOKEN")


def _token_on_host(job_id: str) -> str:
    """The token a remote job's worker holds in its environment (readable by the host's account)."""
    found = [t for t in map(_token, remote_procs(job_id)) if t]
    assert found, f"no worker of {job_id} holds a token"
    return found[0]


def _hello(path: Path, **args) -> tuple[RawClient, dict]:
    client = RawClient(path, hello=False)
    client.send({"id": 1, "op": "hello", "args": {"version": PROTOCOL_VERSION, "client": "host-account", **args}})
    return client, client.reply(1)


def test_the_forwarded_socket_takes_only_that_hosts_jobs_never_a_person(daemon_factory, sshd, tmp_path):
    daemon = daemon_factory(_config(sshd, tmp_path / "remote", sshd.host_table("h2", tmp_path / "remote2") + "\n"))
    far = daemon.spawn("say on h", host="h", cwd=str(tmp_path))
    other = daemon.spawn("say on h2", host="h2", cwd=str(tmp_path))
    here = daemon.spawn("say here", cwd=str(tmp_path))
    for job in (far, other, here):
        assert daemon.wait_state(job, *FINISHED, timeout=30)["state"] == "idle"
    forwarded = next((tmp_path / "remote").glob("daemon-*.sock"))  # what a process on h's account reaches
    assert forwarded.is_socket()
    assert not (tmp_path / "remote").joinpath(daemon.paths.socket.name).exists()
    local_token = _token(daemon.show(here)["pid"])
    # No token: no hello as a person, so nothing else either (no spawn, no transcript).
    client, reply = _hello(forwarded)
    assert reply["error"]["code"] == "auth" and "takes jobs only" in reply["error"]["message"]
    for req_id, op, args in ((2, "spawn", {"prompt": "run id", "host": "local"}), (3, "logs", {"job": here}),
                             (4, "list", {})):
        client.send({"id": req_id, "op": op, "args": args})
        assert client.reply(req_id)["error"]["code"] == "no_hello"
    client.close()
    # A local job's token, or another host's job's, is no good here.
    for job, token in ((here, local_token), (other, _token_on_host(other))):
        client, reply = _hello(forwarded, job=job, token=token)
        assert reply["error"]["code"] == "auth" and f"job {job} is not placed on host h" in reply["error"]["message"]
        client.close()
    # The host's own job is welcome, as a job: its own subtree, not another's transcript. Its token
    # is in its worker's environment there, on no command line (here or there: ssh's, the wrapper's).
    assert_token_in_no_argv(far, _token_on_host(far))
    client, reply = _hello(forwarded, job=far, token=_token_on_host(far))
    assert reply["ok"] and reply["result"]["job"] == far
    client.send({"id": 2, "op": "logs", "args": {"job": here}})
    assert client.reply(2)["error"]["code"] == "auth"
    client.close()
    assert {r["id"] for r in daemon.rows()} == {far, other, here}, "nothing was spawned"
