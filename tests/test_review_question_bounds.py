"""A waiting turn's question is bounded wherever the daemon keeps it. Claude Code's permission
question quotes the tool's whole input (a Write's file: megabytes), built inside the daemon, so no
frame limit cut it before: its ``state`` entry must still be one a client can read. In process
(tests/engine_fakes.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roost.config import Config
from roost.models import QUESTION_MAX
from roost.protocol import ENTRY_MAX, MAX_FRAME, encode
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=100, subagent_auto_close_delay=4, report_hold_max=60, max_running_jobs=0)


@pytest.fixture
async def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, CFG)


@pytest.mark.parametrize("size", [ENTRY_MAX - 1, ENTRY_MAX, ENTRY_MAX + 1, 3 * MAX_FRAME])
async def test_a_huge_question_leaves_every_entry_and_page_under_the_limits(rig: Rig, size: int) -> None:
    job = await rig.spawn("write it")
    body = json.dumps({"file_path": "/tmp/x", "content": 'say "hi"\n' * (size // 10 + 1)})
    question = ("Claude Code asks to use Write: " + body)[:size - 5] + " yes?"
    worker = rig.worker(job)
    worker.on_event({"type": "turn_end", "run": worker.prompts[-1][0], "outcome": "waiting", "question": question})
    await rig.settle()
    assert rig.state(job) == "waiting"
    assert len(rig.job(job).question) <= QUESTION_MAX and rig.job(job).question.endswith(" yes?")
    page = rig.store.timeline_page(job, limit=2000)
    for entry in page["entries"]:  # each text of an entry at most ENTRY_MAX characters, as text entries are
        assert all(len(v) <= ENTRY_MAX for v in entry["data"].values() if isinstance(v, str)), entry["kind"]
    assert len(encode({"type": "response", "id": 1, "ok": True, "data": page})) <= MAX_FRAME
    [waiting] = [e["data"] for e in page["entries"] if e["kind"] == "state" and e["data"]["state"] == "waiting"]
    kept = waiting["question"]
    assert kept == question if size <= ENTRY_MAX else (kept.endswith(" yes?") and waiting["cut"] > 0)
