"""The footer: the keys that fit whole, in their order, and ``?`` (which lists them all) always.

Textual's footer lays its keys out in a row and a narrow terminal cuts the last one mid-word
(``w next ne``); this one leaves out every key that would not fit whole, keeping room for ``?``.
"""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

#: The action whose key is always shown: the help overlay lists what the footer leaves out.
HELP_ACTION = "help"


def fitting(widths: list[tuple[int, bool]], room: int) -> list[bool]:
    """Which keys to show, given each one's ``(width, always)``: the ``always`` ones, and the
    others in their order (the most used first) up to the first that would not fit whole in what
    ``room`` leaves."""
    used = sum(width for width, always in widths if always)
    shown, full = [], False
    for width, always in widths:
        full = full or (not always and used + width > room)
        if not always and not full:
            used += width
        shown.append(always or not full)
    return shown


class FitFooter(Footer):
    """Textual's footer (compact) that never cuts a key, and is made again only when the keys it
    shows change: Textual's remakes it (a layout of the whole screen) on every ``refresh_bindings``,
    which a job screen calls with every batch of rows, and a flood made each key wait behind them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shown: tuple[tuple[str, str, str, bool], ...] | None = None

    def bindings_changed(self, screen: Screen[Any]) -> None:
        shown = tuple((key, b.binding.action, b.binding.description, b.enabled)
                      for key, b in screen.active_bindings.items() if b.binding.show)
        if shown == self._shown and self._bindings_ready:
            return
        if screen.app.app_focus:  # Textual's remakes it only then: remember what it shows
            self._shown = shown
        super().bindings_changed(screen)

    async def recompose(self) -> None:
        await super().recompose()
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        keys = list(self.query_children(FooterKey))
        widths = [(key.render().cell_len + key.styles.margin.width, key.action == HELP_ACTION) for key in keys]
        for key, shown in zip(keys, fitting(widths, self.size.width)):
            key.display = shown
