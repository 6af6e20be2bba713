"""Answering an approval with a key: which approval a key answers, and the answers themselves.

A key answers the approval that was on screen, in the place the focus is, **when the key was
made** (Textual stamps each key event with the monotonic clock), never one that came after:
each screen records, per place (a row, the job screen's approval block), which approval it shows
since when (``ShownApprovals``), and the key router tells the screen the time of the key it acts
on (``RoostScreen.key_time``). A key made less than ANSWER_GRACE after the approval came on
screen, or after the focus came to where it is shown, is no answer (it was typed ahead, or was
part of a burst of text); the status line says to press it again. The answer names the approval
id, so the daemon refuses it if that approval was settled meanwhile (docs/protocols.md,
``answer_approval``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, Callable, Protocol

from textual.app import App

from roost.rules.approvals import rule_for
from roost.tui.approval_text import Approval, summary
from roost.tui.dialogs import FRESH_KEYS_GRACE, AnswerBox
from roost.tui.status_line import StatusLine


class Answering(Protocol):
    """What answering needs of a screen (every ``RoostScreen``): its status line, its requests, its app."""

    status: StatusLine

    @property
    def app(self) -> App[Any]: ...

    def request(self, op: str, args: dict[str, Any], then: Callable[[Any], str | None]) -> Any: ...

#: The keys that answer where an approval is shown (docs/keys.md): approve once, approve for the
#: rest of the job, deny. Each acts only pressed on its own (a burst makes it text).
APPROVAL_KEYS = frozenset({"y", "Y", "N"})
#: Seconds an approval (and the focus on it) must have been on screen before a key answers it.
ANSWER_GRACE = FRESH_KEYS_GRACE
#: How many changes each place remembers (keys are answered within a second or so of being made).
HISTORY = 4


class ShownApprovals:
    """What each place of a screen showed, since when: ``place`` is a job id (its row) or a name."""

    def __init__(self) -> None:
        self._places: dict[str, list[tuple[float, Approval | None]]] = {}

    def show(self, place: str, approval: Approval | None, now: float) -> None:
        """``place`` shows ``approval`` (None: none) from ``now`` on; the same id again changes nothing."""
        history = self._places.setdefault(place, [])
        current = history[-1][1] if history else None
        if (current.id if current else None) == (approval.id if approval else None):
            return
        history.append((now, approval))
        del history[:-HISTORY]

    def keep(self, places: Iterable[str]) -> None:
        """Forget places no longer drawn (a row that left), so the record stays as small as the screen."""
        wanted = set(places)
        for place in set(self._places) - wanted:
            del self._places[place]

    def at(self, place: str, when: float) -> tuple[Approval, float] | None:
        """The approval ``place`` showed at ``when``, and since when; None if it showed none."""
        shown = [(since, approval) for since, approval in self._places.get(place, ()) if since <= when]
        if not shown or shown[-1][1] is None:
            return None
        since, approval = shown[-1]
        assert approval is not None
        return approval, since


def key_target(shown: ShownApprovals, place: str, key_time: float | None,
               focus_since: float) -> Approval | str:
    """The approval a key made at ``key_time`` answers in ``place``, or why it answers none."""
    when = time.monotonic() if key_time is None else key_time
    found = shown.at(place, when)
    if found is None:
        return "no request was on screen there when the key was pressed"
    approval, since = found
    if when < max(since, focus_since) + ANSWER_GRACE:
        return "that key came right as the request appeared (typed ahead, or part of text): press it again"
    return approval


def answer(screen: Answering, target: Approval | str, decision: str) -> None:
    """Answer ``target`` (``once``, ``job`` or ``deny``); ``job`` and ``deny`` ask first (the rule,
    pre-filled with what the daemon would add, to edit; the reason, optional)."""
    if isinstance(target, str):
        screen.status.say(target, error=True)
        return
    approval, what = target, summary(target)

    def send(decision: str, said: str, **extra: str) -> None:
        screen.request("answer_approval", {"approval": approval.id, "decision": decision, **extra},
                       lambda _: f"{said} {what}")

    if decision == "once":
        send("once", "approved once:")
    elif decision == "job":
        def with_rule(rule: str | None) -> None:
            if rule:
                send("job", f"approved for this job (rule {rule}):", rule=rule)

        screen.app.push_screen(AnswerBox(
            f"Approve {what} — and, for the rest of this job, whatever this rule allows:",
            rule_for(approval.tool, approval.what),
            help="TOOL:TEXT allows exactly that; TOOL:TEXT* anything starting with it (a command with "
                 "nothing chained or redirected after); TOOL alone any use · enter approves · esc cancels"),
            with_rule)
    else:
        def with_reason(reason: str | None) -> None:
            if reason is not None:
                send("deny", "denied:", **({"reason": reason} if reason else {}))

        screen.app.push_screen(AnswerBox(
            f"Deny {what}", placeholder="why, or what to do instead (optional): the agent hears it",
            help="enter denies · esc cancels"), with_reason)
