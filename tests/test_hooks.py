"""The daemon's [hooks]: which state change fires which hook, and real hook processes run bounded,
under a timeout, with their failures in the daemon log only."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from roost.config import Config, HookSettings
from roost.daemon.processes import hooks as hooks_mod
from roost.daemon.processes.hooks import Hooks

from conftest import pid_alive

#: A hook that appends one JSON line to the file named by its argument: what it read on stdin,
#: the ROOST_* environment, and its pid. With a second argument it then waits for that file.
RECORDER = """
import json, os, sys, time
got = sys.stdin.read()
env = {k: v for k, v in os.environ.items() if k.startswith("ROOST_")}
with open(sys.argv[1], "a") as out:
    out.write(json.dumps({"stdin": json.loads(got), "env": env, "pid": os.getpid(), "cwd": os.getcwd()}) + "\\n")
while len(sys.argv) > 2 and not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
"""

ROW = {"id": "ab12", "title": "fix the tests", "state": "done", "reason": "", "parent": None, "last_text": "ok"}


def settings(**kw: Any) -> Config:
    return dataclasses.replace(Config(), hooks=HookSettings(**kw))


def recorder(out: Path, gate: Path | None = None) -> tuple[str, ...]:
    return (sys.executable, "-c", RECORDER, str(out), *([str(gate)] if gate else []))


async def until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# --- which change fires what ------------------------------------------------------------------------

@pytest.mark.parametrize(("old", "new", "event"), [
    ("working", "waiting", "job_needs_input"), ("working", "blocked", "job_needs_input"),
    ("working", "done", "job_done"), ("starting", "failed", "job_failed"), ("queued", "failed", "job_failed"),
    ("working", "idle", None), ("waiting", "blocked", None), ("done", "working", None), ("working", "stopped", None),
])
async def test_each_state_change_fires_its_hook(tmp_path: Path, old: str, new: str, event: str | None) -> None:
    outs = {name: tmp_path / f"{name}.jsonl" for name in ("job_needs_input", "job_done", "job_failed")}
    config = settings(**{name: recorder(path) for name, path in outs.items()})
    hooks = Hooks(lambda: config)
    hooks.job_changed({**ROW, "state": new}, old, new)
    if event is not None:
        await until(lambda: lines(outs[event]))
    await hooks.close()
    assert {name for name, path in outs.items() if path.exists()} == ({event} if event else set())


async def test_the_job_arrives_as_json_on_stdin_and_in_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOST_TOKEN", "secret")  # the daemon's own, if it had one, stays its own
    out = tmp_path / "out.jsonl"
    hooks = Hooks(lambda: settings(job_failed=recorder(out)))
    row = {**ROW, "state": "failed", "reason": "the worker died", "parent": "pp01", "title": "a\0b ünï",
           "cwd": str(tmp_path), "created_at": 0.0}
    hooks.job_changed(row, "working", "failed")
    await until(lambda: lines(out))
    got = lines(out)[0]
    assert got["stdin"] == {**row, "created_at": "1970-01-01T00:00:00Z"}  # as `roost show --json` gives it
    expected = {"ROOST_HOOK": "job_failed", "ROOST_JOB_ID": "ab12", "ROOST_JOB_TITLE": "ab ünï",
                "ROOST_JOB_STATE": "failed", "ROOST_JOB_REASON": "the worker died", "ROOST_JOB_PARENT": "pp01"}
    assert {k: got["env"].get(k) for k in expected} == expected
    assert "ROOST_TOKEN" not in got["env"]
    assert got["cwd"] == str(tmp_path)  # the job's directory
    await hooks.close()


async def test_no_hook_set_runs_nothing_and_config_is_read_at_each_change(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    config = [Config()]
    hooks = Hooks(lambda: config[0])
    hooks.job_changed(ROW, "working", "done")
    config[0] = settings(job_done=recorder(out))  # a reload: the next change uses it
    hooks.job_changed({**ROW, "cwd": str(tmp_path / "gone")}, "working", "done")  # runs all the same
    await until(lambda: lines(out))
    await hooks.close()
    assert len(lines(out)) == 1


def test_a_change_outside_the_loop_waits_for_the_next_one(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    hooks = Hooks(lambda: settings(job_done=recorder(out)))
    hooks.job_changed({**ROW, "id": "early"}, "working", "done")  # recovery runs before the loop

    async def later() -> None:
        hooks.job_changed({**ROW, "id": "late"}, "working", "done")
        await until(lambda: len(lines(out)) == 2)
        await hooks.close()

    asyncio.run(later())
    assert sorted(r["stdin"]["id"] for r in lines(out)) == ["early", "late"]


async def test_it_never_raises_into_the_engine(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> Config:
        raise RuntimeError("config gone")

    hooks = Hooks(broken)
    hooks.job_changed(ROW, "working", "done")
    assert "config gone" in caplog.text
    await hooks.close()


# --- failures go to the log ----------------------------------------------------------------------------

async def test_a_missing_command_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    hooks = Hooks(lambda: settings(job_done=(str(tmp_path / "no-such-hook"), "x")))
    with caplog.at_level(logging.WARNING, "roost.daemon"):
        hooks.job_changed(ROW, "working", "done")
        await until(lambda: "could not start" in caplog.text)
    await hooks.close()
    assert "hook job_done for job ab12" in caplog.text and "No such file" in caplog.text


async def test_a_failing_hook_is_logged_with_its_exit_code(caplog: pytest.LogCaptureFixture) -> None:
    hooks = Hooks(lambda: settings(job_done=(sys.executable, "-c", "import sys; sys.exit(3)")))
    with caplog.at_level(logging.WARNING, "roost.daemon"):
        hooks.job_changed(ROW, "working", "done")
        await until(lambda: "exit code 3" in caplog.text)
    await hooks.close()


async def test_a_hook_that_ignores_stdin_is_fine(caplog: pytest.LogCaptureFixture) -> None:
    """A row bigger than a pipe's buffer, to a hook that exits without reading it."""
    done = asyncio.Event()
    hooks = Hooks(lambda: settings(job_done=(sys.executable, "-c", "pass")))
    hooks.job_changed({**ROW, "last_text": "x" * 1_000_000}, "working", "done")
    asyncio.get_running_loop().call_later(1.0, done.set)
    await done.wait()
    await hooks.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_hook_past_its_timeout_is_killed_with_what_it_started(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pids = tmp_path / "pids"
    script = f"sleep 60 & echo $$ $! > {pids}; wait"
    hooks = Hooks(lambda: settings(job_done=("sh", "-c", script), timeout=0.5))
    with caplog.at_level(logging.WARNING, "roost.daemon"):
        started = time.monotonic()
        hooks.job_changed(ROW, "working", "done")
        await until(lambda: "timed out after 0.5s and was killed" in caplog.text)
    assert time.monotonic() - started < 5
    for pid in map(int, pids.read_text().split()):
        await until(lambda: not pid_alive(pid))
    await hooks.close()


# --- the bound -------------------------------------------------------------------------------------------

async def test_at_most_max_running_at_once_and_the_queue_is_bounded(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out, gate = tmp_path / "out.jsonl", tmp_path / "gate"
    hooks = Hooks(lambda: settings(job_done=recorder(out, gate), max_running=2), queue_max=3)
    with caplog.at_level(logging.WARNING, "roost.daemon"):
        for i in range(7):
            hooks.job_changed({**ROW, "id": f"j{i}"}, "working", "done")
    assert caplog.text.count("dropped: 3 hooks already wait to run") == 2
    await until(lambda: len(lines(out)) == 2)
    await asyncio.sleep(0.3)
    assert len(lines(out)) == 2  # the other three wait for a place
    gate.touch()
    await until(lambda: len(lines(out)) == 5)
    await hooks.close()
    ids = [r["stdin"]["id"] for r in lines(out)]
    assert sorted(ids[:2]) == ["j0", "j1"] and sorted(ids[2:]) == ["j2", "j3", "j4"]  # the oldest waited first


async def test_close_kills_what_is_still_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(hooks_mod, "CLOSE_GRACE", 0.2)
    out, gate = tmp_path / "out.jsonl", tmp_path / "never"
    hooks = Hooks(lambda: settings(job_done=recorder(out, gate), max_running=1))
    hooks.job_changed({**ROW, "id": "a"}, "working", "done")
    hooks.job_changed({**ROW, "id": "b"}, "working", "done")
    await until(lambda: lines(out))
    with caplog.at_level(logging.WARNING, "roost.daemon"):
        await hooks.close()
    assert "1 queued hook runs dropped at shutdown" in caplog.text
    assert "killing 1 hooks still running at shutdown" in caplog.text
    await until(lambda: not pid_alive(lines(out)[0]["pid"]))
    hooks.job_changed(ROW, "working", "done")  # after close nothing new starts
    await asyncio.sleep(0.2)
    assert len(lines(out)) == 1


# --- through a real daemon -----------------------------------------------------------------------------

def test_the_daemon_runs_each_hook_with_the_job_and_logs_a_failing_one(daemon_factory: Any, tmp_path: Path) -> None:
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    outs = {name: tmp_path / f"{name}.jsonl" for name in ("job_needs_input", "job_done", "job_failed")}
    hook_lines = "\n".join(f"{name} = {json.dumps([sys.executable, str(script), str(path)])}"
                           for name, path in outs.items())
    daemon = daemon_factory(f"[hooks]\n{hook_lines}\ntimeout = 5\n")
    done, failed, asking = (daemon.spawn(p) for p in ("say hi\nreport done all good", "fail the disk is gone",
                                                      "ask which branch?"))
    daemon.wait_for(lambda: all(lines(path) for path in outs.values()), what="the three hooks")
    got = {name: lines(path) for name, path in outs.items()}
    assert [r["stdin"]["id"] for r in got["job_done"]] == [done]
    assert [r["stdin"]["id"] for r in got["job_needs_input"]] == [asking]
    (fail_run,) = got["job_failed"]
    assert fail_run["stdin"]["id"] == failed and fail_run["stdin"]["state"] == "failed"
    assert fail_run["env"]["ROOST_JOB_REASON"] == "the disk is gone" == fail_run["stdin"]["reason"]
    assert fail_run["env"]["ROOST_JOB_ID"] == failed and fail_run["env"]["ROOST_HOOK"] == "job_failed"
    assert fail_run["cwd"] == str(daemon.home)

    reloads = daemon.log_text().count("config reloaded")
    daemon.write_config('[hooks]\njob_done = ["sh", "-c", "exit 7"]\n')  # read again on change
    daemon.wait_for(lambda: daemon.log_text().count("config reloaded") > reloads, what="the new config")
    again = daemon.spawn("report done twice")
    daemon.wait_state(again, "done")
    daemon.wait_for(lambda: f"hook job_done for job {again} (sh) exited with exit code 7" in daemon.log_text(),
                    what="the failure in the daemon log")
    row = daemon.show(again)
    assert (row["state"], row["reason"]) == ("done", "")
    assert "exit code 7" not in json.dumps(daemon.timeline(again))  # the job never hears of it


# --- with the real daemon: the hooks fire for what the app's attention shows ------------------------------
def test_an_approval_a_question_a_failure_and_a_done_job_each_fire_their_hook(daemon_factory, tmp_path: Path) -> None:
    out = tmp_path / "fired.txt"
    line = ["sh", "-c", f'echo "$ROOST_HOOK $ROOST_JOB_ID" >> {out}']
    daemon = daemon_factory("[hooks]\n" + "".join(f"{event} = {json.dumps(line)}\n"
                                                  for event in ("job_needs_input", "job_failed", "job_done")))
    (tmp_path / "w").mkdir()
    approver = daemon.spawn("ask-run echo made > made.txt", cwd=str(tmp_path / "w"))
    asker = daemon.spawn("ask which branch?")
    failer = daemon.spawn("fail on purpose")
    doer = daemon.spawn("report done all of it")
    wanted = {f"job_needs_input {approver}", f"job_needs_input {asker}", f"job_failed {failer}", f"job_done {doer}"}
    daemon.wait_for(lambda: out.exists() and wanted <= set(out.read_text().splitlines()), what="the four hooks")
    assert daemon.show(approver)["approvals"], "the approval is what made it wait"
