"""Small modal boxes: a one-line prompt (message, rename), a script box (a new job's prompt,
several lines), a yes/no question (archive), and a one-line answer that takes only fresh keys
(an approval's rule or reason)."""

from __future__ import annotations

import time
from typing import TypeVar

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, TextArea


class PromptBox(ModalScreen[str | None]):
    """Asks for one line of text; Enter gives it back, Esc gives None. Text typed right behind
    the key that opened it lands in it (the key router forwards it here)."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, title: str, placeholder: str = "", value: str = "", verb: str = "send") -> None:
        super().__init__()
        self._title = title
        self._placeholder = placeholder
        self._value = value
        self._verb = verb  # what Enter does, as the help line says it

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self._title, classes="dialog-title", markup=False)
            yield Input(self._value, placeholder=self._placeholder, id="prompt-input")
            yield Label(f"enter to {self._verb} · esc to cancel", classes="dialog-help", markup=False)

    def on_mount(self) -> None:
        self.box.focus()  # now, not on resume: keys forwarded here are handled right after mount

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(self.box.value.strip() or None)

    @property
    def box(self) -> Input:
        return self.query_one("#prompt-input", Input)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ScriptBox(ModalScreen[str | None]):
    """Asks for a prompt of several lines (a script for the built-in agent): Enter starts a new
    line, Ctrl+S (or Ctrl+Enter where the terminal tells it apart) gives it back, Esc gives None."""

    BINDINGS = [
        Binding("ctrl+s,ctrl+enter", "send", "start it", key_display="ctrl+s"),
        Binding("escape", "cancel", "cancel"),
    ]

    def __init__(self, title: str) -> None:
        super().__init__()
        self._title = title

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self._title, classes="dialog-title", markup=False)
            yield TextArea(id="script-input", soft_wrap=True, show_line_numbers=False)
            yield Label("enter: new line · ctrl+s: start it · esc: cancel", classes="dialog-help")

    def on_mount(self) -> None:
        self.box.focus()

    @property
    def box(self) -> TextArea:
        return self.query_one("#script-input", TextArea)

    def action_send(self) -> None:
        self.dismiss(self.box.text.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


Answer = TypeVar("Answer")

#: Seconds after a confirmation appears in which keys are still taken as typed ahead: nobody reads
#: and answers a question that fast, but a burst split over two reads of the terminal arrives so.
FRESH_KEYS_GRACE = 0.15


class FreshKeysScreen(ModalScreen[Answer]):
    """A dialog that only takes keys made after it was on screen: keys typed ahead (a burst that
    went on past the key that opened it) are not answers to a question the person never saw."""

    shown_at: float | None = None

    def on_mount(self) -> None:
        self.shown_at = time.monotonic()  # the clock Textual stamps key events with (Message.time)

    def made_after_shown(self, event: events.Key) -> bool:
        return self.shown_at is not None and event.time >= self.shown_at + FRESH_KEYS_GRACE


class ConfirmBox(FreshKeysScreen[bool]):
    """A yes/no question; y or Enter says yes, n or Esc says no (pressed after it appeared)."""

    BINDINGS = [
        Binding("y,enter", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self._question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self._question, classes="dialog-title", markup=False)
            yield Label("y / enter: yes · n / esc: no", classes="dialog-help")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class AnswerBox(FreshKeysScreen[str | None]):
    """One line that answers something a person must have seen (an approval's rule, a denial's
    reason): Enter gives the line back, empty too; Esc gives None. Keys typed ahead of it are
    dropped, so no burst fills it in and sends it."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, title: str, value: str = "", placeholder: str = "", help: str = "") -> None:
        super().__init__()
        self._title = title
        self._value = value
        self._placeholder = placeholder
        self._help = help

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self._title, classes="dialog-title", markup=False)
            yield Input(self._value, placeholder=self._placeholder, id="answer-input")
            yield Label(self._help, classes="dialog-help", markup=False)

    def on_mount(self) -> None:
        super().on_mount()
        self.box.focus()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(self.box.value.strip())

    @property
    def box(self) -> Input:
        return self.query_one("#answer-input", Input)

    def action_cancel(self) -> None:
        self.dismiss(None)
