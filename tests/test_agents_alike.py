"""The rows of the three real agents look alike (issue 11): pi, Claude Code and Codex from npm, each
against its fake model server, in one daemon, answer the same prompt and their rows carry the same
usage keys, go through the same states and peek the same last text. And the usage each driver makes
of its agent's own counts means the same: input with the cached part in it, the calls' cost
(tests/test_usage_sources.py checks each agent's figures one by one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import DaemonHarness
from fake_anthropic import FakeAnthropic
from fake_openai import FakeOpenAI
from fakellm import INPUT_TOKENS, OUTPUT_TOKENS, FakeLLM, models_json
from test_claude_driver import claude_bin, claude_profile  # noqa: F401  (claude_bin is a fixture)
from test_codex_driver import codex_bin, codex_profile  # noqa: F401  (codex_bin is a fixture)
from test_pi_driver import pi_bin  # noqa: F401  (a fixture)

KINDS = ("pi", "claude", "codex")
#: What every row's usage says; ``cost`` only where the agent prices its calls (Codex does not).
USAGE = {"input", "output", "cache_read", "cache_write", "context_tokens", "context_window"}
PRICED = {"pi", "claude"}
#: The fake model's price for pi, in dollars per million tokens.
PI_PRICE = {"input": 3.0, "output": 15.0, "cacheRead": 0.3, "cacheWrite": 3.75}


def pi_profile(pi: Path, fake: FakeLLM, where: Path) -> str:
    """The ``[drivers.pi]`` that runs the installed pi against the fake model, in an agent dir of its own."""
    agent, home = where / "pi-agent", where / "pi-home"
    agent.mkdir()
    home.mkdir()
    models = models_json(fake.url)
    models["providers"]["fake"]["models"][0]["cost"] = PI_PRICE
    (agent / "models.json").write_text(json.dumps(models))
    return (f'[drivers.pi]\ncommand = {json.dumps(str(pi))}\nprovider = "fake"\nmodel = "fake-model"\n'
            f'agent_dir = {json.dumps(str(agent))}\nenv = {{ HOME = {json.dumps(str(home))} }}\n')


@pytest.mark.pi
@pytest.mark.claude
@pytest.mark.codex
def test_the_rows_of_pi_claude_and_codex_look_alike(pi_bin, claude_bin, codex_bin,  # noqa: F811
                                                     daemon_factory: Callable[[str], DaemonHarness],
                                                     tmp_path: Path) -> None:
    fakes = FakeLLM().start(), FakeAnthropic().start(), FakeOpenAI().start()
    try:
        profiles = [pi_profile(pi_bin, fakes[0], tmp_path),
                    claude_profile(claude_bin, fakes[1], tmp_path / "claude-home"), codex_profile(codex_bin, fakes[2])]
        daemon = daemon_factory("\n".join(profiles))
        jobs = {kind: daemon.spawn(f"hello {kind}", driver=kind) for kind in KINDS}
        rows: dict[str, dict[str, Any]] = {
            kind: daemon.wait_row(job, lambda r: r["state"] in ("idle", "failed") and USAGE <= set(r["usage"]),
                                  timeout=60, what=f"the {kind} job's turn and its usage")
            for kind, job in jobs.items()}
    finally:
        for fake in fakes:
            fake.stop()
    for kind, row in rows.items():
        assert (row["state"], row["last_text"]) == ("idle", f"echo: hello {kind}"), row["reason"]
        states = [e["data"]["state"] for e in daemon.timeline(jobs[kind]) if e["kind"] == "state"]
        assert states == ["starting", "working", "idle"], kind
        usage = row["usage"]
        assert set(usage) == USAGE | ({"cost"} if kind in PRICED else set()), kind
        assert (usage["input"], usage["output"]) == (INPUT_TOKENS, OUTPUT_TOKENS), kind
        # Claude Code prints an answer before its last output count: its context has the answer as printed
        assert INPUT_TOKENS < usage["context_tokens"] <= INPUT_TOKENS + OUTPUT_TOKENS, kind
        assert usage["context_window"] > 0, kind
    pi_cost = (INPUT_TOKENS * PI_PRICE["input"] + OUTPUT_TOKENS * PI_PRICE["output"]) / 1e6
    assert rows["pi"]["usage"]["cost"] == pytest.approx(pi_cost)
    assert rows["claude"]["usage"]["cost"] > 0
