"""The usage screen (``U``) against a real daemon whose store holds a job's model calls (written
through the store's own API before it starts, as a run of a real agent leaves them)."""

from __future__ import annotations

import time

from roost.daemon.storage.store import Store
from roost.daemon.storage.usage import Call
from roost.models import Job, State
from roost.tui.agent_view import AgentViewScreen
from roost.tui.usage_screen import UsageScreen

from conftest import DaemonHarness
from tui_helpers import SIZE, make_app, press_alone, until


async def test_U_shows_today_the_week_and_each_tree_and_esc_goes_back(roost_home):
    now = time.time()
    job = Job(id="spnt", title="the spender", driver="claude", cwd=str(roost_home), state=State.IDLE,
              created_at=now, state_since=now, updated_at=now, reaped=True,
              usage={"input": 2400, "output": 160, "cache_read": 0, "cache_write": 0, "cost": 0.25})
    harness = DaemonHarness(roost_home)
    harness.write_config("")
    harness.paths.ensure()
    store = Store(harness.paths.store)
    with store.transaction():
        store.save_job(job)
        for i in range(20):
            store.usage.add(Call(job.id, f"c{i}", "m", {"input": 120, "output": 8}, 0.0125, False), now)
    store.close()
    harness.start()
    try:
        app = make_app(harness)
        async with app.run_test(size=SIZE) as pilot:
            view = await until(pilot, lambda: isinstance(app.screen, AgentViewScreen) and app.screen.table.row_count == 1
                               and app.screen, "the agent view")
            await press_alone(pilot, "U")
            screen = await until(pilot, lambda: isinstance(app.screen, UsageScreen) and app.screen, "the usage screen")
            text = await until(pilot, lambda: "today" in str(screen.body.render()) and str(screen.body.render()),
                               "the report")
            assert "today (" in text and "2.6k tok (in 2.4k, out 160" in text and "$0.25" in text and "20 calls" in text
            assert "spnt" in text and "the spender" in text, "by job tree"
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is view, "back to the agent view")
    finally:
        harness.stop()
