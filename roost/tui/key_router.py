"""Where each key goes: decided by the app, one key at a time, in the order keys arrive.

Textual forwards a key to the focused widget's queue and looks its bindings up when it bubbles
back, so in a burst every key is forwarded before the first one acted: a key typed right behind
Enter reached the screen below the one Enter opened. Here each key is handled to the end
(inserted into a text box, or its binding run) before the next is looked at, against the focus
as the previous key left it. Actions that open a screen push it at once, and keys that arrive
while that screen is not mounted yet are forwarded to it and handled when they come back from
it, still in order — so they reach the screen that opened, never the one below.

Two kinds of screen and widget take keys specially (see docs/keys.md, "Typing ahead"):
- a ``FreshKeysScreen`` (a confirmation) drops keys made before it was on screen;
- keys in a RoostScreen's ``single_press_keys()`` (the subagent panel's ``x``, ``m``, ``K``, the
  approval keys ``y``, ``Y``, ``N``) act only when no other printable key follows within
  SINGLE_PRESS_WINDOW; followed by one, they are the start of text, which the screen's
  ``take_text`` puts in the composer. An approval key made within SINGLE_PRESS_WINDOW of a key
  that went in as text (typed in a text box, or a burst) is text too, so no text ends on an approval.

An ``alt+`` key is Esc then the key (roost/tui/escape_keys.py: Esc is Esc).

A binding runs with the screen told when its key was made (``RoostScreen.key_time``), so an
approval key answers the approval that was on screen then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import events
from textual.screen import Screen
from textual.widgets import Input, TextArea

from roost.tui.approval_keys import APPROVAL_KEYS
from roost.tui.dialogs import FreshKeysScreen
from roost.tui.escape_keys import split_meta
from roost.tui.roost_screen import RoostScreen

if TYPE_CHECKING:
    from textual.app import App

#: Seconds within which a printable key after a single-press key makes both text (a burst).
SINGLE_PRESS_WINDOW = 0.2
#: Single-press keys that a second press of the same key completes (``K K``), rather than text.
DOUBLE_PRESS_KEYS = frozenset({"K"})


def _character(event: events.Key) -> str | None:
    return event.character if event.is_printable and event.character else None


class KeyRouter:
    """The app's key dispatch (the app hands it every key event)."""

    def __init__(self, app: App[object]) -> None:
        self.app = app
        #: Keys forwarded to a screen that was not mounted yet, oldest first, until they come back.
        self._away: list[tuple[Screen[object], events.Key]] = []
        #: A single-press key waiting to learn whether text follows it.
        self._pending: events.Key | None = None
        #: When the last key that went in as text was made: an approval key right behind it is text too.
        self._text_at = float("-inf")

    async def key(self, event: events.Key) -> bool:
        """Handle ``event``; False for a key this router did not send away (Textual's own)."""
        came_back = event.is_forwarded
        meta = None if came_back else split_meta(event)
        if meta is not None:  # Esc, then a key right behind it (roost/tui/escape_keys.py)
            for key in meta:
                await self.key(key)
            return True
        if came_back:
            mine = next((i for i, (_, key) in enumerate(self._away) if key is event), None)
            if mine is None:
                return False
            screen, _ = self._away.pop(mine)
            if screen is not self.app.screen and screen.is_mounted:
                return True  # meant for a screen that is not the current one any more
        self._away = [(s, k) for s, k in self._away if s in self.app.screen_stack]
        if self._pending is not None:
            pending, self._pending = self._pending, None
            character = _character(event)
            double = event.key == pending.key and event.key in DOUBLE_PRESS_KEYS
            if character and not double and event.time - pending.time <= SINGLE_PRESS_WINDOW:
                self._text_at = event.time
                self._take_text(f"{pending.character}{character}")
                return True
            await self._act(pending)
        await self._deliver(event, came_back)
        return True

    def paste(self, event: events.Paste) -> bool:
        """A paste where the focus takes no text (the panel) goes where typing goes."""
        focused = self.app.focused
        if isinstance(focused, (Input, TextArea)) or not event.text:
            return False
        return self._take_text(event.text)

    async def _deliver(self, event: events.Key, came_back: bool) -> None:
        app, screen = self.app, self.app.screen
        if not screen.is_mounted or (not came_back and any(s is screen for s, _ in self._away)):
            self._away.append((screen, event))
            screen._forward_event(event)  # handled when it comes back, after the screen mounted
            return
        if isinstance(screen, FreshKeysScreen) and not screen.made_after_shown(event):
            return  # typed before this screen was there: not an answer to it
        if await self._bindings(event, priority=True):
            return
        if self._type(event):
            self._text_at = event.time
            return
        single = event.is_printable and event.character in self._single_press_keys()
        if single and event.character in APPROVAL_KEYS and event.time - self._text_at <= SINGLE_PRESS_WINDOW:
            self._text_at = event.time  # the burst goes on: ``YNy`` is text, its last key no approval
            self._take_text(event.character or "")
            return
        if single:
            self._pending = event
            app.set_timer(SINGLE_PRESS_WINDOW, lambda: app.call_later(self._settle, event))
            return
        if await self._bindings(event):
            return
        character = _character(event)
        if character:
            self._take_text(character)

    async def _settle(self, event: events.Key) -> None:
        """The window after a single-press key ran out with nothing typed behind it: it acts."""
        if self._pending is event:
            self._pending = None
            await self._act(event)

    async def _act(self, event: events.Key) -> None:
        """Run a single-press key's binding, if the focus still offers it."""
        if event.character in self._single_press_keys():
            await self._bindings(event)

    async def _bindings(self, event: events.Key, priority: bool = False) -> bool:
        """Run ``event``'s binding, the screen told when the key was made (an approval key answers
        what was on screen then, roost/tui/approval_keys.py)."""
        screen = self.app.screen
        if not isinstance(screen, RoostScreen):
            return await self.app._check_bindings(event.key, priority=priority)
        screen.key_time = event.time
        try:
            return await self.app._check_bindings(event.key, priority=priority)
        finally:
            screen.key_time = None

    def _type(self, event: events.Key) -> bool:
        """Text for the focused text box goes in now, so the keys behind it find it there."""
        focused = self.app.focused
        character = _character(event)
        if isinstance(focused, Input) and character:
            focused.insert_text_at_cursor(character)
        elif isinstance(focused, TextArea) and (character or event.key == "enter"):
            focused.insert(character or "\n")
        else:
            return False
        return True

    def _single_press_keys(self) -> frozenset[str]:
        screen = self.app.screen
        return screen.single_press_keys() if isinstance(screen, RoostScreen) else frozenset()

    def _take_text(self, text: str) -> bool:
        screen = self.app.screen
        return isinstance(screen, RoostScreen) and screen.take_text(text)
