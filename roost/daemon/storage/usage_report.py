"""The ``usage`` operation's answer: today, the last days and the spend of each job tree, from the
usage table's SQL sums (one aggregate per question, over its day index) and the index's tree.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from roost.daemon.storage.index import JobIndex
from roost.daemon.storage.usage import UsageTable, day_of
from roost.worker_protocol import TOKEN_KINDS

#: The most job trees a report lists (the biggest spenders first); the rest are counted.
TREES_MAX = 50
_DAY = 86400.0


def _zero() -> dict[str, Any]:
    return {**dict.fromkeys(TOKEN_KINDS, 0), "cost": 0.0, "estimate": False, "calls": 0}


def _add(into: dict[str, Any], sums: Mapping[str, Any]) -> None:
    for key in (*TOKEN_KINDS, "cost", "calls"):
        into[key] += sums.get(key) or 0
    into["estimate"] = bool(into["estimate"] or sums.get("estimate"))


def report(table: UsageTable, index: JobIndex, now: float, days: int = 7, under: str | None = None,
           daily_budget: float | None = None) -> dict[str, Any]:
    """Spend per day for ``days`` days back (today included), their total, and per job tree: per root
    job, or with ``under``, per child of that job (the job's own calls under its own id)."""
    first = day_of(now - (days - 1) * _DAY)
    today = day_of(now)
    per_day: dict[str, dict[str, Any]] = {}
    trees: dict[str, dict[str, Any]] = {}
    if under is None:  # by the root each call was spent under: as many rows as trees a day
        for (day, root), sums in table.by_day_and("root", first, today).items():
            _add(per_day.setdefault(day, _zero()), sums)
            _add(trees.setdefault(root, _zero()), sums)
    else:  # the calls of under's tree, per job, grouped by the child of under each is below
        index.require(under)
        scope = {under, *(j.id for j in index.descendants(under, archived=True))}
        root = ([under, *index.ancestors(under)])[-1]
        for (day, job_id), sums in table.by_day_and("job", first, today, root).items():
            if job_id in scope:
                _add(per_day.setdefault(day, _zero()), sums)
                _add(trees.setdefault(_tree_of(index, job_id, under), _zero()), sums)
    total = _zero()
    for sums in per_day.values():
        _add(total, sums)
    ranked = sorted(trees.items(), key=lambda kv: (-kv[1]["cost"], -(kv[1]["input"] + kv[1]["output"]), kv[0]))
    rows = []
    for job_id, sums in ranked[:TREES_MAX]:
        job = index.get(job_id)
        rows.append({"job": job_id, "title": job.title if job else "(gone)",
                     "state": job.state.value if job else None, **sums})
    return {"today": {"day": today, **per_day.get(today, _zero())}, "days": [
        {"day": d, **per_day[d]} for d in sorted(per_day)], "total": total, "first_day": first,
        "trees": rows, "trees_left_out": max(0, len(ranked) - TREES_MAX), "under": under,
        "budget_daily_usd": daily_budget, "at": time.strftime("%Y-%m-%d %H:%M", time.localtime(now))}


def _tree_of(index: JobIndex, job_id: str, under: str) -> str:
    """The child of ``under`` a job is below (``under`` itself for its own calls)."""
    chain = [job_id, *index.ancestors(job_id)]
    if job_id == under:
        return under
    at = chain.index(under) if under in chain else len(chain)
    return chain[at - 1] if at > 0 else job_id
