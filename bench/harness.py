"""What every benchmark stands on: a throw-away ROOST_HOME, a daemon process in it, records
seeded through the store's own API, the process's RSS and CPU read from /proc, and the table.

Nothing here touches the user's directories: each ``Home`` is a fresh temporary directory with
its own config, store and socket.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from roost import paths as paths_mod  # noqa: E402
from roost.client import Client, ClientError  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# -- numbers ---------------------------------------------------------------------------------------
def median(xs: list[float]) -> float:
    return statistics.median(xs)


def pct(xs: list[float], p: float) -> float:
    """The p-th percentile (nearest rank) of xs."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(p / 100 * len(s)) - 1))]


def clock(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def timed(cmd: list[str], env: dict[str, str], stdout: Any = subprocess.DEVNULL) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=stdout, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


@dataclass
class Result:
    """One line of the table. ``subject`` and ``baseline`` are in ``unit``; ``target`` is what
    the issue asks, ``met`` whether this run meets it (None: informative only)."""

    bench: str
    what: str
    subject: float
    unit: str
    baseline: float | None = None
    baseline_what: str = ""
    target: str = ""
    met: bool | None = None

    @property
    def ratio(self) -> float | None:
        if self.baseline in (None, 0):
            return None
        return self.subject / self.baseline  # type: ignore[operator]


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value * 1000:.1f} ms" if value < 10 else f"{value:.1f} s"
    if unit == "%":
        return f"{value:.3f} %"
    if unit == "KB":
        return f"{value:,.2f} KB" if value < 100 else f"{value:,.0f} KB"
    if unit == "MB":
        return f"{value:.1f} MB"
    return f"{value:,.2f} {unit}".strip()


