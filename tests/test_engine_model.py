"""The engine model-checked (tests/engine_model.py) on a fixed, seeded budget: a failure replays
from the same seed, and prints the sequence of steps that broke an invariant."""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, seed, settings

from tests.engine_model import EngineModel

#: Sized to run in well under a minute on a loaded 2-core machine (bench/model.py runs it long).
BUDGET = settings(max_examples=40, stateful_step_count=40, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow], database=None,
                  phases=(Phase.explicit, Phase.generate))

TestEngineModel = seed(19)(EngineModel.TestCase)
TestEngineModel.settings = BUDGET
