"""pi on another host: the real pi, run by the real daemon over a real sshd on 127.0.0.1 (this machine
as the "remote", tests/sshd.py), against the fake model server (tests/fakellm.py), which the host
reaches on 127.0.0.1 as the daemon's machine does.

The host's pi is the repository's node_modules/.bin/pi, named by its path in the profile's `command`
(a path of the host: here the host is this machine). Everything else pi's launch names must be the
host's: its extension shipped into roost's directory there, its agent dir, sessions and TMPDIR there,
its ROOST_SOCKET the forwarded socket — the tests read the remote pi's own argv and environment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

import roost
from roost.drivers.pi import EXTENSION
from roost.proctree import read_proc

from conftest import DaemonHarness
from fakellm import FakeLLM, models_json
from test_hosts import _config, master_pid, sshd  # noqa: F401 (sshd: the module's server fixture)
from test_hosts import pytestmark as NEEDS_SSHD
from test_pi_driver import START, assistant_stops, fake, pi_bin, timeline, user_texts  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.pi, NEEDS_SSHD]


def remote_pi(job_id: str) -> dict[str, Any] | None:
    """The job's pi process on the "remote" (found by the job id its environment carries): its pid and
    environment, or None when there is none."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            title = (entry / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        env = dict(item.decode(errors="replace").split("=", 1) for item in environ if b"=" in item)
        if env.get("ROOST_JOB_ID") == job_id and title == b"pi":  # pi names its process pi
            return {"pid": int(entry.name), "env": env}
    return None


@pytest.fixture
def far_pi(pi_bin: Path, fake: FakeLLM, sshd, daemon_factory: Callable[[str], DaemonHarness],  # noqa: F811
           tmp_path: Path) -> Callable[..., tuple[DaemonHarness, Path]]:
    """A daemon whose ``pi`` profile runs on host ``h``. The host's roost dir already holds pi's agent
    dir (models.json for the fake provider), as a user sets it up there once; the host's ``pi`` is a
    program on the PATH the profile gives, which writes down its arguments (pi overwrites its
    process title, so /proc no longer shows them) and runs the installed pi."""
    remote = tmp_path / "remote"
    agent = remote / "pi-agent"
    agent.mkdir(parents=True)
    (agent / "models.json").write_text(json.dumps(models_json(fake.url)))
    home, bin_dir = tmp_path / "far-home", tmp_path / "far-bin"
    for directory in (home, bin_dir, tmp_path / "work"):
        directory.mkdir()
    (bin_dir / "pi").write_text(f'#!/bin/sh\nprintf \'%s\\0\' "$@" > "{bin_dir}/argv-$ROOST_JOB_ID"\n'
                                f'exec {pi_bin} "$@"\n')
    (bin_dir / "pi").chmod(0o755)
    path = f"{bin_dir}:{os.environ['PATH']}"

    def make(extra: str = "", profile: str = "") -> tuple[DaemonHarness, Path]:
        pi = (f'[drivers.pi]\ncommand = "pi"\nprovider = "fake"\nmodel = "fake-model"\nhost = "h"\n'
              f'env = {{ HOME = {json.dumps(str(home))}, PATH = {json.dumps(path)} }}\n{profile}\n')
        return daemon_factory(_config(sshd, remote, extra + pi)), remote

    return make


def pi_argv(tmp_path: Path, job_id: str) -> list[str]:
    """The arguments the host's pi was last started with for this job."""
    return (tmp_path / "far-bin" / f"argv-{job_id}").read_text().split("\0")[:-1]


