"""The filter line (``/``): narrows a list as you type, by title or id, ``s:STATE`` by state."""

from __future__ import annotations

from typing import Any

from textual.binding import Binding
from textual.message import Message
from textual.widgets import Input

#: What the filter line says before anything is typed (docs/keys.md lists the filters).
FILTER_HELP = "filter: words in the title or id · s:failed · s:waiting · s:queued · s:running · esc clears"


class FilterBox(Input):
    """Every change narrows the list at once (``Input.Changed``); Enter keeps the filter and
    gives the list back the focus, Esc clears it."""

    BINDINGS = [
        Binding("enter", "keep", "keep filter"),
        Binding("escape", "clear", "clear filter"),
    ]

    class Done(Message):
        """The person left the filter line; ``cleared`` when with Esc (the filter is gone)."""

        def __init__(self, box: FilterBox, cleared: bool) -> None:
            super().__init__()
            self.box = box
            self.cleared = cleared

        @property
        def control(self) -> FilterBox:
            return self.box

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(placeholder=FILTER_HELP, select_on_focus=False, **kwargs)

    def action_keep(self) -> None:
        self.post_message(self.Done(self, cleared=False))

    def action_clear(self) -> None:
        self.value = ""
        self.post_message(self.Done(self, cleared=True))
