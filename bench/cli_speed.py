"""The CLI's own speed with a few jobs: each one-request command beside `python -c pass` from the
same interpreter, taken in turns, so load from whatever else shares the machine hits both alike.
Most of a command's time is start-up (imports): roost/cli/ imports only the module of the
command named, and `ls --json` imports no rules, no config parser, no event loop."""

from __future__ import annotations

import argparse
import subprocess
import sys

from harness import Daemon, Home, Result, median, spawn_idle, timed

#: The commands measured: what a person or a script runs most ("" is the job id, filled in).
COMMANDS = (("ls",), ("ls", "--json"), ("show", ""), ("daemon", "status"))
#: What the issue asks: each at most this many times `python -c pass`.
TARGET_RATIO = 4.0


def bench_cli_commands(opts: argparse.Namespace) -> list[Result]:
    """`roost ls`, `ls --json`, `show ID` and `daemon status` with 3 jobs, each beside `python -c pass`."""
    home = Home(tag="cli-commands")
    try:
        with Daemon(home) as d:
            d.start()
            job = spawn_idle(d, 3)[0]
            argvs = [home.cli(*(arg or job for arg in command)) for command in COMMANDS]
            subject: list[list[float]] = [[] for _ in argvs]
            baseline: list[float] = []
            for _ in range(opts.cli_runs):
                for argv, times in zip(argvs, subject):
                    times.append(timed(argv, home.env))
                    baseline.append(timed([sys.executable, "-c", "pass"], home.env))
            out = []
            base = median(baseline)
            for command, times in zip(COMMANDS, subject):
                shown = " ".join(arg or "ID" for arg in command)
                out.append(Result("cli_commands", f"`roost {shown}`, 3 jobs", median(times), "s", base,
                                  "`python -c pass`", f"<= {TARGET_RATIO:g}x", median(times) <= TARGET_RATIO * base))
            out.append(Result("cli_commands", "modules `roost ls --json` imports", _modules(home, ("ls", "--json")),
                              "modules", _modules(home, None), "`python -c pass`"))
            return out
    finally:
        home.remove()


def _modules(home: Home, command: tuple[str, ...] | None) -> float:
    """How many modules a run of ``command`` (None: nothing) has loaded when it ends."""
    run = ("import sys; sys.argv = ['roost', *%r]\nimport roost.cli\ntry:\n    roost.cli.main()\n"
           "except SystemExit:\n    pass\n" % (command,)) if command else ""
    code = run + "import sys; print(len(sys.modules), file=sys.stderr)"
    done = subprocess.run([sys.executable, "-c", code], env=home.env, capture_output=True, text=True, check=True)
    return float(done.stderr.strip().splitlines()[-1])
