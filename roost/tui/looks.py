"""How a job's state looks: its symbols, and colours taken from the app's current theme.

Cells of a DataTable and lines of a RichLog are Rich text, which cannot name theme variables,
so the colours are read from the theme (``Palette.from_variables``) and read again when it changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.theme import BUILTIN_THEMES

from roost.models import NEEDS_INPUT_STATES, Row, State
from roost.rules.row_text import state_marks

def theme_names() -> tuple[str, ...]:
    """The themes ``theme`` may name: Textual's own, all the app registers (``roost config
    check`` asks here, so it refuses what the app would refuse)."""
    return tuple(BUILTIN_THEMES)


#: Which palette colour each state is drawn in.
_STATE_TONES: dict[State, str] = {
    State.QUEUED: "muted",
    State.STARTING: "primary",
    State.WORKING: "primary",
    State.WAITING: "warning",
    State.BLOCKED: "warning",
    State.RATE_LIMITED: "warning",
    State.IDLE: "muted",
    State.DONE: "success",
    State.STOPPED: "muted",
    State.FAILED: "error",
}

BOLD = Style(bold=True)

#: The widest state cell: a dot, a symbol, spaces and the longest state name.
STATE_CELL_WIDTH = 4 + max(len(s.value) for s in State)


@dataclass(frozen=True)
class Palette:
    """Rich styles for each tone, made from one theme's colours."""

    text: Style
    muted: Style
    primary: Style
    warning: Style
    error: Style
    success: Style

    @classmethod
    def from_variables(cls, variables: Mapping[str, str]) -> "Palette":
        """Styles from the app's CSS variables (``App.get_css_variables()``)."""
        background = Color.parse(variables["background"])
        foreground = Color.parse(variables["foreground"])

        def solid(name: str) -> Style:
            return Style(color=(background + Color.parse(variables[name])).rich_color)

        return cls(
            text=Style(color=foreground.rich_color),
            muted=Style(color=background.blend(foreground, 0.6).rich_color),
            primary=solid("text-primary"),
            warning=solid("text-warning"),
            error=solid("text-error"),
            success=solid("text-success"),
        )

    def tone(self, name: str) -> Style:
        return getattr(self, name)

    def for_state(self, state: State) -> Style:
        style = self.tone(_STATE_TONES[state])
        return style + BOLD if state in NEEDS_INPUT_STATES else style


def state_text(row: Row, palette: Palette) -> Text:
    """``● ? waiting``: worker dot, state symbol and name, in the state's colour."""
    return Text(f"{state_marks(row)} {row.state.value}", style=palette.for_state(row.state),
                no_wrap=True, overflow="ellipsis", end="")


def cell(text: str, style: Style | None = None) -> Text:
    """One table cell: a single line, cut with … when it does not fit."""
    return Text(text, style=style or "", no_wrap=True, overflow="ellipsis", end="")
