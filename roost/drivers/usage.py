"""How each agent's own figures become ``usage`` calls (worker_protocol.call_usage) that the daemon
counts once each, whatever the agent repeats across a stop, a resume, a kill or a restart. What each
agent was measured to report, and why each source was chosen, is in docs/agents.md#usage.

- **Claude Code**: ``modelUsage`` in each ``result`` is the session's running total per model, its
  subagents' calls included, from the base it restored at start: the ``cost-state`` line it last
  wrote in its session file (at a clean exit; a killed process writes none, so its successor starts
  from the older one). A call is the growth of one model's total since the last result.
- **Codex**: ``thread/tokenUsage/updated`` has ``last`` (one model call) and ``total`` (the thread's);
  after a stop or a resume Codex sends the last call again, with the same total. A call is ``last``,
  named by the thread's total after it, so the repeat adds nothing.
- **pi**: each assistant message's ``usage`` at its ``message_end`` is one model call, named by the
  message's timestamp (and the provider's response id).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from roost.drivers.base import SNAPSHOT_ENTRIES
from roost.worker_protocol import TOKEN_KINDS, call_usage

#: Claude Code's names for a model's running figures, by roost's token kind.
CLAUDE_KINDS = {"output": "outputTokens", "cache_read": "cacheReadInputTokens",
                "cache_write": "cacheCreationInputTokens"}
#: The most of a Claude Code session file read back for its last cost-state line.
COST_STATE_TAIL = 4 * 1024 * 1024


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _money(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 0.0


def claude_figures(model_usage: Any) -> dict[str, dict[str, float]]:
    """Claude Code's ``modelUsage`` (a result's, or a cost-state's) as roost's figures per model:
    input with the cached part in it, output, cache read and write, cost."""
    out: dict[str, dict[str, float]] = {}
    for model, figures in (model_usage or {}).items() if isinstance(model_usage, dict) else ():
        if not isinstance(figures, dict):
            continue
        row: dict[str, float] = {kind: _int(figures.get(name)) for kind, name in CLAUDE_KINDS.items()}
        row["input"] = _int(figures.get("inputTokens")) + row["cache_read"] + row["cache_write"]
        row["cost"] = _money(figures.get("costUSD"))
        out[str(model)] = row
    return out


def claude_session_base(config_dir: str | None, session: str | None) -> dict[str, dict[str, float]] | None:
    """The running totals Claude Code restores when it resumes ``session``: its session file's last
    ``cost-state`` line ({} for a new session or one never closed cleanly); None when the file cannot
    be read here (a job on another host): the first result then says the base."""
    if not session:
        return {}
    if not config_dir:
        return None
    files = list(Path(config_dir, "projects").glob(f"*/{session}.jsonl")) if "/" not in session else []
    if not files:
        return None
    try:
        with open(files[0], "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - COST_STATE_TAIL))
            tail = fh.read()
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        if b'"cost-state"' in line:
            try:
                state = json.loads(line)
            except ValueError:
                continue
            if isinstance(state, dict) and state.get("type") == "cost-state":
                return claude_figures(state.get("modelUsage"))
    return {}


class ClaudeSpend:
    """Turns each ``result``'s running totals into the calls since the one before."""

    def __init__(self, base: dict[str, dict[str, float]] | None) -> None:
        #: The totals last counted, per model; None until known (see claude_session_base).
        self.seen = base
        self.results = 0

    def snapshot(self) -> dict[str, Any]:
        """The totals last counted (a few models'), for a daemon that re-adopts the worker: its next
        result's calls are counted from them, not from the session file's older base."""
        seen = None if self.seen is None else dict(list(self.seen.items())[-SNAPSHOT_ENTRIES:])
        return {"seen": seen, "results": self.results}

    def restore(self, state: Mapping[str, Any]) -> None:
        seen = state.get("seen")
        self.seen = None if seen is None else {
            str(m): {str(k): v for k, v in row.items() if isinstance(v, (int, float))} for m, row in seen.items()}
        self.results = int(state.get("results") or 0)

    def calls(self, frame: Mapping[str, Any], session: str | None) -> list[dict[str, Any]]:
        totals = claude_figures(frame.get("modelUsage"))
        self.results += 1
        if self.seen is None:  # the base is unknown: the first turn's own usage says what it added
            self.seen = {model: dict(row) for model, row in totals.items()}
            first = next(iter(self.seen.values()), None)
            turn = frame.get("usage") or {}
            if first is not None:
                grown = {"input": _int(turn.get("input_tokens")) + _int(turn.get("cache_read_input_tokens"))
                         + _int(turn.get("cache_creation_input_tokens")), "output": _int(turn.get("output_tokens")),
                         "cache_read": _int(turn.get("cache_read_input_tokens")),
                         "cache_write": _int(turn.get("cache_creation_input_tokens"))}
                share = (grown["input"] + grown["output"]) / max(1, first["input"] + first["output"])
                for kind, n in grown.items():
                    first[kind] = max(0, first[kind] - n)
                first["cost"] = first["cost"] * (1 - min(1.0, share))
        out = []
        ident = str(frame.get("uuid") or self.results)
        for model, row in totals.items():
            before = self.seen.get(model) or {}
            grown = {kind: max(0, int(row[kind] - before.get(kind, 0))) for kind in TOKEN_KINDS}
            cost = max(0.0, row["cost"] - before.get("cost", 0.0))
            if any(grown.values()) or cost:
                out.append(call_usage(f"{session}:{ident}:{model}", model, grown, cost))
            self.seen[model] = row
        return out


def codex_call(params: Mapping[str, Any], thread: str | None, model: str) -> list[dict[str, Any]]:
    """The model call a ``thread/tokenUsage/updated`` reports: its ``last``, named by the thread's
    total after it (Codex prices nothing: the daemon prices it from the config, as an estimate)."""
    usage = params.get("tokenUsage") or {}
    last, total = usage.get("last") or {}, usage.get("total") or {}
    tokens = {"input": _int(last.get("inputTokens")), "output": _int(last.get("outputTokens")),
              "cache_read": _int(last.get("cachedInputTokens"))}
    if not any(tokens.values()):
        return []
    return [call_usage(f"{thread}:{_int(total.get('totalTokens'))}", model, tokens)]


def pi_call(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The model call an assistant message of pi's was (pi prices it when its model has a price)."""
    usage = message.get("usage")
    if not isinstance(usage, dict):
        return []
    cache_read, cache_write = _int(usage.get("cacheRead")), _int(usage.get("cacheWrite"))
    tokens = {"input": _int(usage.get("input")) + cache_read + cache_write, "output": _int(usage.get("output")),
              "cache_read": cache_read, "cache_write": cache_write}
    if not any(tokens.values()):
        return []
    cost = _money((usage.get("cost") or {}).get("total")) if isinstance(usage.get("cost"), dict) else 0.0
    model = f"{message.get('provider') or ''}/{message.get('model') or ''}".strip("/")
    ident = f"{message.get('timestamp')}:{message.get('responseId') or ''}"
    return [call_usage(ident, model, tokens, cost or None)]


#: How far over a job's budget Claude Code's own cap (``--max-budget-usd``) is set: roost stops the
#: tree at the budget itself; the agent's cap is the second guard, for a stop that came too late.
GUARD_MARGIN = 1.25


def budget_guard(budget_usd: Any) -> list[str]:
    """Claude Code's arguments for its own spending cap: none without a budget in dollars."""
    if not isinstance(budget_usd, (int, float)) or isinstance(budget_usd, bool) or budget_usd <= 0:
        return []
    return ["--max-budget-usd", f"{budget_usd * GUARD_MARGIN:.4f}"]
