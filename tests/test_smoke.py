"""The quickest whole-path check: a real daemon, a real built-in worker, one turn."""

from __future__ import annotations


def test_a_turn_on_the_builtin_agent(daemon):
    job = daemon.spawn("say hello there")
    row = daemon.wait_state(job, "idle")
    assert row["last_text"] == "hello there"
    assert row["worker_up"] and row["pid"]
    assert "hello there" in daemon.texts(job)
