"""The composer at the foot of a job screen: a message for the job, or a ``/`` command."""

from __future__ import annotations

from typing import Any

from textual.actions import SkipAction
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Input


#: The composer's hint while an approval is pending: a message is no approval, it denies.
DENY_HINT = "Enter denies the request with your words · ↑ y approve"


class Composer(Input):
    """Enter sends what was typed: text starting with ``/`` is a command, anything else a message."""

    BINDINGS = [
        Binding("enter", "submit", "send"),
        Binding("down", "subagents", "subagents", key_display="↓"),
        Binding("pagedown", "leave_to_screen", show=False),
        # The screen's too, and off while an approval waits, so the footer shows the screen's ↑ (answer it).
        Binding("up", "up_to_screen", show=False),
        # Shown here (the box is first in the chain the footer reads); the screen scrolls.
        Binding("pageup", "leave_to_screen", "scroll", key_display="PgUp/PgDn"),
        Binding("home", "home_or_top", show=False),
        Binding("end", "end_or_follow", show=False),
    ]

    #: Whether the open job has subagents, so ``↓`` has a panel to go to (the screen keeps it current).
    subagents_below: reactive[bool] = reactive(False)
    #: Whether the open job is stopped: what is sent restarts it, and the box says so before you send.
    restarts: reactive[bool] = reactive(False)
    #: Whether the open job waits on an approval: what is sent denies it, the text its reason.
    denies: reactive[bool] = reactive(False)

    class Send(Message):
        """A message for the open job."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class Command(Message):
        """A ``/`` command: its name and the rest of the line (``/subagents all``: subagents, all)."""

        def __init__(self, name: str, argument: str) -> None:
            super().__init__()
            self.name = name
            self.argument = argument

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(select_on_focus=False, **kwargs)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "subagents":
            return self.subagents_below
        if action == "up_to_screen":
            return not self.denies
        return super().check_action(action, parameters)

    def watch_subagents_below(self) -> None:
        self.refresh_bindings()

    def watch_restarts(self) -> None:
        self._hint()

    def watch_denies(self) -> None:
        self._hint()
        self.refresh_bindings()

    def _hint(self) -> None:
        """What sending does, said before you send (the daemon does it: docs/agents.md#approvals)."""
        self.border_title = (DENY_HINT if self.denies else
                             "stopped · what you send restarts it" if self.restarts else "")

    def action_leave_to_screen(self) -> None:
        """A one-line box has nothing to scroll: these keys are the screen's (panel, transcript)."""
        raise SkipAction()

    action_up_to_screen = action_leave_to_screen

    def action_home_or_top(self) -> None:
        """Home moves to the start of the line; already there, it is the screen's (the transcript's top)."""
        if self.cursor_position == 0:
            raise SkipAction()
        self.action_home()

    def action_end_or_follow(self) -> None:
        """End moves to the end of the line; already there, it is the screen's (follow the tail)."""
        if self.cursor_position >= len(self.value):
            raise SkipAction()
        self.action_end()

    def action_subagents(self) -> None:
        """``↓``: the screen takes the focus to the subagent panel (shown here, for the footer)."""
        raise SkipAction()

    async def action_submit(self) -> None:
        text = self.value.strip()
        if not text:
            return
        self.value = ""
        if text.startswith("/"):
            name, _, argument = text[1:].partition(" ")
            self.post_message(self.Command(name.strip(), argument.strip()))
        else:
            self.post_message(self.Send(text))
