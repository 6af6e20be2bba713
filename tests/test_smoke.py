"""The quickest whole-path check: a real daemon, a real built-in worker, one turn."""

from __future__ import annotations


def test_a_turn_on_the_builtin_agent(daemon):
    job = daemon.spawn("say hello there")
    row = daemon.wait_state(job, "idle")
    assert row["last_text"] == "hello there"
    assert row["worker_up"] and row["pid"]
    assert "hello there" in daemon.texts(job)


#: What `roost ls --json` must not load: the CLI's start-up is most of its run time.
HEAVY = ("asyncio", "textual", "rich", "tomllib", "sqlite3", "subprocess", "roost.config", "roost.daemon",
         "roost.tui")


def test_the_cli_path_stays_light(daemon):
    """`roost ls --json` against a running daemon loads no event loop, UI, config parser or daemon
    code (lazy imports inside commands keep them off); a regression here costs every command."""
    import subprocess
    import sys

    daemon.spawn("say light")
    code = ("import sys; sys.argv = ['roost', 'ls', '--json']\n"
            "import roost.cli\n"
            "try:\n    roost.cli.main()\nexcept SystemExit:\n    pass\n"
            f"heavy = {HEAVY!r}\n"
            "print(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy)), "
            "file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], env=daemon.env, capture_output=True, text=True, timeout=60)
    assert "say light" in done.stdout, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "[]"
