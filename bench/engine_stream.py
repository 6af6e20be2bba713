"""The engine's own pace, in process: a worker's burst of ``text`` events and a run of people's
messages through one job's mailbox (the real store in a temp dir, a fake worker, no sockets), so
what the engine adds per message — its savepoint, the journal's copy of the job's value, the
effects after the commit — is measured apart from the processes around it. Run it in two trees side
by side for a ratio (docs/performance.md):

    python bench/engine_stream.py --events 20000 --sends 2000
    PYTHONPATH=OTHER_TREE python OTHER_TREE/bench/engine_stream.py --events 20000 --sends 2000
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from roost.config import Config  # noqa: E402
from tests.engine_fakes import Rig  # noqa: E402


async def _drained(rig: Rig) -> None:
    """Until every mailbox is empty (the engine applies a batch per loop pass)."""
    eng = rig.sup.engine
    while eng._mailboxes or eng._ready:
        await asyncio.sleep(0)
    await rig.settle()


async def run(events: int, sends: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="roost-stream-") as tmp:
        rig = Rig(Path(tmp), Config(idle_timeout=10_000))
        job = await rig.spawn("work")
        worker = rig.worker(job)
        started = time.perf_counter()
        for i in range(events):
            worker.on_event({"type": "text", "text": f"line {i} of the output", "continues": True})
        await _drained(rig)
        text_s = time.perf_counter() - started
        worker.end_turn()
        await _drained(rig)
        started = time.perf_counter()
        for i in range(sends):
            await rig.sup.send(job, f"message {i}", None)
            worker.end_turn()
        await _drained(rig)
        send_s = time.perf_counter() - started
        rig.sup.engine.cancel_tasks()
        rig.store.close()
    return {"text events/s": events / text_s, "send + turn end/s": sends / send_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000, help="text events in the burst")
    parser.add_argument("--sends", type=int, default=2_000, help="messages, each answered by a turn's end")
    parser.add_argument("--rounds", type=int, default=3, help="runs; the best of them is printed")
    opts = parser.parse_args(argv)
    best: dict[str, float] = {}
    for _ in range(opts.rounds):
        for name, rate in asyncio.run(run(opts.events, opts.sends)).items():
            best[name] = max(best.get(name, 0.0), rate)
    for name, rate in best.items():
        print(f"{name:>20}: {rate:,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