def test_a_pi_job_on_the_host_takes_a_turn_and_its_launch_names_only_the_hosts_paths(far_pi, fake, tmp_path):
    daemon, remote = far_pi()
    started = time.monotonic()
    job = daemon.spawn("hello far pi", driver="pi", cwd=str(tmp_path / "work"))
    row = daemon.wait_state(job, "idle", "failed", timeout=START)
    first = time.monotonic() - started
    assert row["state"] == "idle", row["reason"]
    assert row["host"] == "h" and daemon.texts(job) == ["echo: hello far pi"]
    assert Path(row["session"]).parent == remote / "sessions" / "pi" and Path(row["session"]).exists()
    assert daemon.wait_row(job, lambda r: r["usage"].get("context_window"))["usage"]["context_window"] == 32000

    far = daemon.wait_for(lambda: remote_pi(job), what="the pi process on the host")
    argv, env = pi_argv(tmp_path, job), far["env"]
    shipped = Path(argv[argv.index("-e") + 1])
    assert shipped.parent == remote and shipped.read_bytes() == EXTENSION.read_bytes()
    assert argv[argv.index("--session-dir") + 1] == f"{remote}/sessions/pi"
    assert env["PI_CODING_AGENT_DIR"] == f"{remote}/pi-agent" and env["TMPDIR"] == f"{remote}/pi-tmp"
    assert Path(env["ROOST_SOCKET"]).parent == remote and env["ROOST_JOB_ID"] == job
    assert Path(f"/proc/{far['pid']}/cwd").resolve() == tmp_path / "work"
    # Nothing of this machine's roost: not its state dir, not its package (a real host has neither).
    local = (str(daemon.home), str(Path(roost.__file__).parent))
    leaks = [v for v in [*argv, *env.values()] if any(path in v for path in local)]
    assert not leaks, leaks
    shim = read_proc(row["pid"]).ppid  # the worker's shim there: its command line is the host's too
    shim_command = Path(f"/proc/{shim}/cmdline").read_bytes().decode()
    assert str(remote) in shim_command and not any(path in shim_command for path in local), shim_command
    assert not (daemon.paths.state_dir / "pi-agent").exists() and not (daemon.paths.state_dir / "pi-tmp").exists()

    started = time.monotonic()
    second = daemon.spawn("hello again", driver="pi", cwd=str(tmp_path / "work"))  # the extension is not sent again
    assert daemon.wait_state(second, "idle", "failed", timeout=START)["state"] == "idle"
    print(f"far pi: first spawn to idle {first:.2f}s (master, bundle and extension shipped), second "
          f"{time.monotonic() - started:.2f}s")
    assert sorted(p.name for p in remote.glob("roost-tools-*.ts")) == [shipped.name]


def test_roost_spawn_from_the_far_pi_places_children_and_their_reports_come_back(far_pi, fake, tmp_path):
    daemon, _ = far_pi()
    task = json.dumps({"task": "report done the far child finished", "title": "far kid"})
    job = daemon.spawn(f"CALL roost_spawn {task}", driver="pi", cwd=str(tmp_path / "work"))
    [kid] = daemon.wait_for(lambda: daemon.children(job), timeout=START, what="a child of the far pi job")
    assert (kid["title"], kid["driver"], kid["host"], kid["cwd"]) == ("far kid", "builtin", "h", str(tmp_path / "work"))
    assert daemon.wait_state(kid["id"], "done", "failed", timeout=30)["state"] == "done"
    report = daemon.wait_for(lambda: fake.bodies_with(f'<roost-report child="{kid["id"]}"'), timeout=START,
                             what="the child's report to reach the far pi's model")
    assert "the far child finished" in user_texts(report[0])[-1]
    [tool] = [t for t in timeline(daemon, job, "tool") if t["name"] == "roost_spawn"]
    assert tool["error"] is False and f"{kid['id']}" in tool["result"] and "on host h" in tool["result"]
    daemon.wait_state(job, "idle", timeout=START)

    here = json.dumps({"task": "report done the near child finished", "host": "local"})
    daemon.call("send", job=job, text=f"CALL roost_spawn {here}")
    near = daemon.wait_for(lambda: [k for k in daemon.children(job) if k["id"] != kid["id"]], timeout=START,
                           what="a child of the far pi job on this machine")[0]
    assert near["host"] == ""
    daemon.wait_for(lambda: fake.bodies_with(f'<roost-report child="{near["id"]}"'), timeout=START,
                    what="the local child's report to reach the far pi's model")


