"""Profiles behind docs/performance.md's notes, on seeded records in a temporary ROOST_HOME.

    python bench/profiles.py start [N]     # cProfile of Daemon.setup (store load, index, recovery)
    python bench/profiles.py memory [N]    # bytes per record and per index entry (tracemalloc)
    python bench/profiles.py page [N]      # JobIndex.page / agent_view times at N records

For a running daemon use py-spy (``pip install py-spy``): ``py-spy record -p PID -f raw -o out.txt``
while `bench/run.py scale` (ls --json) or `bench/run.py stalled` (a burst of output) runs.
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import pstats
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Home, seed_records  # noqa: E402


def _median_ms(fn, runs: int = 5) -> float:
    xs = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - start)
    return sorted(xs)[runs // 2] * 1000


def start(home: Home) -> None:
    from roost.daemon.server import Daemon

    daemon = Daemon(home.paths, home.paths.default_config)
    prof = cProfile.Profile()
    prof.enable()
    daemon.setup()
    prof.disable()
    stats = pstats.Stats(prof)
    stats.sort_stats("cumulative").print_stats(20)
    stats.sort_stats("tottime").print_stats(12)


def memory(home: Home) -> None:
    from roost.daemon.index import JobIndex
    from roost.daemon.store import Store
    from roost.models import Job

    store = Store(home.paths.store)
    raw = [r["record"] for r in store._db.execute("SELECT record FROM jobs")]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    jobs = [Job.from_dict(json.loads(r)) for r in raw]
    loaded = tracemalloc.get_traced_memory()[0]
    index = JobIndex()
    index.load(jobs)
    indexed = tracemalloc.get_traced_memory()[0]
    n = len(jobs)
    print(f"records: {(loaded - before) / n:.0f} B each; index: {(indexed - loaded) / n:.0f} B each "
          f"({len(index.jobs):,} jobs)")


def page(home: Home) -> None:
    from roost.daemon.index import JobIndex
    from roost.daemon.store import Store

    index = JobIndex()
    index.load(Store(home.paths.store).jobs())
    print(f"page(limit=100)                            {_median_ms(lambda: index.page(limit=100)):7.1f} ms")
    print(f"page(limit=100, roots, newest_first)       "
          f"{_median_ms(lambda: index.page(limit=100, roots=True, newest_first=True)):7.1f} ms")
    print(f"page(limit=100, states=[working])          "
          f"{_median_ms(lambda: index.page(limit=100, states=['working'])):7.1f} ms")
    print(f"agent_view(200)                            {_median_ms(lambda: index.agent_view(200)):7.1f} ms")


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "start"
    n = int(argv[1]) if len(argv) > 1 else 100_000
    fn = {"start": start, "memory": memory, "page": page}[what]
    home = Home(tag="profile")
    try:
        seed_records(home, n)
        os.environ["ROOST_HOME"] = str(home.dir)
        fn(home)
    finally:
        home.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
