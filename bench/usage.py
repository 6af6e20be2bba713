"""Usage at 100k records (issue 21), in process, through the daemon's own code:

    python bench/usage.py

- keeping one model call (UsageTable.add, the dedup by primary key) against writing one timeline
  entry (what every event already costs), side by side;
- a subtree's sums for `show` over a root with 100k descendants: kept in the ledger (built once
  from the records), against walking the index and against one SQL aggregate for the same ids;
- the `usage` report (today, 7 days, by tree) with 100k calls in the week;
- a call counted against the budgets above it (the ledger's kept sums: a walk up the ancestors).
docs/performance.md records a run.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from roost.daemon.engine.spend import Kept, Ledger
from roost.daemon.storage.index import JobIndex
from roost.daemon.storage.store import Store
from roost.daemon.storage.usage import Call
from roost.daemon.storage.usage_report import report
from roost.models import Job, State
from roost.rules.budgets import Budget, Spent, crossed

N = 100_000


def timed(fn: Callable[[], object], runs: int = 7) -> float:
    """The median seconds of ``runs`` runs."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    store = Store(Path(tempfile.mkdtemp()) / "usage.db")
    now = time.time()
    jobs = [Job(id=f"j{i}", title=f"job {i}", driver="claude", cwd="/", state=State.IDLE, created_at=now + i,
                parent=None if i == 0 else f"j{(i - 1) // 10}", depth=len(str(i)) - 1,
                usage={"input": 120, "output": 8, "cache_read": 0, "cache_write": 0, "cost": 0.00064})
            for i in range(N)]
    index = JobIndex()
    index.load(jobs)
    table = store.usage
    with store.transaction():
        for i, job in enumerate(jobs):
            table.add(Call(job.id, f"c{i}", "m", {"input": 120, "output": 8}, 0.00064, False, f"j{i % 1000}"),
                      now - (i % 7) * 86400)

    with store.transaction():
        calls = iter(range(10**9))
        add = timed(lambda: [table.add(Call("j1", f"x{next(calls)}", "m", {"input": 1}, 0.1, False), now)
                             for _ in range(1000)]) / 1000
        entry = timed(lambda: [store.add_timeline("j1", "text", {"text": "x" * 40}) for _ in range(1000)]) / 1000
    print(f"keep one call: {add * 1e6:.1f} µs; one timeline entry beside it: {entry * 1e6:.1f} µs "
          f"(ratio {add / entry:.2f})")

    build = timed(lambda: Ledger.from_index(index), runs=3)
    book = Ledger.from_index(index)
    lookup = timed(lambda: book.tree("j0"), runs=5)
    walk = timed(lambda: [j.usage for j in index.descendants("j0", archived=True)], runs=3)
    ids = [j.id for j in jobs]

    def sql() -> None:
        store._db.execute("CREATE TEMP TABLE IF NOT EXISTS ids (id TEXT PRIMARY KEY)")
        store._db.execute("DELETE FROM ids")
        store._db.executemany("INSERT INTO ids VALUES (?)", ((i,) for i in ids))
        store._db.execute("SELECT SUM(input), SUM(output), SUM(cost) FROM usage_calls WHERE job IN "
                          "(SELECT id FROM ids)").fetchone()
    aggregate = timed(sql, runs=5)
    print(f"subtree sums of a root over {N:,} descendants: kept ({lookup * 1e6:.1f} µs a show, after building "
          f"them once at start in {build * 1e3:.0f} ms); a walk of the index {walk * 1e3:.0f} ms; one SQL aggregate "
          f"over the same ids {aggregate * 1e3:.0f} ms")

    whole = timed(lambda: report(table, index, now, 7), runs=5)
    print(f"usage report, 7 days, {N:,} calls over {N:,} jobs: {whole * 1e3:.0f} ms")

    book = Ledger({j: Kept(Budget(usd=1e9), "ok") for j in ("j0", "j1", "j12")})
    deep = jobs[-1].id

    def count_one() -> None:
        for owner in (deep, *index.ancestors(deep)):
            kept = book.budgets.get(owner)
            if kept is not None:
                kept.spent = Spent(kept.spent.usd + 0.001, kept.spent.tokens + 100)
                crossed(kept.level, kept.budget, kept.spent)
    per_call = timed(lambda: [count_one() for _ in range(1000)]) / 1000
    print(f"a call against the budgets above it (depth {jobs[-1].depth}): {per_call * 1e6:.1f} µs")


if __name__ == "__main__":
    main()