def table(results: list[Result]) -> str:
    head = ("bench", "measure", "subject", "baseline", "ratio", "target", "met")
    rows = [head]
    for r in results:
        ratio = f"{r.ratio:.2f}x" if r.ratio is not None else "-"
        met = "-" if r.met is None else ("yes" if r.met else "NO")
        base = fmt(r.baseline, r.unit) + (f" ({r.baseline_what})" if r.baseline_what else "")
        rows.append((r.bench, r.what, fmt(r.subject, r.unit), base, ratio, r.target, met))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def worker_turn(argv: list[str], env: dict[str, str], commands: bytes, cwd: Path | None = None) -> float:
    """Seconds for a worker program started by hand on pipes to take ``commands`` (protocol lines)
    and write its turn_end, every event read on the way."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=cwd)
    assert proc.stdin and proc.stdout
    proc.stdin.write(commands)
    proc.stdin.flush()
    for line in proc.stdout:
        if b'"turn_end"' in line:
            break
    elapsed = time.perf_counter() - start
    proc.stdin.close()
    proc.wait()
    return elapsed


# -- a home and a daemon in it --------------------------------------------------------------------------
class Home:
    """A fresh ROOST_HOME with a config file (TOML text), and the environment that points at it."""

    def __init__(self, config: str = "", tag: str = "home") -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"roost-bench-{tag}-"))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ROOST_")}
        self.env["ROOST_HOME"] = str(self.dir)
        self.paths = paths_mod.resolve(self.env)
        self.paths.ensure()
        self.paths.default_config.write_text(config)
        self.work = self.dir / "work"
        self.work.mkdir()

    def cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "roost.cli", *args]

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class Daemon:
    """A daemon process (``python -m roost.daemon``) on a Home."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> float:
        """Start it; seconds from the process start to its first answered hello."""
        log = open(self.home.paths.daemon_log, "ab")
        start = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "roost.daemon"], env=self.home.env,
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = start + timeout
        while True:
            try:
                Client.connect(self.home.paths.socket, client="bench-probe", timeout=timeout).close()
                return time.perf_counter() - start
            except ClientError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the daemon exited ({self.proc.returncode}); see {self.home.paths.daemon_log}")
                if time.perf_counter() > deadline:
                    raise RuntimeError("the daemon did not answer hello in time")
                time.sleep(0.002)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def client(self, timeout: float = 60.0) -> Client:
        return Client.connect(self.home.paths.socket, client="bench", timeout=timeout)

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def hwm_kb(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return 0

    def cpu_seconds(self) -> float:
        """utime + stime of the daemon process (its own threads, not its workers)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:  # every worker too: SIGTERM alone leaves them running under their shims for the next daemon
            with Client.connect(self.home.paths.socket, client="bench-stop", timeout=5) as client:
                client.call("shutdown", all=True)
        except ClientError:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> "Daemon":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- seeding records through the store's own API ------------------------------------------------------
_WORDS = ("build", "tests", "passed", "the", "parser", "now", "handles", "nested", "blocks", "and", "reports",
          "errors", "with", "line", "numbers", "refactor", "done", "see", "diff", "in", "src/")


def _text(i: int, size: int) -> str:
    words = []
    n = i
    while sum(len(w) + 1 for w in words) < size:
        words.append(_WORDS[n % len(_WORDS)])
        n = n * 7 + 3
    return " ".join(words)[:size]


def seed_records(home: Home, count: int, kids_per_root: int = 4, text_size: int = 300) -> list[str]:
    """``count`` finished jobs in the home's store (roots, each with ``kids_per_root`` children),
    written with roost.daemon.storage.store.Store and roost.models.Job before any daemon runs. Returns
    the ids, oldest first."""
    from roost.config import Config
    from roost.daemon.storage.store import Store
    from roost.models import Job, State

    opts = Config().driver("builtin").to_dict()
    states = (State.DONE, State.IDLE, State.STOPPED, State.FAILED, State.DONE)
    store = Store(home.paths.store)
    now = time.time() - count
    ids: list[str] = []
    root = None
    with store.transaction():
        for i in range(count):
            is_root = i % (kids_per_root + 1) == 0
            job_id = f"s{i:06d}"
            if is_root:
                root = job_id
            ts = now + i
            job = Job(id=job_id, title=f"seeded job {i}: " + _text(i, 40), driver="builtin", cwd=str(home.work),
                      state=states[i % len(states)], state_since=ts, created_at=ts, updated_at=ts,
                      parent=None if is_root else root, depth=0 if is_root else 1, driver_opts=opts,
                      session=str(home.paths.sessions_dir / f"{job_id}.jsonl"), reaped=True,
                      labels={"bench": "1"} if i % 10 == 0 else {}, usage={"turns": i % 7},
                      last_text=_text(i, text_size))
            store.save_job(job)
            ids.append(job_id)
    store.close()
    return ids


def seed_timeline(home: Home, job_id: str, count: int, text_size: int = 80) -> None:
    """``count`` text entries on one job's timeline, through Store.add_timeline."""
    from roost.daemon.storage.store import Store

    store = Store(home.paths.store)
    ts = time.time() - count
    with store.transaction():
        for i in range(count):
            store.add_timeline(job_id, "text", {"text": f"line {i}: " + _text(i, text_size)}, ts + i * 0.001)
    store.close()


def count_json_array(path: Path) -> int:
    with open(path) as fh:
        return len(json.load(fh))


def spawn_idle(d: Daemon, count: int, prompt: str = "say hi", timeout: float = 300.0) -> list[str]:
    """Spawn ``count`` built-in jobs and wait until every one is idle with its worker up."""
    with d.client() as c:
        ids = [c.call("spawn", prompt=prompt, cwd=str(d.home.work))["id"] for _ in range(count)]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            idle = c.call("list", states=["idle"], limit=1)["total"]
            if idle >= count and c.call("status")["workers"] >= count:
                return ids
            time.sleep(0.5)
    raise RuntimeError(f"{count} workers were not idle within {timeout:.0f}s")
