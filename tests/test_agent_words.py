"""What the agents say when they are limited, retrying or broken, made into roost's events and words:
the pure functions (roost/drivers/limits.py, roost/text.py) and the adapters fed the frames Claude Code
2.1.328, Codex 0.169.0 and pi printed against the fake servers' 429s and a closed port (docs/agents.md)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from roost.drivers.base import DriverError, find_agent_program
from roost.drivers.claude_stream import ClaudeAdapter
from roost.drivers.codex import CodexAdapter
from roost.drivers.limits import codex_error, is_limit, reset_from_words
from roost.drivers.pi import PiAdapter
from roost.text import WORDS_MAX, failure_line, plain_words

NOW = 1_796_172_588.0


def fed(adapter: Any, *frames: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for frame in frames:
        out += adapter.decode(json.dumps(frame).encode())
    return out


def of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


# -- words ------------------------------------------------------------------------------------------
def test_control_sequences_go_and_the_failure_line_is_kept():
    codex = ("WARNING: proceeding, even though we could not create PATH aliases: Refusing to create helper "
             "binaries under temporary dir \"/tmp\"\n\x1b[2m2026-12-02T00:49:47Z\x1b[0m \x1b[31mERROR\x1b[0m "
             "codex_core::client: stream failed\n\x1b[2m2026-12-02T00:49:48Z\x1b[0m  INFO shutting down")
    noise = ("WARNING: proceeding, even though we could not create PATH aliases",)
    assert failure_line(codex, noise) == "2026-12-02T00:49:47Z ERROR codex_core::client: stream failed"
    assert failure_line("\x1b]0;pwned\x07\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ ok") == "link ok"
    assert plain_words("^[[2mdim^[[0m \x9b31mred\x00\x07\tend\r\n") == "dim red end"
    assert failure_line("just a line") == "just a line"


@pytest.mark.parametrize("hostile", ["\x1b" * 200_000, "\x00" * 200_000, "\x1b[" * 100_000, "^[[" * 100_000,
                                     "\x1b]" + "x" * 200_000, "\n" * 200_000, ""])
def test_hostile_error_text_gives_bounded_plain_words_fast(hostile):
    start = time.perf_counter()
    words = failure_line(hostile)
    assert time.perf_counter() - start < 2.0
    assert len(words) <= WORDS_MAX and "\x1b" not in words and "\x00" not in words


def test_a_huge_line_is_cut_to_the_bound_keeping_its_start_and_saying_so():
    line = failure_line("error: " + "x" * 1_000_000)
    assert len(line) == WORDS_MAX and line.endswith("…")
    assert len(plain_words("y" * 1_000_000)) == WORDS_MAX, "the end of what was said"


def test_reset_times_from_an_agents_words():
    assert reset_from_words("429 Rate limit reached. Please try again in 30s.", NOW) == NOW + 30
    assert reset_from_words("try again in 1m30s", NOW) == NOW + 90
    assert reset_from_words("Please try again in 20ms", NOW) == pytest.approx(NOW + 0.02)
    at = reset_from_words("You've hit your usage limit. … or try again at 1:49 AM.", NOW)
    local = time.localtime(at)
    assert (local.tm_hour, local.tm_min) == (1, 49) and NOW < at <= NOW + 86400
    assert reset_from_words("try again at 13:99", NOW) is None and reset_from_words("no time", NOW) is None


def test_quota_words_are_a_limit_only_as_providers_say_them():
    """A failed turn's words name its paths: a directory called "quotas" is no limit."""
    for said in ("You exceeded your current quota, please check your plan", "insufficient_quota",
                 "Quota exceeded for metric generate_content_requests", "429 Too Many Requests"):
        assert is_limit(said), said
    for said in ("cannot open /home/u/quotas/src/file: permission denied", "quota.py: syntax error"):
        assert not is_limit(said), said


# -- a program that is there but cannot run -------------------------------------------------------
def test_a_program_that_is_not_executable_is_said_so_not_missing(tmp_path: Path):
    program = tmp_path / "claude"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o644)
    for command, path in ((str(program), ""), ("claude", str(tmp_path))):
        with pytest.raises(DriverError) as info:
            find_agent_program("Claude Code", command, {"PATH": path} if path else {}, "npm i", "18")
        assert f"{program} exists but is not an executable program" in str(info.value)
        assert "-rw-r--r--" in str(info.value) and "not installed" not in str(info.value)
    with pytest.raises(DriverError, match="not installed"):
        find_agent_program("Claude Code", "claude", {"PATH": str(tmp_path / "none")}, "npm i", "18")


