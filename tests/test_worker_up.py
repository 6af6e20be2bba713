"""'Worker up' has one definition (``Job.worker_up``): the wire row, the `ls` dot, the agent view's
rules and its window all read it, so a record with a pid the daemon marked reaped is down for all."""

from __future__ import annotations

import re
from pathlib import Path

from roost.models import Job, Row, State
from roost.rules.row_text import worker_dot
from roost.rules.row_window import past_window

ROOT = Path(__file__).resolve().parents[1]


def _row(pid: int | None, reaped: bool, state: State = State.IDLE) -> Row:
    return Row(job=Job(id="j1", title="t", driver="builtin", cwd="/", state=state, pid=pid, reaped=reaped))


def test_a_pid_the_daemon_marked_reaped_is_a_worker_down_everywhere():
    up, reaped, closed = _row(41, False), _row(41, True), _row(None, True)
    assert [r.job.worker_up for r in (up, reaped, closed)] == [True, False, False]
    assert [r.to_wire()["worker_up"] for r in (up, reaped, closed)] == [True, False, False]
    assert [worker_dot(r) for r in (up, reaped, closed)] == ["●", "○", "○"]


def test_the_agent_views_window_keeps_a_root_only_while_its_worker_is_up():
    rows = [Row(job=Job(id=f"j{i}", title="t", driver="builtin", cwd="/", state=State.DONE, created_at=i,
                        pid=100 + i if i < 2 else None, reaped=i == 1)) for i in range(4)]
    # j0's worker is up (kept always); j1's pid was reaped: it counts against the window like j2, j3
    assert past_window(rows, limit=1) == ["j2", "j1"]


def test_no_module_derives_worker_up_from_the_pid_itself():
    pattern = re.compile(r"pid is not None and not [\w.]*reaped")
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "roost").rglob("*.py")
                 if p.name != "models.py" and pattern.search(p.read_text())]
    assert offenders == []
