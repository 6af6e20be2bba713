"""A sandboxed spawn against an unsandboxed one, side by side (docs/performance.md, "Walls").

    python bench/sandbox_spawn.py [N]

One daemon, no spare workers (a spare is started outside any job's walls, so a sandboxed job never
takes one: both columns start their worker afresh). Each spawn is timed from the request to its
built-in job's first idle row (worker started, get_state answered, a `say` turn run), alternating
isolation "none" and "sandbox" so that load on the machine falls on both alike; p50 of N each."""

from __future__ import annotations

import sys
import time

from harness import Daemon, Home, median


def spawn_to_idle(client, cwd: str, isolation: str) -> float:
    start = time.perf_counter()
    job = client.call("spawn", prompt="say hi", cwd=cwd, isolation=isolation)["id"]
    while client.call("show", job=job)["state"] != "idle":
        time.sleep(0.001)
    took = time.perf_counter() - start
    client.call("close", job=job)
    return took


def main(count: int) -> None:
    home = Home("spare_workers = 0\nidle_timeout = 0\n", tag="walls")
    try:
        with Daemon(home) as daemon:
            daemon.start()
            times: dict[str, list[float]] = {"none": [], "sandbox": []}
            with daemon.client() as client:
                print(client.call("status")["sandbox"]["words"])
                spawn_to_idle(client, str(home.work), "sandbox")  # the first pays for the page cache
                for _ in range(count):
                    for isolation in times:
                        times[isolation].append(spawn_to_idle(client, str(home.work), isolation))
            none, walled = (median(times[k]) * 1000 for k in ("none", "sandbox"))
            print(f"spawn -> idle, p50 of {count}: unsandboxed {none:.1f} ms, sandboxed {walled:.1f} ms, "
                  f"+{walled - none:.1f} ms")
    finally:
        home.remove()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