# -- Claude Code ---------------------------------------------------------------------------------
def claude(run: Any = 7, config_dir: str = "") -> tuple[ClaudeAdapter, list[dict[str, Any]]]:
    adapter = ClaudeAdapter(session=None, config_dir=config_dir)
    emitted: list[dict[str, Any]] = []
    adapter.bind(emitted.append, lambda data: None)
    if run is not None:
        adapter.encode({"type": "prompt", "id": 1, "run": run, "message": "hi"})
    return adapter, emitted


def test_claudes_429_retry_is_a_limit_until_its_retry_and_a_5xx_retry_is_retrying():
    adapter, _ = claude()
    before = time.time()
    events = fed(adapter, {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10,
                           "retry_delay_ms": 33925, "error_status": 429, "error": "rate_limit"})
    [limit] = of_type(events, "limited")
    assert limit["retrying"] is True and limit["attempt"] == 1
    assert before + 33.9 <= limit["until"] <= time.time() + 33.93
    assert limit["words"] == "Claude Code: rate limited (429 rate_limit); retry 1 of 10"
    assert of_type(events, "note"), "the timeline still gets its note"
    [retry] = of_type(fed(adapter, {"type": "system", "subtype": "api_retry", "attempt": 1, "max_retries": 10,
                                    "retry_delay_ms": 624, "error_status": None, "error": "unknown"}), "retrying")
    assert retry == {"type": "retrying", "words": "Claude Code: the model call failed (unknown)", "attempt": 1,
                     "of": 10, "delay": 0.624}


def test_claudes_usage_limit_result_is_a_limit_then_a_failed_turn():
    adapter, _ = claude()
    events = fed(adapter, {"type": "system", "subtype": "init", "session_id": "s"},
                 {"type": "result", "subtype": "success", "is_error": True, "api_error_status": 429,
                  "api_error_type": "rate_limit_error", "terminal_reason": "api_error",
                  "result": "API Error: Request rejected (429) · Claude AI usage limit reached"})
    assert [e["type"] for e in events] == ["usage", "limited", "turn_end"]
    assert events[1] == {"type": "limited", "words": "Claude Code: API Error: Request rejected (429) · Claude AI "
                                                     "usage limit reached", "retrying": False}
    assert events[2]["error"] == "Claude Code's turn failed: API Error: Request rejected (429) · Claude AI usage limit reached"


def test_claudes_rate_limit_event_gives_the_reset_it_names():
    adapter, _ = claude(run=None)
    [limit] = fed(adapter, {"type": "rate_limit_event", "rate_limit_info": {
        "status": "rejected", "resetsAt": NOW + 3600, "rateLimitType": "five_hour"}})
    assert limit == {"type": "limited", "words": "Claude Code: the five_hour limit was reached", "retrying": False,
                     "until": NOW + 3600}
    assert fed(adapter, {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}}) == []


def test_not_logged_in_says_which_config_directory_roost_gave_claude():
    adapter, _ = claude(config_dir="/state/claude-config")
    [end] = of_type(fed(adapter, {"type": "result", "subtype": "success", "is_error": True,
                                  "result": "Not logged in · Please run /login"}), "turn_end")
    assert end["error"].startswith("Claude Code's turn failed: Not logged in · Please run /login (roost gives "
                                   "Claude Code the config directory /state/claude-config: log in there with "
                                   "`CLAUDE_CONFIG_DIR=/state/claude-config claude`")


def test_a_resumed_sessions_lost_subagent_notice_does_not_end_the_prompts_turn():
    """Measured with 2.1.328 (a background subagent's process killed, the session resumed): the first
    message gets a task notification, an empty init+result, then the answer in a second init+result."""
    adapter, _ = claude(run=7)
    first = fed(adapter, {"type": "system", "subtype": "task_notification", "status": "stopped", "task_id": "ab1"},
                {"type": "system", "subtype": "init", "session_id": "s"},
                {"type": "result", "subtype": "success", "is_error": False, "result": "", "result_index": 0})
    assert not of_type(first, "turn_end") and not of_type(first, "turn_start") and adapter.run == 7
    second = fed(adapter, {"type": "system", "subtype": "init", "session_id": "s"},
                 {"type": "assistant", "message": {"content": [{"type": "text", "text": "echo: hello again"}]}},
                 {"type": "result", "subtype": "success", "is_error": False, "result": "echo: hello again",
                  "terminal_reason": "completed", "result_index": 1})
    assert not of_type(second, "turn_start"), "the answer is the prompt's turn, not one of the agent's own"
    assert [(e["run"], e["outcome"]) for e in of_type(second, "turn_end")] == [(7, "ok")]
    assert of_type(second, "text")[0]["text"] == "echo: hello again"


