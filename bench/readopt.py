"""Re-adoption after a restart of the daemon, and what a shim costs (docs/performance.md,
"Workers that outlive the daemon"): 50 built-in workers held mid-turn at a gate, the daemon
SIGKILLed, a new one started; the time from its start until every worker is re-adopted (each job's
timeline has its ``worker`` entry with ``adopted``), and each shim's PSS and RSS.

    python bench/readopt.py [WORKERS]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from roost import paths as paths_mod
from roost.client import Client, daemon_running


def wait(predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.01)


def start(env: dict[str, str], paths: paths_mod.Paths) -> subprocess.Popen[bytes]:
    log = open(paths.daemon_log, "ab")
    return subprocess.Popen([sys.executable, "-m", "roost.daemon"], env=env, stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def memory(pid: int) -> tuple[int, int]:
    """PSS and RSS in KiB."""
    pss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
               if line.startswith("Pss:"))
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("VmRSS:"))
    return pss, rss


def main(count: int) -> None:
    home = Path(tempfile.mkdtemp(prefix="roost-readopt-"))
    env = {**os.environ, "ROOST_HOME": str(home), "ROOST_GATES": str(home / "gates"),
           "ROOST_CONFIG": str(home / "roost.toml")}
    (home / "roost.toml").write_text(f"max_running_jobs = {count + 10}\nmax_live_workers = {count + 10}\n")
    paths = paths_mod.resolve({"ROOST_HOME": str(home)})
    paths.ensure()
    daemon = start(env, paths)
    wait(lambda: daemon_running(paths.socket), "the daemon")
    with Client.connect(paths.socket, client="bench") as client:
        jobs = [client.call("spawn", prompt="wait-for hold", cwd=str(home))["id"] for _ in range(count)]

        def at_gate(job: str) -> bool:
            return any(e["kind"] == "tool" for e in client.call("logs", job=job, limit=5)["entries"])

        wait(lambda: all(at_gate(job) for job in jobs), "every worker at its gate")
    daemon.kill()
    daemon.wait()
    began = time.monotonic()
    daemon = start(env, paths)
    wait(lambda: daemon_running(paths.socket), "the new daemon")
    answered = time.monotonic() - began
    with Client.connect(paths.socket, client="bench") as client:
        def adopted(job: str) -> bool:
            return any(e["kind"] == "worker" and e["data"].get("adopted")
                       for e in client.call("logs", job=job, limit=5)["entries"])

        left = list(jobs)
        while left:
            left = [job for job in left if not adopted(job)]
        took = time.monotonic() - began
        shims = [json.loads(p.read_text())["shim"]["pid"] for p in (paths.state_dir / "workers").glob("*.json")
                 if not p.name.startswith("spare")]
        mem = [memory(pid) for pid in shims]
        (home / "gates").mkdir(exist_ok=True)
        (home / "gates" / "hold").touch()
        client.call("shutdown", all=True)
    daemon.wait(30)
    began = time.monotonic()  # the baseline: the same start, the same records, nothing to adopt
    daemon = start(env, paths)
    wait(lambda: daemon_running(paths.socket), "the daemon with nothing to adopt")
    bare = time.monotonic() - began
    with Client.connect(paths.socket, client="bench") as client:
        client.call("shutdown", all=True)
    daemon.wait(30)
    pss = sorted(p for p, _ in mem)
    rss = sorted(r for _, r in mem)
    print(f"{count} workers re-adopted: the new daemon answered after {answered * 1000:.0f} ms, "
          f"every worker adopted after {took * 1000:.0f} ms; the same start with nothing to adopt answered "
          f"after {bare * 1000:.0f} ms (load average {os.getloadavg()[0]:.1f})")
    print(f"a shim: PSS median {pss[len(pss) // 2] / 1024:.1f} MiB (max {pss[-1] / 1024:.1f}), "
          f"RSS median {rss[len(rss) // 2] / 1024:.1f} MiB (max {rss[-1] / 1024:.1f}) over {len(mem)} shims")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
