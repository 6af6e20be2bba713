"""A key that only acts when pressed twice on the same target within a short time (``K K``)."""

from __future__ import annotations

from collections.abc import Callable

#: Seconds within which the second press must follow the first.
DOUBLE_PRESS_WINDOW = 2.0


class DoublePress:
    """Arms on the first press, fires on a second press for the same target in time.

    Time comes from the app's clock, so a test can let the window run out without waiting.
    """

    def __init__(self, clock: Callable[[], float], window: float = DOUBLE_PRESS_WINDOW) -> None:
        self._clock = clock
        self._window = window
        self._armed: tuple[str, float] | None = None

    def press(self, target: str) -> bool:
        """True when this press completes a double press on ``target`` (and disarms)."""
        now = self._clock()
        armed, self._armed = self._armed, None
        if armed is not None and armed[0] == target and now - armed[1] <= self._window:
            return True
        self._armed = (target, now)
        return False
