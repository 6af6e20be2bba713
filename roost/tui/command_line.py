"""The agent view's command line (``:``): a command and its arguments, checked before it runs."""

from __future__ import annotations

from textual.binding import Binding
from textual.message import Message
from textual.widgets import Input

#: The commands and what each takes; docs/keys.md says what they do.
COMMANDS = ("new PROMPT", "open ID", "send ID TEXT", "stop ID", "rename ID TITLE", "archived", "help", "quit")


def parse_command(text: str) -> tuple[str, list[str]] | str:
    """``(command, arguments)`` for a line, the last argument taking the rest of it; or what is
    wrong with the line, in words (an unknown command, missing arguments)."""
    word, _, rest = text.lstrip("/:").strip().partition(" ")
    usage = next((spec for spec in COMMANDS if spec.split()[0] == word), None)
    if usage is None:
        return f"unknown command {word!r}: try help" if word else ""
    needed = len(usage.split()) - 1
    args = rest.split(None, needed - 1) if needed and rest.strip() else []
    if len(args) < needed:
        return f"usage: {usage}"
    return word, [arg.strip() for arg in args]


class CommandLine(Input):
    """The command line; Enter runs what was typed, Esc goes back to the table."""

    BINDINGS = [Binding("escape", "close", "back")]

    class Run(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class Closed(Message):
        """The person left the command line without running anything."""

    async def action_submit(self) -> None:
        text = self.value.strip()
        self.value = ""
        self.post_message(self.Run(text))

    def action_close(self) -> None:
        self.value = ""
        self.post_message(self.Closed())