def test_the_reaper_closes_the_far_pi_and_a_message_resumes_its_session_there(far_pi, fake, tmp_path):
    daemon, remote = far_pi("idle_timeout = 1\n")
    job = daemon.spawn("remember the word heron", driver="pi", cwd=str(tmp_path / "work"))
    session = daemon.wait_state(job, "idle", "failed", timeout=START)["session"]
    assert session and Path(session).parent == remote / "sessions" / "pi"
    daemon.wait_row(job, lambda r: r["reaped"] and r["pid"] is None, timeout=30)
    daemon.wait_for(lambda: remote_pi(job) is None, timeout=15, what="the far pi to end with its worker")
    assert daemon.call("send", job=job, text="what was the word?")["outcome"] == "resumed"
    [resumed] = daemon.wait_for(lambda: fake.bodies_with("what was the word?"), timeout=START,
                                what="the resumed pi's request")
    assert user_texts(resumed) == ["remember the word heron", "what was the word?"]
    row = daemon.wait_row(job, lambda r: r["last_text"] == "echo: what was the word?", timeout=START)
    assert row["session"] == session


def test_stop_mid_turn_aborts_the_far_pi_and_close_ends_it_there(far_pi, fake, tmp_path):
    daemon, _ = far_pi()
    job = daemon.spawn("SLOW for the stop", driver="pi", cwd=str(tmp_path / "work"))
    daemon.wait_for(lambda: fake.bodies_with("SLOW for the stop") and daemon.show(job)["state"] == "working",
                    timeout=START, what="the far pi streaming the slow answer")
    assert daemon.call("stop", job=job)["stopped"] == 1
    row = daemon.wait_state(job, "stopped", timeout=15)
    daemon.wait_for(lambda: assistant_stops(Path(row["session"]))[-1:] == ["aborted"],
                    what="the far pi to record its answer as aborted")
    assert row["worker_up"] and remote_pi(job) is not None, "a stop aborts the turn, it keeps the worker"
    daemon.call("close", job=job)
    daemon.wait_for(lambda: remote_pi(job) is None, timeout=15, what="the far pi to end on close")


def test_a_dropped_link_mid_turn_leaves_the_far_pi_running_and_its_turn_ends(far_pi, fake, tmp_path):
    daemon, _ = far_pi()
    job = daemon.spawn("remember the word plover", driver="pi", cwd=str(tmp_path / "work"))
    daemon.wait_state(job, "idle", "failed", timeout=START)
    daemon.call("send", job=job, text="SLOW for the drop")
    daemon.wait_for(lambda: fake.bodies_with("SLOW for the drop") and daemon.show(job)["state"] == "working",
                    timeout=START, what="the far pi streaming the slow answer")
    pid = daemon.show(job)["pid"]
    os.kill(master_pid(daemon), signal.SIGKILL)  # pi runs on under its shim there; the link is tried again
    row = daemon.wait_state(job, "idle", "failed", timeout=60)
    assert row["state"] == "idle", row["reason"]
    assert row["pid"] == pid and remote_pi(job) is not None, "the same far pi, reached again"
    daemon.call("send", job=job, text="which bird was it?")
    [asked] = daemon.wait_for(lambda: fake.bodies_with("which bird was it?"), timeout=START,
                              what="the far pi's next request")
    assert user_texts(asked)[0] == "remember the word plover" and user_texts(asked)[-1] == "which bird was it?"


def test_hosts_check_says_which_pi_is_there_and_a_missing_one_fails_the_job_in_the_hosts_words(far_pi, tmp_path):
    ghost = '[drivers.ghost]\nkind = "pi"\ncommand = "roost-no-such-pi"\nhost = "h"\n\n'
    daemon, _ = far_pi(ghost)
    checked = subprocess.run([sys.executable, "-m", "roost.cli", "hosts", "check", "h"], env=daemon.env,
                             capture_output=True, text=True, timeout=60)
    lines = checked.stdout.splitlines()
    print(checked.stdout)
    assert checked.returncode == 1, checked.stdout + checked.stderr  # a pi profile meant for h lacks its program
    found = [line for line in lines if "driver pi)" in line]
    assert found and f"{tmp_path}/far-bin/pi (version 0." in found[0] and "on Node.js v" in found[0], lines
    missing = [line for line in lines if "roost-no-such-pi" in line]
    assert missing and missing[0].startswith("missing:") and "npm install -g" in missing[0], lines

    job = daemon.spawn("hello", driver="ghost", cwd=str(tmp_path / "work"))
    reason = daemon.wait_state(job, "failed", timeout=30)["reason"]
    print("missing pi:", reason)
    assert "cannot start roost-no-such-pi on this host" in reason and "hosts check" in reason, reason
