"""The banner that says the store was repaired, on every screen, until someone acknowledges it.

It shows what the daemon said in its hello (``store_notice``), as the CLI's stderr line does, with
what to do first, so that a notice too long for the banner's lines still says how to stop it."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from roost.client import ACKNOWLEDGE
from roost.text import safe_text


class StoreBanner(Static):
    """Hidden while there is no notice; its look is in app.tcss."""

    def show(self, notice: str | None) -> None:
        self.set_class(bool(notice), "-shown")
        self.update(Text(f"THE STORE WAS REPAIRED (`{ACKNOWLEDGE}` once you have read this): "
                         f"{safe_text(' | '.join(notice.splitlines()))}") if notice else "")  # Text: paths are no markup
