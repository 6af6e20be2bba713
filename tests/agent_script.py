"""A command-line "agent" for the command driver's tests: it does what its prompt says.

    agent_script.py --session ID [--resume ID] [PROMPT]     (no PROMPT: read it from stdin)

It first prints which session it runs and whether it resumes, then acts on the prompt:
``fail`` exits 3 with a line on stderr, ``sleep N`` prints its pid and sleeps, ``print N`` prints
N bytes of a build log in one write, ``roost ARGS`` runs the roost CLI (ARGS split as a shell
would) as the calling job, anything else is echoed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time


def build_log(size: int) -> bytes:
    """``size`` bytes of numbered 80-byte lines, as a build log looks."""
    return b"".join(b"line %07d %s\n" % (i, b"x" * 66) for i in range(size // 80 + 1))[:size]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--session", required=True)
    parser.add_argument("--resume")
    parser.add_argument("prompt", nargs="?")
    args = parser.parse_args()
    prompt = args.prompt if args.prompt is not None else sys.stdin.read()
    start = f"resumed session {args.resume}" if args.resume else f"fresh session {args.session}"
    print(f"{start}\nprompt: {prompt}", flush=True)
    word, _, rest = prompt.strip().partition(" ")
    if word == "fail":
        print("agent_script: failing as asked", file=sys.stderr, flush=True)
        return 3
    if word == "sleep":
        print(f"sleeping as pid {os.getpid()}", flush=True)
        time.sleep(float(rest))
        print("woke up", flush=True)
    elif word == "print":
        sys.stdout.buffer.write(build_log(int(rest)))
    elif word == "roost":
        done = subprocess.run([sys.executable, "-m", "roost.cli", *shlex.split(rest)], capture_output=True, text=True)
        print(f"roost said: {done.stdout.strip()}{done.stderr.strip()}", flush=True)
        return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
