"""Profiles behind docs/performance.md's notes, on seeded records in a temporary ROOST_HOME.

    python bench/profiles.py start [N]     # cProfile of Daemon.setup (store load, index, recovery)
    python bench/profiles.py memory [N]    # bytes a job in the index, briefs beside whole records (tracemalloc)
    python bench/profiles.py page [N]      # JobIndex.page / agent_view times at N records

For a running daemon use py-spy (``pip install py-spy``): ``py-spy record -p PID -f raw -o out.txt``
while `bench/run.py scale` (ls --json) or `bench/run.py stalled` (a burst of output) runs.
"""

from __future__ import annotations

import cProfile
import gc
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
    from roost.daemon.server.listener import Daemon

    daemon = Daemon(home.paths, home.paths.default_config)
    prof = cProfile.Profile()
    prof.enable()
    daemon.setup()
    prof.disable()
    stats = pstats.Stats(prof)
    stats.sort_stats("cumulative").print_stats(20)
    stats.sort_stats("tottime").print_stats(12)


def memory(home: Home) -> None:
    """Bytes a job costs in the index after a start (its brief, the tree and counts), beside what
    it cost with every record loaded whole (before briefs)."""
    from roost.daemon.storage.index import JobIndex
    from roost.daemon.storage.store import Store

    store = Store(home.paths.store)
    store.briefs()  # fill them first (a store seeded before its first start has none)
    for name, load in (("briefs (a start)", lambda: [*store.briefs()[0]]), ("whole records", store.jobs)):
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        index = JobIndex()
        index.reads_from(store.records, store.record_data)
        index.load(load())
        n = len(index.jobs)
        print(f"{name:18s} {(tracemalloc.get_traced_memory()[0] - before) / n:6.0f} B a job ({n:,} jobs)")
        tracemalloc.stop()
        del index


def page(home: Home) -> None:
    from roost.daemon.storage.index import JobIndex
    from roost.daemon.storage.store import Store

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
        seed_records(home, n, kids_per_root=10)  # trees as people make them (issue 19)
        os.environ["ROOST_HOME"] = str(home.dir)
        fn(home)
    finally:
        home.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
