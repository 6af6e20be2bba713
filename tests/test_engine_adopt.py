"""Re-adoption after a SIGKILL of the daemon, in process (issue 31, item 8): a real store, fake
workers, the fake clock; the second daemon's worker replays what its shim kept, as the shim does,
then answers get_state. Each report is handed to the agent exactly once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from roost.config import Config
from roost.daemon.storage import recovery
from roost.models import Job
from tests.engine_fakes import FakeWorker, Rig

CFG = Config(idle_timeout=100, subagent_auto_close_delay=4, report_hold_max=60, max_running_jobs=0)


class KeptWorker(FakeWorker):
    """A worker a past daemon left under its shim: on connecting, the shim replays what it kept
    (``kept``: events), and only then does the worker answer get_state (not busy: its turn is over,
    or its prompt never reached it)."""

    kept: list[dict[str, Any]] = []

    async def start(self) -> None:
        self.pid = self.job.pid
        for event in self.kept:
            self.on_event(event)


def reports_handed(worker: FakeWorker, child: str) -> int:
    return sum(message.count(f'<roost-report child="{child}"') for _, message in worker.prompts)


async def killed_with_a_report_held(tmp_path: Path) -> tuple[str, str, int]:
    """A parent in its turn (run R) and its child's report held for it; then the daemon is
    SIGKILLed: its tasks gone, its store closed, the parent's worker left running."""
    rig = Rig(tmp_path, CFG)
    parent = await rig.spawn("lead")
    child = await rig.spawn("sub", caller=parent)
    rig.worker(child).end_turn(text="found it")
    await rig.settle()
    assert len(rig.sup.store.pending_reports(parent)) == 1  # held: the parent's turn runs
    run = rig.worker(parent).prompts[0][0]
    rig.sup.engine.cancel_tasks()
    rig.store.close()
    return parent, child, run


async def restarted(tmp_path: Path, parent: str, monkeypatch: pytest.MonkeyPatch,
                    kept: list[dict[str, Any]]) -> tuple[Rig, list[KeptWorker]]:
    """The next daemon, re-adopting the parent's worker (its shim keeping ``kept``)."""
    adopted: list[KeptWorker] = []

    def adopt(job: Job, record: Any, committed: int, on_event: Any, on_exit: Any) -> KeptWorker:
        worker = KeptWorker(job, on_event, on_exit)
        worker.kept = kept
        adopted.append(worker)
        return worker

    record = SimpleNamespace(shim_pid=0, shim_start=0, token_hash="", remote=None)
    monkeypatch.setattr(recovery, "adoptable", lambda index, state_dir: [(parent, record)])
    rig = Rig(tmp_path, CFG, adopt=adopt)
    await rig.settle()
    return rig, adopted


async def test_a_turn_begun_after_the_adopted_turn_ended_is_not_taken_for_one_that_never_reached_the_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window the fault test found: the adopted turn's turn_end is among the lines the shim kept;
    applied, it ends the turn and the held report goes at once as a new turn. The worker's answer
    to get_state ("not busy": its turn was over) must not settle that new turn as one whose prompt
    never reached it: the report was then sent again, and the agent took it twice."""
    parent, child, run = await killed_with_a_report_held(tmp_path)
    rig, adopted = await restarted(tmp_path, parent, monkeypatch,
                                   kept=[{"type": "turn_end", "run": run, "outcome": "ok"}])
    worker = adopted[0]
    assert [kind for kind, _ in worker.commands].count("prompt") == 1, worker.commands
    assert reports_handed(worker, child) == 1
    assert rig.state(parent) == "working"
    kinds = rig.kinds(parent)
    assert kinds.count("reports") == 1
    assert not [e for e in rig.store.timeline_page(parent, limit=2000)["entries"] if e["kind"] == "error"]
    worker.end_turn()
    await rig.settle()
    assert rig.state(parent) == "idle" and reports_handed(worker, child) == 1
    assert not rig.sup.store.pending_reports(parent)


async def test_a_prompt_committed_but_never_written_to_the_worker_goes_again_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window the resync is for: the record says the turn is in flight, the shim kept nothing
    of it and the worker is not busy (the daemon died between the commit and writing the prompt).
    The prompt goes again, once, and its turn then ends as any."""
    parent, _, run = await killed_with_a_report_held(tmp_path)
    rig, adopted = await restarted(tmp_path, parent, monkeypatch, kept=[])
    worker = adopted[0]
    assert [message for _, message in worker.prompts] == ["lead"]
    assert worker.prompts[0][0] > run
    errors = [e["data"]["message"] for e in rig.store.timeline_page(parent, limit=2000)["entries"]
              if e["kind"] == "error"]
    assert errors == ["the prompt had not reached the worker when the daemon stopped; it goes again"]
    worker.end_turn()
    await rig.settle()
    assert [kind for kind, _ in worker.commands].count("prompt") == 2  # then the held report, once
    assert worker.prompts[1][1].startswith("<roost-report")
