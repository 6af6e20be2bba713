"""The command driver's output throughput (issue 11): a command that prints ``--output-mb`` MB as fast
as it can, through the command worker and the daemon into the job's timeline and a `roost logs -f`,
beside the same command with its stdout to a file (what printing alone costs), beside the command
worker by hand, its events read and dropped (the worker's own share), and beside the same bytes
written to SQLite by hand (the store's pace: issue 19 asks for within 3x). Each run of the three is
interleaved with the others, ``--output-runs`` times. Then a trickle: how long a line takes from
the command to `roost logs -f`, beside the same lines through a plain pipe.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from harness import Daemon, Home, Result, median, pct, worker_turn

from roost.programs.turn_output import BURST
from roost.protocol import ENTRY_MAX

#: The command: SIZE bytes of numbered 80-byte lines in 64 KiB writes, then an end marker.
PRINTER = """
import os, sys
size = int(sys.argv[1])
line = b"line %07d " + b"x" * 66 + b"\\n"
block = b"".join(line % i for i in range(819))
for _ in range(size // len(block) + 1):
    os.write(1, block)
os.write(1, b"end of output\\n")
"""

#: A trickle: a line every 0.1 s stamped with the time it was written, then the end marker.
TICKER = """
import sys, time
for _ in range(int(sys.argv[1])):
    print(f"tick {time.time():.6f}", flush=True)
    time.sleep(0.1)
print("end of output", flush=True)
"""
TICKS = 30


def bench_output(opts: argparse.Namespace) -> list[Result]:
    """A command printing N MB at once: spawn -> idle and -> the end shown by `roost logs -f`,
    beside the command to a file and the command worker by hand."""
    size = opts.output_mb * 1_000_000
    command = [sys.executable, "-c", PRINTER, "{prompt}"]
    ticker = [sys.executable, "-c", TICKER, "{prompt}"]
    home = Home(f'max_running_jobs = 0\n[drivers.out]\nkind = "command"\ncommand = {json.dumps(command)}\n'
                f'[drivers.tick]\nkind = "command"\ncommand = {json.dumps(ticker)}\n', tag="output")
    out: list[Result] = []
    try:
        with Daemon(home) as d:
            d.start()
            rss = d.rss_kb()
            idle, shown, to_file, by_hand, entries, kept, to_sqlite = [], [], [], [], [], [], []
            daemon_cpu, sqlite_cpu = [], []
            for _ in range(opts.output_runs):
                cpu = d.cpu_seconds()
                seconds, followed, count, size_kept = _through_daemon(d, size)
                daemon_cpu.append(d.cpu_seconds() - cpu)
                idle.append(seconds)
                shown.append(followed)
                entries.append(count)
                kept.append(size_kept)
                to_file.append(_to_file(home, size))
                by_hand.append(_worker_by_hand(home, size))
                wall, cpu = _sqlite_by_hand(home, size)
                to_sqlite.append(wall)
                sqlite_cpu.append(cpu)
            growth = (d.hwm_kb() - rss) / 1024
            shown_after = _trickle(d)
        piped = _trickle_piped()
        mb = size / 1e6
        out.append(Result("output", f"{opts.output_mb} MB from the command into the timeline (spawn -> idle)",
                          median(idle), "s", median(to_file), "the command, stdout to a file"))
        ratio = median(idle) / median(to_sqlite)
        out.append(Result("output", f"the same {opts.output_mb} MB into the timeline (spawn -> idle)", median(idle), "s",
                          median(to_sqlite), "the bytes written to SQLite by hand", "<= 3x", ratio <= 3))
        out.append(Result("output", "the daemon's CPU for it (its own share, less sensitive to load)", median(daemon_cpu),
                          "s", median(sqlite_cpu), "CPU of the SQLite writes by hand"))
        whole = all(got == printed(size) for got in kept)
        out.append(Result("output", "the same, throughput", mb / median(idle), "MB/s", mb / median(by_hand),
                          "the command worker by hand", "all of it kept", whole))
        out.append(Result("output", "spawn -> `roost logs -f` printed the last line", median(shown), "s",
                          median(idle), "spawn -> idle"))
        out.append(Result("output", f"timeline entries for {opts.output_mb} MB", median(entries), "",
                          size / 65536, "size / ENTRY_MAX"))
        out.append(Result("output", "daemon peak RSS growth over the runs", growth, "MB", target="< 50 MB",
                          met=growth < 50))
        out.append(Result("output", f"a line every 0.1 s: written -> shown by `roost logs -f`, p99 of {TICKS}",
                          pct(shown_after, 99), "s", pct(piped, 99), "the same lines through a pipe",
                          "<= BURST + 50 ms", pct(shown_after, 99) <= BURST + 0.05))
    finally:
        home.remove()
    return out


def printed(size: int) -> int:
    """How many bytes PRINTER prints for ``size``: whole blocks of 819 lines, then the marker."""
    return (size // 65520 + 1) * 65520 + len(b"end of output\n")


def _through_daemon(d: Daemon, size: int) -> tuple[float, float, int, int]:
    """Seconds from spawn to the idle row, and to `roost logs --all -f` printing the end marker; how
    many text entries the timeline got, and how many bytes they hold."""
    with d.client() as client:
        start = time.perf_counter()
        job = client.call("spawn", prompt=str(size), cwd=str(d.home.work), driver="out")["id"]
        follower = subprocess.Popen(d.home.cli("logs", "--all", "-f", job), env=d.home.env, stdout=subprocess.PIPE)
        followed: list[float] = []
        reader = threading.Thread(target=_until_the_end, args=(follower, start, followed))
        reader.start()
        idle = 0.0
        while not idle:
            if client.call("show", job=job)["state"] == "idle":
                idle = time.perf_counter() - start
            else:
                time.sleep(0.01)
        reader.join()
        follower.kill()
        follower.wait()
        texts = [e["data"]["text"] for page in client.pages("logs", job=job, limit=2000)
                 for e in page["entries"] if e["kind"] == "text"]
    return idle, followed[0], len(texts), sum(len(t.encode()) for t in texts)


def _until_the_end(follower: subprocess.Popen[bytes], start: float, followed: list[float]) -> None:
    """Read what `roost logs -f` prints as it prints it, until the end marker; when that came."""
    assert follower.stdout is not None
    for line in follower.stdout:
        if b"end of output" in line:
            break
    followed.append(time.perf_counter() - start)


def _to_file(home: Home, size: int) -> float:
    with open(home.dir / "printed", "wb") as sink:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", PRINTER, str(size)], stdout=sink, check=True)
        return time.perf_counter() - start


def _sqlite_by_hand(home: Home, size: int) -> tuple[float, float]:
    """What the store's share could be at least: the command's bytes, in ENTRY_MAX-character pieces
    each JSON-encoded as a text entry's data, inserted into a table of the timeline's shape in a
    file with the store's pragmas, in one transaction. Seconds, and CPU seconds."""
    piece = ENTRY_MAX
    lines = b"".join(b"line %07d " % i + b"x" * 66 + b"\n" for i in range(819)).decode()
    text = lines * (printed(size) // len(lines) + 1)
    path = home.dir / f"by-hand-{time.monotonic_ns()}.db"
    start, cpu = time.perf_counter(), time.process_time()
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE timeline (seq INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, ts REAL NOT NULL, "
               "kind TEXT NOT NULL, data TEXT NOT NULL)")
    db.execute("CREATE INDEX timeline_job ON timeline(job, seq)")
    db.execute("BEGIN IMMEDIATE")
    for at in range(0, printed(size), piece):
        db.execute("INSERT INTO timeline (job, ts, kind, data) VALUES (?, ?, ?, ?)",
                   ("job", time.time(), "text", json.dumps({"text": text[at:at + piece]})))
    db.execute("COMMIT")
    db.close()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return elapsed, cpu


def _worker_by_hand(home: Home, size: int) -> float:
    """The command worker on pipes: one prompt, its events read line by line until turn_end."""
    spec = {"command": [sys.executable, "-c", PRINTER, "{prompt}"]}
    session = home.dir / f"by-hand-{time.monotonic_ns()}.jsonl"
    elapsed = worker_turn([sys.executable, "-m", "roost.programs.command_worker", "--session", str(session),
                           "--spec", json.dumps(spec)], home.env,
                          b'{"type":"prompt","id":"p","message":"%d","run":1}\n' % size, home.work)
    Path(session).unlink(missing_ok=True)
    return elapsed


def _trickle(d: Daemon) -> list[float]:
    """Seconds from each tick written to `roost logs -f` printing it."""
    with d.client() as client:
        job = client.call("spawn", prompt=str(TICKS), cwd=str(d.home.work), driver="tick")["id"]
    follower = subprocess.Popen(d.home.cli("logs", "--all", "-f", job), env=d.home.env, stdout=subprocess.PIPE)
    try:
        return _tick_delays(follower)
    finally:
        follower.kill()
        follower.wait()


def _trickle_piped() -> list[float]:
    proc = subprocess.Popen([sys.executable, "-c", TICKER, str(TICKS)], stdout=subprocess.PIPE)
    delays = _tick_delays(proc)
    proc.wait()
    return delays


def _tick_delays(proc: subprocess.Popen[bytes]) -> list[float]:
    assert proc.stdout is not None
    delays = []
    for line in proc.stdout:
        if b"end of output" in line:
            break
        stamp = re.search(rb"tick (\d+\.\d+)", line)
        if stamp:
            delays.append(time.time() - float(stamp.group(1)))
    return delays
