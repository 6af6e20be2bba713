"""The engine's model check run long (tests/engine_model.py; CI runs a fixed seeded budget in
tests/test_engine_model.py): many more random interleavings of every message, from a seed you give
so a failure replays. Prints how many sequences and steps ran and how long they took.

    python bench/model.py --examples 2000 --steps 80 --seed 1
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, Phase, settings  # noqa: E402

from tests.engine_model import EngineModel  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=1000, help="random sequences to run")
    parser.add_argument("--steps", type=int, default=80, help="steps (messages, events) per sequence")
    parser.add_argument("--seed", type=int, default=0, help="the seed (the same one replays a failure)")
    parser.add_argument("--shrink", action="store_true", help="shrink a failure to its shortest sequence")
    opts = parser.parse_args(argv)
    phases = (Phase.explicit, Phase.generate, *((Phase.shrink,) if opts.shrink else ()))
    steps = 0
    original = EngineModel.check_invariants

    def counted(self: EngineModel, settings: object, output: object, runtimes: object) -> None:
        nonlocal steps
        steps += 1
        original(self, settings, output, runtimes)

    EngineModel.check_invariants = counted  # type: ignore[method-assign]
    started = time.monotonic()
    try:
        _run(opts, phases)
    finally:
        took = time.monotonic() - started
        print(f"{opts.examples} sequences of up to {opts.steps} steps, seed {opts.seed}: {steps} invariant "
              f"checks in {took:.1f}s ({steps / took if took else 0:.0f}/s)")
    return 0


def _run(opts: argparse.Namespace, phases: tuple[Phase, ...]) -> None:
    from hypothesis import seed

    test = seed(opts.seed)(EngineModel.TestCase)
    test.settings = settings(max_examples=opts.examples, stateful_step_count=opts.steps, deadline=None,
                             database=None, phases=phases, suppress_health_check=list(HealthCheck))
    test("runTest").runTest()


if __name__ == "__main__":
    sys.exit(main())
