"""How one job's row reads as text: its age, its peek line, its usage, what its activity column
says, what it asks, and its text with report wire blocks turned back into words.

Pure functions of the row and the clock (the ``now`` parameter), used by the app, the CLI (`roost
ls`) and the daemon link alike, so a row reads the same everywhere. roost/rules/views.py places
the rows; this says what each one says.
"""

from __future__ import annotations

import html
import math
import re
import time
from typing import Any

from roost.models import FINISHED_STATES, NEEDS_INPUT_STATES, Job, Row, State
from roost.rules.approvals import describe, pending_line

__all__ = ["STATE_SYMBOLS", "activity_text", "age_seconds", "asked", "format_age", "limited_line", "peek_line", "readable_text",
           "state_marks", "usage_text", "worker_dot", "cost_text", "spend_text"]

#: One symbol per state; the dot before it says whether a worker is up (see ``worker_dot``).
STATE_SYMBOLS: dict[State, str] = {
    State.QUEUED: "⋯",
    State.STARTING: "…",
    State.WORKING: "▸",
    State.WAITING: "?",
    State.IDLE: "–",
    State.DONE: "✓",
    State.BLOCKED: "!",
    State.RATE_LIMITED: "‖",
    State.STOPPED: "■",
    State.FAILED: "✗",
}


def worker_dot(row: Row) -> str:
    """● worker up, ○ closed, ◌ not started yet; ◉/◎ the same for a pinned job."""
    up = row.job.worker_up
    if row.state in (State.QUEUED, State.STARTING) and not up:
        return "◌"
    if row.job.pinned:
        return "◉" if up else "◎"
    return "●" if up else "○"


def state_marks(row: Row) -> str:
    """The worker dot and the state symbol: ``● ▸`` works, ``○ ✓`` done and closed."""
    return f"{worker_dot(row)} {STATE_SYMBOLS[row.state]}"


def age_seconds(row: Row, now: float) -> float:
    """How old a job looks: a finished job (done, failed, stopped) shows its run time, which
    no longer grows; any other job shows the time since it was created."""
    job = row.job
    if job.state in FINISHED_STATES:
        return job.state_since - job.created_at
    return now - job.created_at


def format_age(seconds: float) -> str:
    """Compact age, floored to its largest unit: "5s", "3m", "2h", "4d"; negative or not a
    number shows "0s" (clock skew must not print nonsense)."""
    if not seconds > 0:  # also catches NaN
        return "0s"
    if math.isinf(seconds):
        return "∞"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{math.floor(seconds / size)}{unit}"
    return f"{math.floor(seconds)}s"


def peek_line(row: Row, width: int = 60) -> str:
    """The one-line preview of what a job said last: its last non-empty line, whitespace
    collapsed, cut to ``width`` characters with a trailing "…" when cut; "" when there is none
    (or when ``width`` leaves no room)."""
    if width <= 0:
        return ""
    for line in reversed(row.job.last_text.splitlines()):
        text = " ".join(line.split())
        if text:
            return text if len(text) <= width else text[: width - 1] + "…"
    return ""


