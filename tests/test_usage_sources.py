"""Each agent's own figures as roost's calls (roost/drivers/usage.py), the usage table that counts a
call once (roost/daemon/storage/usage.py), pricing from the config, and the budget rule
(roost/rules/budgets.py): in process, no agent."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from roost.config import ConfigError, parse_config
from roost.daemon.engine.spend import call_of, priced
from roost.daemon.storage import usage as usage_table
from roost.daemon.storage.usage import CALL_ID_MAX, Call, UsageTable, day_of
from roost.drivers.claude import ClaudeAdapter
from roost.drivers.usage import ClaudeSpend, budget_guard, claude_session_base, codex_call, pi_call
from roost.rules import budgets
from roost.rules.budgets import Budget, Spent


def model_usage(inp: int, out: int, cache_read: int = 0, cache_write: int = 0, cost: float = 0.0) -> dict:
    return {"m": {"inputTokens": inp, "outputTokens": out, "cacheReadInputTokens": cache_read,
                  "cacheCreationInputTokens": cache_write, "costUSD": cost, "contextWindow": 200000}}


def calls(events: list[dict]) -> list[dict]:
    return [e["call"] for e in events if e["type"] == "usage" and "call" in e]


def test_claude_counts_the_growth_of_each_models_running_total_with_cached_input_in_input() -> None:
    spend = ClaudeSpend({})
    [first] = calls(spend.calls({"uuid": "r1", "modelUsage": model_usage(10, 7, 900, 50, 0.75)}, "s"))
    assert first == {"id": "s:r1:m", "model": "m", "input": 960, "output": 7, "cache_read": 900,
                     "cache_write": 50, "cost_usd": 0.75}
    [second] = calls(spend.calls({"uuid": "r2", "modelUsage": model_usage(20, 9, 900, 50, 1.0)}, "s"))
    assert (second["input"], second["output"], second["cost_usd"]) == (10, 2, pytest.approx(0.25))
    assert calls(spend.calls({"uuid": "r3", "modelUsage": model_usage(20, 9, 900, 50, 1.0)}, "s")) == [], \
        "a result with nothing new (an aborted turn) is no call"


def test_a_claude_adapter_gives_the_context_and_the_calls_at_each_result() -> None:
    adapter = ClaudeAdapter(session=None)
    adapter.run = 1
    result = {"type": "result", "subtype": "success", "is_error": False, "uuid": "u1", "session_id": "s",
              "modelUsage": model_usage(120, 8, cost=0.001)}
    events = adapter.decode(json.dumps(result).encode())
    assert {"type": "usage", "usage": {"context_window": 200000}} in events
    assert [(c["input"], c["output"]) for c in calls(events)] == [(120, 8)]


def test_claudes_base_is_the_last_cost_state_of_its_session_file(tmp_path: Path) -> None:
    folder = tmp_path / "projects" / "-some-dir"
    folder.mkdir(parents=True)
    lines = [{"type": "user"}, {"type": "cost-state", "modelUsage": model_usage(100, 5)},
             {"type": "assistant"}, {"type": "cost-state", "modelUsage": model_usage(300, 15, cost=0.2)},
             {"type": "assistant"}]  # a killed process wrote turns after the last cost-state, and none of its own
    (folder / "sess-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    base = claude_session_base(str(tmp_path), "sess-1")
    assert base == {"m": {"input": 300, "output": 15, "cache_read": 0, "cache_write": 0, "cost": 0.2}}
    spend = ClaudeSpend(base)
    [call] = calls(spend.calls({"uuid": "r", "modelUsage": model_usage(420, 23, cost=0.3)}, "sess-1"))
    assert (call["input"], call["output"], call["cost_usd"]) == (120, 8, pytest.approx(0.1))
    assert claude_session_base(str(tmp_path), None) == {}, "a new session starts from nothing"
    assert claude_session_base(str(tmp_path), "other") is None, "no file here: the base is not known"


def test_claude_with_an_unknown_base_takes_the_first_turns_own_usage() -> None:
    spend = ClaudeSpend(None)
    frame = {"uuid": "r", "modelUsage": model_usage(480, 32, cost=0.004),
             "usage": {"input_tokens": 120, "output_tokens": 8}}
    [call] = calls(spend.calls(frame, "s"))
    assert (call["input"], call["output"]) == (120, 8)
    assert call["cost_usd"] == pytest.approx(0.004 * 128 / 512)


def test_codex_names_a_call_by_the_threads_total_so_its_repeat_after_a_stop_is_the_same_call() -> None:
    params = {"tokenUsage": {"last": {"inputTokens": 120, "cachedInputTokens": 20, "outputTokens": 8,
                                      "totalTokens": 128}, "total": {"totalTokens": 256}}}
    [call] = calls(codex_call(params, "th", "gpt"))
    assert call == {"id": "th:256", "model": "gpt", "input": 120, "output": 8, "cache_read": 20, "cache_write": 0}
    assert calls(codex_call(params, "th", "gpt")) == [call], "the same call again has the same id"
    assert codex_call({"tokenUsage": {"last": {}}}, "th", "gpt") == []


def test_pi_gives_one_call_per_assistant_message_with_its_cost() -> None:
    message = {"role": "assistant", "provider": "fake", "model": "fm", "timestamp": 1700, "responseId": "x",
               "usage": {"input": 10, "output": 7, "cacheRead": 900, "cacheWrite": 50, "cost": {"total": 0.0123}}}
    [call] = calls(pi_call(message))
    assert call == {"id": "1700:x", "model": "fake/fm", "input": 960, "output": 7, "cache_read": 900,
                    "cache_write": 50, "cost_usd": 0.0123}
    unpriced = calls(pi_call({**message, "usage": {"input": 10, "output": 7, "cost": {"total": 0}}}))
    assert "cost_usd" not in unpriced[0], "no price: no cost, not a cost of 0 (the config may price it)"


def test_the_table_counts_a_call_once_and_sums_by_day_and_job() -> None:
    db = sqlite3.connect(":memory:")
    db.row_factory = sqlite3.Row
    usage_table.create(db)
    table = UsageTable(db)
    call = Call("j1", "c1", "m", {"input": 100, "output": 5}, 0.01, False)
    day = 1_800_000_000.0
    assert table.add(call, day) is True
    assert table.add(call, day + 60) is False, "the same id again adds nothing"
    assert table.add(Call("j1", "c2", "m", {"input": 50, "output": 1}, None, False), day + 86400) is True
    sums = table.by_day_and("job", day_of(day), day_of(day + 86400))
    assert sums[(day_of(day), "j1")]["input"] == 100 and sums[(day_of(day + 86400), "j1")]["input"] == 50
    assert table.spent_since(day_of(day)) == (pytest.approx(0.01), 156)
    long = Call("j1", "x" * (CALL_ID_MAX + 50), "m", {"input": 1}, None, False)
    assert table.add(long, day + 2 * 86400) and len(table.calls("j1", 1)[0]["call"]) == CALL_ID_MAX, "an id is cut at its bound"


def test_a_call_without_a_cost_is_priced_from_the_config_as_an_estimate() -> None:
    prices = {"gpt": {"input": 1.0, "output": 10.0, "cache_read": 0.1}}
    call = call_of("j", {"id": "c", "model": "gpt", "input": 1_000_000, "cache_read": 400_000, "output": 1000},
                   prices)
    assert call is not None and call.estimate
    assert call.cost == pytest.approx(0.6 + 0.04 + 0.01)
    own = call_of("j", {"id": "c", "model": "gpt", "input": 5, "cost_usd": 0.5}, prices)
    assert own is not None and (own.cost, own.estimate) == (0.5, False), "the agent's own cost wins"
    unknown = call_of("j", {"id": "c", "model": "other", "input": 5}, prices)
    assert unknown is not None and (unknown.cost, unknown.estimate) == (None, False)
    assert call_of("j", {"model": "gpt", "input": 5}, prices) is None, "a call with no id is not counted"
    assert priced("gpt", {"input": 10, "cache_read": 20}, prices) == pytest.approx(20 * 0.1 / 1e6), \
        "fresh input is never below zero"


def test_the_budget_rule_warns_at_80_percent_and_stops_at_the_cap_each_once() -> None:
    budget = Budget(usd=1.0, tokens=1000)
    assert budgets.level(budget, Spent(0.79, 10)) == "ok"
    assert budgets.level(budget, Spent(0.1, budgets.WARN_AT * 1000)) == "warn", "either figure counts"
    assert budgets.level(budget, Spent(1.0, 0)) == "over"
    assert budgets.crossed("ok", budget, Spent(0.85, 0)) == "warn"
    assert budgets.crossed("warn", budget, Spent(0.9, 0)) is None, "a level is acted on once"
    assert budgets.crossed("warn", budget, Spent(1.2, 0)) == "over"
    assert budgets.crossed("ok", budget, Spent(1.2, 0)) == "over", "a call may jump past the warning"
    assert budgets.level(Budget(), Spent(99.0, 10**9)) == "ok", "no cap, nothing to reach"
    assert budgets.level(Budget(usd=0.0), Spent()) == "over", "a cap of 0 is spent at once"
    why = budgets.spawn_refusal([("the day", Budget(), Spent()), ("job ab", budget, Spent(1.5, 0))])
    assert why is not None and "job ab spent $1.5000" in why and "roost budget" in why
    assert budgets.spawn_refusal([("job ab", budget, Spent(0.5, 0))]) is None
    assert budgets.stop_reason("budget:ab") == "stopped by the budget of job ab"
    assert budgets.stop_reason("budget:day") == "stopped by the daily budget"
    assert budgets.stop_reason("ab") is None and budgets.stop_reason(None) is None


def test_claudes_own_cap_is_a_second_guard_above_the_budget() -> None:
    assert budget_guard(2.0) == ["--max-budget-usd", "2.5000"]
    assert budget_guard(None) == [] and budget_guard(0) == [] and budget_guard(True) == []


def test_prices_and_budgets_in_the_config_are_checked_with_the_key_that_is_wrong() -> None:
    config = parse_config('budget_daily_usd = 5\n[prices.gpt]\ninput = 1.25\noutput = 10\n'
                          '[drivers.claude]\nkind = "claude"\nbudget_usd = 2\nbudget_tokens = 100000\n', "x.toml")
    assert config.budget_daily_usd == 5.0 and dict(config.prices["gpt"]) == {"input": 1.25, "output": 10.0}
    assert (config.driver("claude").budget_usd, config.driver("claude").budget_tokens) == (2.0, 100000)
    for text, key in [("[prices.gpt]\ninput = -1\n", "prices.gpt.input"), ("[prices.gpt]\nfoo = 1\n", "prices.gpt.foo"),
                      ('budget_daily_usd = "x"\n', "budget_daily_usd"), ("prices = 3\n", "prices"),
                      ('[drivers.claude]\nkind = "claude"\nbudget_tokens = -5\n', "drivers.claude.budget_tokens")]:
        with pytest.raises(ConfigError) as info:
            parse_config(text, "x.toml")
        assert info.value.key == key, text


def test_the_ledger_keeps_each_subtrees_figures_from_the_records_and_the_calls() -> None:
    from roost.daemon.engine.spend import Ledger
    from roost.daemon.storage.index import JobIndex
    from roost.models import Job

    def job(ident: str, parent: str | None, depth: int, **usage: float) -> Job:
        return Job(id=ident, title=ident, driver="claude", cwd="/", parent=parent, depth=depth, usage=dict(usage))
    index = JobIndex()  # a root with no spend of its own, a child, and its child priced as an estimate
    index.load([job("r", None, 0), job("c", "r", 1, input=100, output=10, cost=0.5),
                job("g", "c", 2, input=7, output=1, cost=0.25, cost_estimate=True), job("o", None, 0, input=3)])
    book = Ledger.from_index(index, [])
    assert book.tree("r") == {"input": 107, "output": 11, "cache_read": 0, "cache_write": 0, "cost": 0.75,
                              "cost_estimate": True}
    assert book.tree("c")["input"] == 107 and book.tree("g")["input"] == 7 and book.tree("o")["input"] == 3
    book.add(("g", "c", "r"), {"input": 1, "output": 1, "cost": 0.25}, False)
    assert book.spent("r") == Spent(1.0, 120) and book.spent("o") == Spent(0.0, 3)
    assert book.tree("nobody")["input"] == 0


def test_the_ledger_of_a_store_of_briefs_reads_no_record(tmp_path) -> None:
    """After a start the jobs are briefs: the ledger takes their figures from the store's records
    as SQLite reads them (``Store.stored_usage``), loading none; a loaded job's are memory's."""
    import gc

    from roost.daemon.engine.spend import Ledger
    from roost.daemon.storage import recovery
    from roost.daemon.storage.index import JobIndex
    from roost.daemon.storage.store import Store
    from roost.models import Job, State

    store = Store(tmp_path / "roost.db")
    with store.transaction():
        for ident, parent, depth, usage in (("r", None, 0, {}), ("c", "r", 1, {"input": 100, "output": 10}),
                                             ("g", "c", 2, {"input": 7, "cost": 0.25, "cost_estimate": True})):
            store.save_job(Job(id=ident, title=ident, driver="claude", cwd="/", parent=parent, depth=depth,
                               state=State.DONE, usage=usage))
        store._db.execute("INSERT INTO jobs (id, parent, record) VALUES ('bad', NULL, '{not json')")
    index = JobIndex()
    try:
        recovery.recover(store, index, lambda: 1000.0, tmp_path)
    finally:
        gc.unfreeze()
    loaded = index.jobs.loaded()
    book = Ledger.from_index(index, store.stored_usage())
    assert index.jobs.loaded() == loaded, "no record read for the ledger"
    assert book.tree("r")["input"] == 107 and book.tree("r")["cost_estimate"] and book.tree("c")["output"] == 10
    index.jobs["c"].usage = {"input": 200}  # loaded, changed in memory: memory's figures count
    assert Ledger.from_index(index, store.stored_usage()).tree("r")["input"] == 207
    store.close()
