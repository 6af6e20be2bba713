"""Every kind of job on an SSH host goes on across a dropped link (docs/hosts.md#a-dropped-link):
built-in, command, pi and Claude Code workers, all mid-turn on the host under their shims, the host's
ssh master SIGKILLed. Each turn is held mid-way as in tests/test_readopt_agents.py (a gate file, or
the fake model server's ``HOLD``); half are let go while the link is down, the rest once it is back.
Each ends once, on the same worker, its output whole and nothing twice, its usage counted once. A
real sshd on 127.0.0.1 (tests/sshd.py): the host is this machine, with its own roost dir."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from fake_anthropic import FakeAnthropic
from test_claude_driver import claude_bin, claude_profile  # noqa: F401  (claude_bin is a fixture)
from test_hosts import master_pid, sshd  # noqa: F401  (sshd: the module's server fixture)
from test_hosts import pytestmark as NEEDS_SSHD
from test_hosts_pi import far_pi  # noqa: F401  (a fixture)
from test_pi_driver import fake, pi_bin  # noqa: F401  (fixtures: far_pi's model server and pi)
from test_readopt_agents import Fakes, assert_whole, release_around, spawn_held, wait_held
from test_shim import CONFIG as NUMBERED
from test_shim import kinds

pytestmark = [pytest.mark.pi, pytest.mark.claude, NEEDS_SSHD]

#: Twenty jobs on the host, five of each kind.
MANY = {"builtin": 5, "numbered": 5, "pi": 5, "claude": 5}


def test_every_kind_of_turn_on_the_host_goes_on_across_a_dropped_link_whole_and_nothing_twice(
        far_pi, fake, claude_bin, tmp_path: Path) -> None:  # noqa: F811
    claude_fake = FakeAnthropic().start()
    try:
        # Claude Code on the host: its program and HOME are paths there (the host is this machine);
        # its config dir, under roost's state dir, moves into roost's dir there.
        claude = claude_profile(claude_bin, claude_fake, tmp_path / "claude-home") + 'host = "h"\n\n'
        # No cap on running or live workers: all twenty are working at once.
        daemon, _ = far_pi(f"max_running_jobs = 0\nmax_live_workers = 0\n{NUMBERED}\n{claude}")
        work = tmp_path / "work"  # the jobs' cwd there, where a built-in agent's ``wait-for`` looks
        fakes: Fakes = {"pi": fake, "claude": claude_fake}
        started = time.monotonic()
        jobs = spawn_held(daemon, MANY, work, host="h", cwd=str(work))
        pids = wait_held(daemon, jobs, fakes)
        held = time.monotonic()
        master = master_pid(daemon)
        os.kill(master, signal.SIGKILL)  # every job's link drops; their workers run on under their shims

        def link_back() -> None:
            daemon.wait_for(lambda: master_pid(daemon) != master, timeout=60, what="a new master")

        release_around(jobs, work, fakes, link_back)
        assert_whole(daemon, jobs, fakes, pids, [None])
        print(f"{len(pids)} jobs on the host: spawned and held {held - started:.1f}s, master killed to every turn's "
              f"end {time.monotonic() - held:.1f}s")
        for job in pids:
            notes = [n["message"] for n in kinds(daemon, job, "note")]
            assert any("the link to its worker on h dropped: trying again" in n for n in notes), (job, notes)
            assert any("the link to its worker on h is back after" in n for n in notes), (job, notes)
    finally:
        claude_fake.stop()
