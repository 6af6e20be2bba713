"""The daemon SIGKILLed at random points while it writes, many times: the store opens every time,
every acknowledged record is there and whole, and no job claims a turn that nothing runs."""

from __future__ import annotations

import random
import threading

import pytest

from roost.client import ClientError
from roost.daemon.storage.store import Store

from conftest import DaemonHarness, shims_of

ROUNDS = 12


@pytest.mark.slow
def test_sigkill_at_random_points_loses_nothing_acknowledged(daemon_factory) -> None:
    daemon: DaemonHarness = daemon_factory("max_running_jobs = 4\nsubagent_auto_close_delay = 0.2\n")
    rng = random.Random(8)
    acknowledged: set[str] = set()
    for round_ in range(ROUNDS):
        stop = threading.Event()

        def churn() -> None:
            try:
                with daemon.client() as client:
                    while not stop.is_set():
                        row = client.call("spawn", prompt="spawn say child; report done c\nsay parent " + "x" * 300,
                                          cwd=str(daemon.home))
                        acknowledged.add(row["id"])
                        client.call("send", job=row["id"], text="say more")
            except (ClientError, OSError):
                pass  # the daemon was killed under it

        worker = threading.Thread(target=churn)
        worker.start()
        daemon.wait_for(lambda: len(acknowledged) > round_ * 3, timeout=10, what="some spawns")
        threading.Event().wait(rng.uniform(0.0, 0.3))  # a random point of the write stream
        daemon.kill()
        stop.set()
        worker.join(10)
        daemon.start()
    daemon.stop()
    store = Store(daemon.paths.store)
    assert store.check() is None and store.notice() is None
    records = {j.id: j for j in store.jobs()}
    assert acknowledged <= set(records), "every spawn the daemon acknowledged is on record"
    store.close()
    daemon.start()
    rows = {r["id"]: r for r in daemon.rows()}
    assert acknowledged <= set(rows)
    claimed = [r for r in rows.values() if r["state"] in ("starting", "working") and not r["worker_up"]]
    assert claimed == [], "no job claims a turn that nothing runs"
    daemon.stop()
    daemon.wait_for(lambda: not shims_of(daemon.paths.state_dir), what="no shim of this home left (no orphan)")