def test_an_empty_answer_with_no_notice_still_ends_its_turn():
    adapter, _ = claude(run=3)
    events = fed(adapter, {"type": "system", "subtype": "init", "session_id": "s"},
                 {"type": "result", "subtype": "success", "is_error": False, "result": ""})
    assert [(e["run"], e["outcome"]) for e in of_type(events, "turn_end")] == [(3, "ok")]


# -- Codex ---------------------------------------------------------------------------------------
def codex_error_frame(message: str, info: Any, will_retry: bool, details: str | None = None) -> dict[str, Any]:
    return {"method": "error", "params": {"error": {"message": message, "codexErrorInfo": info,
                                                    "additionalDetails": details}, "willRetry": will_retry}}


def test_codexs_429_retry_and_usage_limit_and_network_wait():
    adapter = CodexAdapter(thread="t", params={})
    adapter.bind(lambda e: None, lambda d: None)
    adapter.run = 5
    events = fed(adapter, codex_error_frame("Reconnecting... 1/5", {"responseStreamDisconnected": {"httpStatusCode": 429}},
                                            True, "exceeded retry limit, last status: 429 Too Many Requests"))
    [limit] = of_type(events, "limited")
    assert limit == {"type": "limited", "words": "Codex: Reconnecting... 1/5 exceeded retry limit, last status: 429 "
                                                 "Too Many Requests", "retrying": True, "attempt": 1}
    usage = codex_error({"error": {"message": "You’ve hit your usage limit. Upgrade to Pro … or try again at 1:49 AM.",
                                   "codexErrorInfo": "usageLimitExceeded"}, "willRetry": False}, NOW)
    assert usage is not None and usage["retrying"] is False and time.localtime(usage["until"]).tm_min == 49
    [wait] = of_type(fed(adapter, codex_error_frame("Reconnecting... waiting for network", None, True,
                                                    "Connection failed: error sending request")), "retrying")
    assert wait["words"] == "Codex: Reconnecting... waiting for network Connection failed: error sending request"
    assert of_type(fed(adapter, codex_error_frame("boom", "other", False)), "limited") == []


def test_codexs_startup_warning_is_never_its_exit_reason():
    adapter = CodexAdapter(thread="t", params={})
    tail = ["WARNING: proceeding, even though we could not create PATH aliases: Refusing … \x1b[2mx\x1b[0m",
            "\x1b[31mERROR\x1b[0m codex: out of memory"]
    assert adapter.exit_words(tail) == ["ERROR codex: out of memory"]
    assert adapter.exit_words(tail[:1]) == []


# -- pi ------------------------------------------------------------------------------------------
async def test_pis_429_retry_is_a_limit_until_the_reset_it_names_and_giving_up_is_one_too():
    adapter = PiAdapter(provider="fake", model="fake-model", retry=True, settle=0.01)
    emitted: list[dict[str, Any]] = []
    adapter.bind(emitted.append, lambda data: None)
    adapter.encode({"type": "prompt", "id": 1, "run": 4, "message": "hi"})
    said = "429 Rate limit reached for requests. Please try again in 30s."
    before = time.time()
    [limit] = fed(adapter, {"type": "auto_retry_start", "attempt": 1, "maxAttempts": 3, "delayMs": 2000,
                            "errorMessage": said})
    assert limit["type"] == "limited" and limit["retrying"] is True and limit["attempt"] == 1
    assert before + 30 <= limit["until"] <= time.time() + 30
    [retry] = fed(adapter, {"type": "auto_retry_start", "attempt": 2, "maxAttempts": 3, "delayMs": 4000,
                            "errorMessage": "Connection error."})
    assert retry == {"type": "retrying", "words": "pi: Connection error.", "attempt": 2, "of": 3, "delay": 4.0}
    events = fed(adapter, {"type": "auto_retry_end", "success": False, "attempt": 3, "finalError": said})
    assert [e["type"] for e in events] == ["limited", "turn_end"] and events[0]["retrying"] is False

