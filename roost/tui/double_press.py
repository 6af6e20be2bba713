"""A key that only acts when pressed twice on the same target within a short time (``K K``)."""

from __future__ import annotations

from collections.abc import Callable


class DoublePress:
    """Arms on the first press, fires on a second press for the same target in time.

    Time comes from the app's clock, so a test can let the window run out without waiting; the
    window is the ``double_press_window`` setting, so a test in a real terminal (whose app's clock
    no test can stop) gives it seconds enough for a loaded machine.
    """

    def __init__(self, clock: Callable[[], float], window: float) -> None:
        self._clock = clock
        self.window = window
        self._armed: tuple[str, float] | None = None

    def press(self, target: str) -> bool:
        """True when this press completes a double press on ``target`` (and disarms)."""
        now = self._clock()
        armed, self._armed = self._armed, None
        if armed is not None and armed[0] == target and now - armed[1] <= self.window:
            return True
        self._armed = (target, now)
        return False
