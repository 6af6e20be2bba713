"""How the ``usage`` operation's answer reads as lines of text: the same in `roost usage` and the
app's usage screen (``U``). Pure: the answer in, lines out."""

from __future__ import annotations

from typing import Any

from roost.rules.row_text import cost_text
from roost.text import safe_text


def _compact(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def sums_text(sums: dict[str, Any]) -> str:
    """One set of sums in words: tokens (and their parts), cost, calls."""
    tokens = int(sums.get("input") or 0) + int(sums.get("output") or 0)
    parts = [f"{_compact(tokens)} tok (in {_compact(int(sums.get('input') or 0))}, "
             f"out {_compact(int(sums.get('output') or 0))}, cache read {_compact(int(sums.get('cache_read') or 0))}, "
             f"write {_compact(int(sums.get('cache_write') or 0))})"]
    cost = float(sums.get("cost") or 0.0)
    if cost:
        parts.append(cost_text(cost, bool(sums.get("estimate"))))
    parts.append(f"{int(sums.get('calls') or 0)} calls")
    return " · ".join(parts)


def report_lines(report: dict[str, Any]) -> list[str]:
    """What `roost usage` prints for the daemon's ``usage`` answer."""
    today = report["today"]
    lines = [f"today ({today['day']}): {sums_text(today)}",
             f"since {report['first_day']}: {sums_text(report['total'])}"]
    lines += [f"  {day['day']}  {sums_text(day)}" for day in report["days"]]
    if report["trees"]:
        lines.append("by job tree:" if report["under"] is None else f"under {report['under']}:")
        for tree in report["trees"]:
            title = safe_text(str(tree["title"])).replace("\n", " ")[:40]
            lines.append(f"  {tree['job']:<6} {str(tree['state'] or ''):<8} {title:<40}  {sums_text(tree)}")
        if report["trees_left_out"]:
            lines.append(f"  … {report['trees_left_out']} more trees")
    daily = report.get("budget_daily_usd")
    if daily is not None:
        lines.append(f"daily budget: ${daily:g}, {float(today.get('cost') or 0) / daily:.0%} spent today"
                     if daily else "daily budget: $0: nothing may be spent")
    if "~" in "".join(lines):
        lines.append("(~: an estimate from the config's [prices], the agent reported no cost)")
    return lines
