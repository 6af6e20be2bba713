"""Small modal boxes: a one-line prompt (new job, message) and a yes/no question (archive)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class PromptBox(ModalScreen[str | None]):
    """Asks for one line of text; Enter gives it back, Esc gives None."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, title: str, placeholder: str = "") -> None:
        super().__init__()
        self._title = title
        self._placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self._title, classes="dialog-title")
            yield Input(placeholder=self._placeholder, id="prompt-input")
            yield Label("enter to send · esc to cancel", classes="dialog-help")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submit()

    def submit(self) -> None:
        """Give back what was typed (None for nothing)."""
        self.dismiss(self.box.value.strip() or None)

    @property
    def box(self) -> Input:
        return self.query_one("#prompt-input", Input)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmBox(ModalScreen[bool]):
    """A yes/no question; y or Enter says yes, n or Esc says no."""

    BINDINGS = [
        Binding("y,enter", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self._question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self._question, classes="dialog-title")
            yield Label("y / enter: yes · n / esc: no", classes="dialog-help")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
