"""What the agents say when a provider bounces a model call, as ``limited`` and ``retrying`` events.

Pure functions of one frame of the agent's stream and the wall clock (``now``, Unix seconds), so
every case is tested without an agent. What each agent says was measured against the fake model
servers' 429s (tests/fakellm.py ``LIMITED``, ``USAGE_LIMIT``) and a closed port (docs/agents.md):

- Claude Code: a ``system/api_retry`` frame per retry (``error_status`` 429 and ``error``
  ``rate_limit`` for a limit; ``retry_delay_ms`` honours the server's ``retry-after``); a plan's usage
  limit is not retried: the ``result`` has ``api_error_status`` 429. Its schema also has a
  ``rate_limit_event`` (``rate_limit_info.status`` ``rejected``, ``resetsAt``) for subscriptions.
- Codex: an ``error`` notification with ``willRetry``; a 429's ``codexErrorInfo`` is
  ``{"responseStreamDisconnected": {"httpStatusCode": 429}}``, a usage limit's ``usageLimitExceeded``
  (not retried; its message ends "try again at 1:49 AM.", Codex's local time).
- pi: ``auto_retry_start`` / ``auto_retry_end`` whose ``errorMessage`` begins with the HTTP status
  ("429 Rate limit reached … Please try again in 30s.").
"""

from __future__ import annotations

import re
import time
from typing import Any

from roost.text import plain_words
from roost.worker_protocol import limited, retrying

#: How much of an agent's words a limit or retry event carries.
WORDS_MAX = 300
#: "quota" only as providers put it ("exceeded your current quota", "insufficient_quota", "Quota
#: exceeded for …"): the word alone is in paths and names ("quotas/") that say nothing of a limit.
_RATE_WORDS = re.compile(r"\b429\b|rate.?limit|usage limit|too many requests|insufficient_quota"
                         r"|exceeded your (?:current )?quota|\bquota (?:exceeded|reached|exhausted)", re.I)
_IN = re.compile(r"(?:try again|retry|resets?) in ((?:\d+(?:\.\d+)?\s*(?:ms|h|m|s)\s*)+)", re.I)
_AT = re.compile(r"(?:try again|resets?) at (\d{1,2}):(\d{2})\s*([AP]M)?", re.I)
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|h|m|s)", re.I)
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_ATTEMPT = re.compile(r"(\d+)/(\d+)")


def words(text: Any) -> str:
    return plain_words(str(text or ""), WORDS_MAX)


def is_limit(text: str) -> bool:
    """Whether an agent's words for a failed call say a rate or usage limit bounced it."""
    return bool(_RATE_WORDS.search(text))


def reset_from_words(text: str, now: float) -> float | None:
    """When a limit resets, from the words that say so: "try again in 1m30s" (from ``now``) or "try
    again at 1:49 AM" (the next such time of this machine's day: Codex says its local time); None."""
    if found := _IN.search(text):
        return now + sum(float(n) * _UNIT[unit.lower()] for n, unit in _PART.findall(found.group(1)))
    if found := _AT.search(text):
        hour, minute, half = int(found.group(1)), int(found.group(2)), (found.group(3) or "").upper()
        if half:
            hour = hour % 12 + (12 if half == "PM" else 0)
        if hour > 23 or minute > 59:
            return None
        local = time.localtime(now)
        at = time.mktime((local.tm_year, local.tm_mon, local.tm_mday, hour, minute, 0, 0, 0, -1))
        return at if at > now else at + 86400
    return None


def claude_retry(frame: dict[str, Any], now: float) -> dict[str, Any]:
    """A ``system/api_retry`` frame: Claude Code waits ``retry_delay_ms`` and calls again."""
    delay = int(frame.get("retry_delay_ms") or 0) / 1000
    attempt, of = _int(frame.get("attempt")), _int(frame.get("max_retries"))
    status = f"{frame.get('error_status')} " if frame.get("error_status") else ""
    said = words(f"{status}{frame.get('error') or 'error'}")
    if frame.get("error_status") == 429 or frame.get("error") == "rate_limit":
        return limited(f"Claude Code: rate limited ({said}); retry {attempt} of {of}", retrying=True,
                       until=now + delay, attempt=attempt)
    return retrying(f"Claude Code: the model call failed ({said})", attempt=attempt, of=of, delay=delay)


def claude_result(frame: dict[str, Any], now: float) -> dict[str, Any] | None:
    """A failed ``result`` that a limit caused (its ``api_error_status`` 429: Claude Code does not
    retry a plan's usage limit, and gives up on a rate limit after its retries), or None."""
    if frame.get("api_error_status") != 429 and frame.get("error") != "rate_limit":
        return None
    said = words(frame.get("result") or "rate limited")
    return limited(f"Claude Code: {said}", retrying=False, until=reset_from_words(said, now))


def claude_rate_limit_event(frame: dict[str, Any]) -> dict[str, Any] | None:
    """A ``rate_limit_event`` whose limit was reached (``status`` ``rejected``), or None."""
    info = frame.get("rate_limit_info") or {}
    if not isinstance(info, dict) or info.get("status") != "rejected":
        return None
    reset = info.get("resetsAt")
    kind = words(info.get("rateLimitType") or "usage")
    return limited(f"Claude Code: the {kind} limit was reached", retrying=False,
                   until=float(reset) if isinstance(reset, (int, float)) and not isinstance(reset, bool) else None)


def codex_error(params: dict[str, Any], now: float) -> dict[str, Any] | None:
    """An ``error`` notification: a limit, a retry (``willRetry``), or None for a final error that is
    no limit (the turn's end says it)."""
    error = params.get("error") or {}
    info = error.get("codexErrorInfo")
    said = words(" ".join(str(x) for x in (error.get("message"), error.get("additionalDetails")) if x))
    detail = next(iter(info.values()), None) if isinstance(info, dict) else None
    status = detail.get("httpStatusCode") if isinstance(detail, dict) else None
    found = _ATTEMPT.search(str(error.get("message") or ""))
    attempt, of = (int(found.group(1)), int(found.group(2))) if found else (None, None)
    if info == "usageLimitExceeded" or status == 429:
        return limited(f"Codex: {said}", retrying=bool(params.get("willRetry")),
                       until=reset_from_words(said, now), attempt=attempt)
    if params.get("willRetry"):
        return retrying(f"Codex: {said}", attempt=attempt, of=of)
    return None


def pi_retry(event: dict[str, Any], now: float) -> dict[str, Any]:
    """An ``auto_retry_start``: pi waits ``delayMs`` and runs the turn's call again."""
    said = words(event.get("errorMessage") or "the model request failed")
    delay = int(event.get("delayMs") or 0) / 1000
    attempt, of = _int(event.get("attempt")), _int(event.get("maxAttempts"))
    if is_limit(said):
        return limited(f"pi: {said}", retrying=True, until=reset_from_words(said, now) or now + delay, attempt=attempt)
    return retrying(f"pi: {said}", attempt=attempt, of=of, delay=delay)


def pi_gave_up(error: str, now: float) -> dict[str, Any] | None:
    """The limit behind a turn pi ends failed (after its retries, or with none), or None."""
    said = words(error)
    return limited(f"pi: {said}", retrying=False, until=reset_from_words(said, now)) if is_limit(said) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def after_retries(count: int) -> str:
    """How a failed turn's reason says the agent retried its model call first (shared with Codex)."""
    return f" after {count} retr{'y' if count == 1 else 'ies'}" if count else ""
