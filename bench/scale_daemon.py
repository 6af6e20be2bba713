"""``python bench/scale_daemon.py COUNTS_FILE``: the real daemon, with its SQLite commits counted.

bench/scale_sim.py reports the commit rate; SQLite does not say how many transactions a process
committed, so this wraps ``Store.transaction`` (an outermost one is one ``BEGIN IMMEDIATE`` …
``COMMIT``) and writes the count to COUNTS_FILE every 0.2 s from a thread. Nothing else changes.
With ``--trace``, tracemalloc runs too, and each time COUNTS_FILE.ask appears the thread writes the
bytes traced per source file to COUNTS_FILE.trace (what the daemon holds, by module).
"""

from __future__ import annotations

import json
import sys
import threading
import tracemalloc
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from roost.daemon.__main__ import main
from roost.daemon.storage.store import Store

COMMITS = [0]
_plain = Store.transaction


@contextmanager
def _counted(self: Store) -> Iterator[None]:
    outer = self._depth == 0
    with _plain(self):
        yield
    if outer:
        COMMITS[0] += 1


def _writer(path: Path) -> None:
    ask, trace = path.with_suffix(".ask"), path.with_suffix(".trace")
    while True:
        path.with_suffix(".new").write_text(str(COMMITS[0]))
        path.with_suffix(".new").replace(path)  # whole, never half written
        if ask.exists() and tracemalloc.is_tracing():
            stats = tracemalloc.take_snapshot().statistics("filename")
            trace.write_text(json.dumps({s.traceback[0].filename: s.size for s in stats}))
            ask.unlink()
        time.sleep(0.2)


if __name__ == "__main__":
    if "--trace" in sys.argv:
        tracemalloc.start()
    Store.transaction = _counted  # type: ignore[method-assign]
    threading.Thread(target=_writer, args=(Path(sys.argv[1]),), daemon=True).start()
    sys.exit(main([]))
