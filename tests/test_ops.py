"""Operation modules (roost/daemon/ops/): found by their names, dispatched beside the old table; the
``explain`` operation against a real daemon in several states; the ``sync`` barrier."""

from __future__ import annotations

import json
import subprocess
import sys

from roost.daemon.ops import operations
from roost.daemon.server.handlers import HANDLERS, arguments, rules
from roost.protocol import OPS

from conftest import DaemonHarness


def test_each_operation_module_is_one_operation_of_its_name_and_not_in_the_old_tables():
    ops = operations()
    assert {"explain", "sync", "rename", "seen"} <= set(ops)
    assert not set(ops) & set(HANDLERS) and not set(ops) & set(OPS), "an operation defined twice"
    assert set(arguments()) == set(OPS) | set(ops) and set(ops) <= set(rules())


def explain(daemon: DaemonHarness, job: str) -> dict:
    return daemon.call("explain", job=job)


def test_explain_says_why_for_queued_waiting_idle_stopped_and_failed_jobs(daemon_factory, tmp_path):
    daemon = daemon_factory("max_running_jobs = 1\n")
    first = daemon.spawn("wait-for first")
    daemon.wait_state(first, "working")
    queued = daemon.spawn("say later")
    answer = explain(daemon, queued)
    assert answer["state"] == "queued" and answer["cause"]["rule"] == "spawn"
    assert [w["on"] for w in answer["waits"]] == ["run_slot"] and "1 of 1 used" in answer["waits"][0]["text"]
    working = explain(daemon, first)
    assert working["cause"]["rule"] == "turn" and working["waits"][0]["on"] == "turn"
    daemon.release("first")
    daemon.wait_state(queued, "idle")
    idle = explain(daemon, queued)
    assert idle["cause"]["rule"] == "turn-end" and idle["waits"][0]["on"] == "message"
    assert any(n.get("rule") == "reap" and n["at"] > idle["since"] for n in idle["next"]), idle["next"]

    asker = daemon.spawn("ask-run echo made > made.txt", cwd=str(tmp_path))
    row = daemon.wait_row(asker, lambda r: r["state"] == "waiting" and r["approvals"], what="an approval")
    waiting = explain(daemon, asker)
    aid = row["approvals"][0]["id"]
    assert waiting["cause"]["rule"] == "approval" and aid in waiting["cause"]["text"]
    assert waiting["waits"][0]["on"] == "person" and aid in waiting["waits"][0]["text"]
    assert "echo made > made.txt" in waiting["waits"][0]["text"]
    daemon.call("stop", job=asker)
    daemon.wait_state(asker, "stopped")
    stopped = explain(daemon, asker)
    assert stopped["cause"]["rule"] == "stop" and stopped["cause"]["text"] == "stopped by a person"

    failing = daemon.spawn("fail on purpose")
    daemon.wait_state(failing, "failed")
    failed = explain(daemon, failing)
    assert failed["cause"]["rule"] in ("turn-end", "failure") and failed["reason"] in failed["cause"]["text"]

    out = subprocess.run([sys.executable, "-m", "roost.cli", "explain", queued], env=daemon.env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith(f"{queued} 'say later' is idle since"), out.stderr
    assert "why: its turn ended" in out.stdout and "waits for: a message" in out.stdout
    data = json.loads(subprocess.run([sys.executable, "-m", "roost.cli", "explain", "--json", queued],
                                     env=daemon.env, capture_output=True, text=True, timeout=60).stdout)
    assert data["state"] == "idle" and data["since"].endswith("Z")


def test_sync_answers_after_what_was_posted_before_it(daemon: DaemonHarness):
    job = daemon.spawn("say hi")
    daemon.wait_state(job, "idle")
    with daemon.client() as client:
        client.call("rename", job=job, title="renamed")  # answered once committed; sync after it
        assert client.call("sync") == {"synced": True}
    assert daemon.show(job)["title"] == "renamed"
