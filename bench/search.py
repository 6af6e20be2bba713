"""The search index at 100k timeline entries (issue 20), through the store's own API:

    python bench/search.py

- the cost the index adds to each entry the daemon writes (one run with it, one without);
- opening a store made before search (the index is made, its entries wait) and indexing them in
  the background steps the daemon takes (median and longest step: how long the loop is held);
- a two-word search, and a job's search of a word in most entries (the caller's reach filters).
docs/performance.md records a run.
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

from roost.daemon.storage import search
from roost.daemon.storage.store import Store

N = 100_000
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau".split()


def fill(store: Store, seed: int) -> float:
    """N entries of 30 words each over 500 jobs, in one transaction; the seconds it took."""
    rng = random.Random(seed)
    start = time.perf_counter()
    with store.transaction():
        for i in range(N):
            text = " ".join(rng.choice(WORDS) for _ in range(30)) + f" token{rng.randrange(1000)}"
            store.add_timeline(f"j{i % 500}", "text", {"text": text})
    return time.perf_counter() - start


def main() -> None:
    where = Path(tempfile.mkdtemp())
    indexed = Store(where / "indexed.db")
    live = fill(indexed, 1)
    old = Store(where / "old.db")
    old._db.execute("DROP TABLE timeline_fts")  # a store from before search
    old._db.execute("DELETE FROM meta WHERE key='search_backfill'")
    hook, search.index_entry = search.index_entry, lambda *args: None
    bare = fill(old, 1)
    search.index_entry = hook
    old.close()
    start = time.perf_counter()
    reopened = Store(where / "old.db")
    opened = time.perf_counter() - start
    steps: list[float] = []
    while True:
        start = time.perf_counter()
        count = reopened.index_old_entries()
        steps.append(time.perf_counter() - start)
        if not count:
            break
    start = time.perf_counter()
    for word in WORDS[:10]:
        reopened.search(f"{word} token5*", lambda job: True, 50, None)
    two_words = (time.perf_counter() - start) / 10
    start = time.perf_counter()
    page = reopened.search("alpha", lambda job: job == "j7", 50, None)
    one_job = time.perf_counter() - start
    steps.sort()
    print(f"write {N} entries: {live:.2f} s with the index, {bare:.2f} s without "
          f"({(live - bare) / N * 1e6:.1f} us an entry)")
    print(f"open an old store: {opened * 1000:.0f} ms; index its entries: {sum(steps):.2f} s in {len(steps) - 1} "
          f"steps of {search.BACKFILL_BATCH}, median {steps[len(steps) // 2] * 1000:.0f} ms, "
          f"longest {steps[-1] * 1000:.0f} ms")
    print(f"search two words (one a prefix): {two_words * 1000:.1f} ms; one job's of a word in most entries: "
          f"{one_job * 1000:.1f} ms ({len(page['results'])} results, scanned_out={page['scanned_out']})")


if __name__ == "__main__":
    main()
