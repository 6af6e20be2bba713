"""The banner that says the store was repaired, on every screen, until someone acknowledges it.

It shows what the daemon said in its hello (``store_notice``), as the CLI's stderr line does."""

from __future__ import annotations

from textual.widgets import Static

from roost.client import notice_line
from roost.text import safe_text


class StoreBanner(Static):
    """Hidden while there is no notice; its look is in app.tcss."""

    def show(self, notice: str | None) -> None:
        self.set_class(bool(notice), "-shown")
        self.update(safe_text(notice_line(notice)) if notice else "")