def _count(value: Any) -> float | None:
    """A usage value as a non-negative number, or None when absent or not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value


def _compact(n: float) -> str:
    """Token counts as people read them: 950, 1.2k, 12k, 1.5M (one decimal below 10)."""
    if n < 1000:
        return str(int(round(n))) if round(n) < 1000 else "1k"
    for unit, size in (("k", 1e3), ("M", 1e6), ("B", 1e9)):
        value = n / size
        if round(value, 1) < 10:
            text = f"{value:.1f}".removesuffix(".0")
        else:
            text = f"{round(value):.0f}"
        if round(value) < 1000 or unit == "B":
            return text + unit
    raise AssertionError("unreachable")  # pragma: no cover


def cost_text(usd: float, estimate: bool = False) -> str:
    """Dollars as a row shows them: ``$12``, ``$1.23``, ``$0.04``, ``<$0.01``; ``~`` before an
    estimate (priced from the config's ``[prices]``, not by the agent)."""
    mark = "~" if estimate else ""
    if usd >= 100:
        return f"{mark}${usd:.0f}"
    return f"{mark}${usd:.2f}" if usd >= 0.01 or usd == 0 else f"{mark}<$0.01"


def spend_text(row: Row) -> str:
    """What the job spent: ``"<tokens> tok · $<cost>"`` (``usage_text`` without the context), "" for none."""
    usage = row.job.usage
    parts: list[str] = []
    inp, out = _count(usage.get("input")), _count(usage.get("output"))
    if inp is not None or out is not None:
        parts.append(f"{_compact((inp or 0) + (out or 0))} tok")
    cost = _count(usage.get("cost"))
    if cost:
        parts.append(cost_text(cost, bool(usage.get("cost_estimate"))))
    return " · ".join(parts)


def usage_text(row: Row) -> str:
    """Compact usage, "" when nothing is known.

    Format: ``"<tokens> tok · $<cost> · ctx <pct>%"`` where tokens is ``input + output`` in compact
    form (``950``, ``1.2k``, ``12k``, ``1.5M``), cost is the job's in dollars (``cost_text``) and pct
    is ``context_tokens / context_window`` rounded to a whole percent (``<1%`` when small but not
    zero). Each part is left out when its keys are missing or not numbers; without a window the
    context shows as a count (``ctx 3.4k``).
    """
    usage = row.job.usage
    parts = [spend_text(row)] if spend_text(row) else []
    ctx, window = _count(usage.get("context_tokens")), _count(usage.get("context_window"))
    if ctx is not None:
        if window:
            pct = ctx / window * 100
            parts.append("ctx <1%" if 0 < pct < 0.5 else f"ctx {round(pct)}%")
        else:
            parts.append(f"ctx {_compact(ctx)}")
    return " · ".join(parts)


def _cut(text: str, width: int) -> str:
    """``text`` on one line, whitespace collapsed, cut to ``width`` with a trailing "…"."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def activity_text(row: Row, width: int) -> tuple[str, bool]:
    """What a row's activity column says, and whether it is a failure: a failed or stopped
    job says why (its reason) before anything else, a queued one what it waits for, a waiting one what it asks (a permission
    request: what it asks to run); others their last line."""
    if row.state in (State.FAILED, State.STOPPED, State.QUEUED) and row.job.reason:  # a queued one: what it waits for
        return _cut(row.job.reason, width), row.state is State.FAILED
    if row.state is State.RATE_LIMITED:
        return _cut(limited_line(row.job), width), False
    if row.job.stall_words:  # a stall flag: silent for long, or a prompt the worker has not taken
        return _cut(row.job.stall_words, width), False
    if row.job.notice:  # what the agent says it retries, or which account's limit the job waits for
        return _cut(row.job.notice, width), False
    if row.state is State.WAITING and row.job.approvals:
        return _cut(pending_line(row.job.approvals), width), False
    if row.state is State.WAITING and row.job.question and not row.job.approvals:
        return _cut(row.job.question, width), False
    return peek_line(row, width), False


def limited_line(job: Job) -> str:
    """A rate-limited job's words: "rate limited until 14:05 · <the agent's words>" (this machine's
    local time; the day too when the reset is not within a day)."""
    until = ""
    if job.limited_until is not None:
        at = time.localtime(job.limited_until)
        near = abs(job.limited_until - job.state_since) < 86400
        until = " until " + time.strftime("%H:%M:%S" if near else "%Y-%m-%d %H:%M", at)
    return f"rate limited{until}" + (f" · {job.limited_words}" if job.limited_words else "")


def asked(row: Row) -> str:
    """What a job that needs a person asks: a waiting job's question, a blocked one's last text
    (its report); "" for any other job."""
    if row.state not in NEEDS_INPUT_STATES:
        return ""
    if row.state is State.WAITING and row.job.approvals:
        return "\n".join(f"approve? {describe(a)}" for a in row.job.approvals)
    return (row.state is State.WAITING and row.job.question) or row.job.last_text


# --------------------------------------------------------------------------- wire text

_REPORT_OPEN = re.compile(r'<roost-report child="([^"]*)" title="([^"]*)" state="([^"]*)" kind="([^"]*)">')
_REPORT_CLOSE = re.compile(r"</roost-report>")


def readable_text(text: str) -> str:
    """Text an agent wrote with the report blocks it was prompted with turned back into words:
    an agent that echoes its prompt (``noted while working: <roost-report child=…>``) shows
    ``↩ work 2 [9zqb] waiting (question)``, not the wire text."""
    def opened(match: re.Match[str]) -> str:
        child, title, state, kind = (html.unescape(group) for group in match.groups())
        return f"↩ {title} [{child}] {state}" + (" (question)" if kind == "question" else "") + ":"

    blocks = list(_REPORT_OPEN.finditer(text))
    if not blocks:
        return text
    pieces = [text[:blocks[0].start()]]  # the agent's own words before the first block, as written
    for match, after in zip(blocks, [*blocks[1:], None]):
        body = text[match.end():after.start() if after else len(text)]
        pieces += [opened(match), html.unescape(_REPORT_CLOSE.sub("", body))]  # bodies are escaped
    return "".join(pieces)
