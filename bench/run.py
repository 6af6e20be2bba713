"""roost's benchmarks: each one a ratio against a baseline run side by side, interleaved.

    python bench/run.py            # all
    python bench/run.py cli turn   # some

Ratios, not seconds, are what docs/performance.md records: the machine's speed cancels out.
Everything runs under a temporary ROOST_HOME; nothing touches the user's directories.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def interleaved(subject: Callable[[], float], baseline: Callable[[], float], runs: int) -> tuple[float, float]:
    """Median seconds of subject and baseline, run alternately so drift hits both alike."""
    s, b = [], []
    for _ in range(runs):
        s.append(subject())
        b.append(baseline())
    return statistics.median(s), statistics.median(b)


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def bench_cli(env: dict[str, str]) -> tuple[str, float, float]:
    """`roost ls` against a running daemon vs. bare interpreter start-up (`python -c pass`):
    how much the CLI adds on top of Python itself. Guards the lazy import of the app."""
    subprocess.run([sys.executable, "-m", "roost.cli", "daemon", "start"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "roost.cli", "spawn", "say hi"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    s, b = interleaved(lambda: timed([sys.executable, "-m", "roost.cli", "ls"], env),
                       lambda: timed([sys.executable, "-c", "pass"], env), runs=15)
    return "roost ls / python -c pass", s, b


def bench_turn(env: dict[str, str]) -> tuple[str, float, float]:
    """A whole job through the daemon (spawn → worker up → one `say` turn → idle, seen on a watch
    connection) vs. the same built-in worker started by hand and asked get_state + one prompt:
    the daemon's own overhead on a turn."""
    from roost import paths as paths_mod
    from roost.client import AsyncClient

    sock = paths_mod.resolve(env).socket
    cwd = env["ROOST_HOME"]

    async def through_daemon() -> float:
        client = await AsyncClient.connect(sock, client="bench")
        await client.call("watch")
        start = time.perf_counter()
        row = await client.call("spawn", prompt="say hi", cwd=cwd)
        async for event in client.events():
            if event.get("event") == "row" and event["row"]["id"] == row["id"] and event["row"]["state"] == "idle":
                break
        elapsed = time.perf_counter() - start
        await client.call("archive", job=row["id"])
        await client.close()
        return elapsed

    def by_hand() -> float:
        session = Path(cwd) / f"bench-{time.monotonic_ns()}.jsonl"
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "roost.programs.builtin_agent", "--session", str(session)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        assert proc.stdin and proc.stdout
        proc.stdin.write('{"type":"get_state","id":"s"}\n{"type":"prompt","id":"p","message":"say hi","run":1}\n')
        proc.stdin.flush()
        for line in proc.stdout:
            if '"turn_end"' in line:
                break
        elapsed = time.perf_counter() - start
        proc.stdin.close()
        proc.wait()
        return elapsed

    s, b = interleaved(lambda: asyncio.run(through_daemon()), by_hand, runs=15)
    return "turn via daemon / worker by hand", s, b


def bench_rows(env: dict[str, str]) -> tuple[str, float, float]:
    """Building every row for `list`/`watch` over a 1000-job forest (descendant counts and
    parent_open included) vs. serialising the same records alone: the cost of what clients see."""
    import json

    from roost.config import Config
    from roost.daemon.store import Store
    from roost.daemon.supervisor import Supervisor
    from roost.models import Job, State
    from roost.paths import resolve

    paths = resolve(env)
    paths.ensure()
    store = Store(Path(env["ROOST_HOME"]) / "bench-rows.db")
    sup = Supervisor(store, paths, Config)
    now = time.time()
    for i in range(1000):
        parent = f"j{i // 10}" if i >= 10 else None  # 10 roots, each level ten times wider
        job = Job(id=f"j{i}", title=f"job {i}", driver="builtin", cwd="/", parent=parent, depth=_depth(i),
                  state=State.WORKING if i % 3 else State.DONE, created_at=now, state_since=now)
        sup._index(job)
    records = [j.to_dict() for j in sup.jobs.values()]
    s, b = interleaved(lambda: _clock(lambda: json.dumps(sup.rows())),
                       lambda: _clock(lambda: json.dumps(records)), runs=15)
    store.close()
    return "rows for 1000 jobs / plain records", s, b


def _depth(i: int) -> int:
    """Depth of job i in the bench forest (j0..j9 are roots; jN's parent is j(N // 10))."""
    depth = 0
    while i >= 10:
        i //= 10
        depth += 1
    return depth


def _clock(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


BENCHES = {"cli": bench_cli, "turn": bench_turn, "rows": bench_rows}


def main(names: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="roost-bench-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")}
        env["ROOST_HOME"] = home
        os.environ["ROOST_HOME"] = home
        try:
            for name in names or list(BENCHES):
                label, s, b = BENCHES[name](env)
                print(f"{name:5} {label:38} {s * 1000:8.1f} ms / {b * 1000:8.1f} ms = {s / b:6.2f}x")
        finally:
            subprocess.run([sys.executable, "-m", "roost.cli", "daemon", "stop"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main(sys.argv[1:])
