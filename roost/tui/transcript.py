"""A job's transcript: the newest page of its timeline, older pages on demand, then streamed entries
(drawn a few times a second). It holds a bounded window of the timeline whatever the person does:
while it follows the tail, only the newest; while they read further up, the lines around them, and
what streams in past the bound is counted, not kept, and read again from the daemon when they get
there. So a command that prints tens of MB costs the app a few screenfuls, not all of it."""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from textual import events
from textual.message import Message
from textual.reactive import reactive
from textual.timer import Timer
from textual.widgets import RichLog

from roost.tui.entry_text import entry_text, line_count, weight
from roost.tui.looks import Palette

#: How long entries that stream in wait to be drawn together, in seconds.
DRAW_EVERY = 0.1
#: How many bytes of text the transcript keeps while it follows the tail: whole entries, newest
#: first, up to the one that reaches this (so with the daemon's entries of 64 KiB at most, it
#: holds under twice this, and every entry of the newest KEEP_BYTES is shown whole).
KEEP_BYTES = 64 * 1024
#: How much it keeps while the person reads further up: what is around the view, and new entries
#: below it until this is reached (what comes after is counted, and paged in from the daemon).
READ_BYTES = 4 * KEEP_BYTES


class Transcript(RichLog, can_focus=False):
    """The open job's transcript, loaded tail first: the newest entries, then older pages when
    the person scrolls to the top, and new entries as they stream in (each shown once).

    It follows the tail until the person scrolls up; then it stays where they read and counts
    the lines that arrived below (``unread``) until they scroll back to the end or ``follow``.
    What it holds is a window of the timeline, at most KEEP_BYTES while it follows and READ_BYTES
    while the person reads: ``more_before`` and ``more_after`` say entries lie beyond either end
    (scrolling there pages them in; ``follow`` starts again from the tail).
    It never takes the focus: the composer keeps it, and PgUp/PgDn scroll this from there.
    """

    #: Whether new lines scroll into view (the view is at the end).
    following: reactive[bool] = reactive(True)
    #: Lines that arrived below the view while it was not following.
    unread: reactive[int] = reactive(0)
    #: Whether each entry starts with its time.
    stamped: reactive[bool] = reactive(False)
    #: Whether long outputs are shown whole (else folded: their first and last lines).
    unfolded: reactive[bool] = reactive(False)

    class Unread(Message):
        """How many lines wait below the view (0: it follows the tail again)."""

        def __init__(self, count: int) -> None:
            super().__init__()
            self.count = count

    class Older(Message):
        """Scrolled to the top with older entries left to read (or back to a tail it let go of):
        the screen fetches the page before ``before`` and hands it to ``prepend``."""

        def __init__(self, before: int) -> None:
            super().__init__()
            self.before = before

    class Newer(Message):
        """Scrolled to the bottom of what it holds, with newer entries it let go of: the screen
        fetches the page after ``after`` and hands it to ``append_page``."""

        def __init__(self, after: int) -> None:
            super().__init__()
            self.after = after

    def __init__(self, id: str | None = None) -> None:
        super().__init__(wrap=True, markup=False, highlight=False, min_width=20, id=id)
        #: The newest entry's seq this has seen (held or only counted).
        self.last_seq = 0
        #: Whether entries older than the first one held exist, and newer than the last one held.
        self.more_before = False
        self.more_after = False
        #: The page asked for and not in yet (its ``before``, its ``after``), one each at a time.
        self._asked_before: int | None = None
        self._asked_after: int | None = None
        #: The window of the timeline held, oldest first; (seq, first line) of each entry drawn.
        self._entries: list[dict[str, Any]] = []
        self._drawn: list[tuple[int, int]] = []
        #: Message entries shown as queued (by seq), until a prompt delivers them.
        self._waiting: dict[int, dict[str, Any]] = {}
        self._palette: Palette | None = None
        #: Entries added and not drawn yet, and the timer that draws them.
        self._undrawn: list[dict[str, Any]] = []
        self._draw_timer: Timer | None = None
        #: Whether the lines are being drawn again (the scrolling that does is not the person's).
        self._redrawing = False
        #: The width the lines were wrapped to (a resize to another draws them again).
        self._wrapped_at = 0

    def start(self, entries: list[dict[str, Any]], more: bool) -> None:
        """Show the newest page of the timeline; ``more`` says older entries exist."""
        self.last_seq, self.more_before, self.more_after = 0, more, False
        self._asked_before = self._asked_after = None
        self._forget()
        self.following = True
        self.add(entries)

    def start_at(self, above: list[dict[str, Any]], entries: list[dict[str, Any]], more_before: bool,
                 more_after: bool) -> None:
        """Show the timeline from one entry on (``entries``, a search result's first), with the
        ``above`` it at the top of the view: the person reads there, so it does not follow; older
        entries page in above and newer below as they scroll."""
        self.start([], more_before)
        self.following = False
        self._entries.extend([*above, *entries])
        self.last_seq = self._entries[-1]["seq"] if self._entries else 0
        self.more_after = more_after
        self._redrawing = True
        for entry in self._entries:
            self._write(entry)
        first = entries[0]["seq"] if entries else self.last_seq
        line = next((line for seq, line in self._drawn if seq >= first), 0)
        self.scroll_to(y=line, animate=False, immediate=True)
        self._redrawing = False

    def _forget(self) -> None:
        """Let go of every entry held and every line drawn."""
        self._entries.clear()
        self._undrawn.clear()
        self._drawn.clear()
        self._waiting.clear()
        self.clear()

    def add(self, entries: list[dict[str, Any]]) -> None:
        """Append the entries newer than what is shown (the log and the stream may overlap); they
        are drawn together DRAW_EVERY later, so a flood of output is drawn a few times a second.
        While the person reads further up they are counted, and held until READ_BYTES; past that
        only counted (``more_after``): scrolling down to them, or End, reads them again."""
        fresh = [entry for entry in entries if entry["seq"] > self.last_seq]
        if not fresh:
            return
        self.last_seq = fresh[-1]["seq"]
        if not self.following:
            self.unread += sum(map(line_count, fresh))
            fresh = self._room_for(fresh)
        self._entries.extend(fresh)
        self._undrawn.extend(fresh)
        if fresh and self._draw_timer is None:
            self._draw_timer = self.set_timer(DRAW_EVERY, self._draw_new)

    def missed(self) -> None:
        """The stream skipped entries after ``last_seq`` (the daemon dropped a reader that fell
        behind): they are left out below, as if let go, and page in when the person gets there."""
        self.more_after, self._asked_after = True, None

    def _room_for(self, fresh: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The first of ``fresh`` that fit in READ_BYTES below what is held; the rest are let go."""
        if self.more_after:
            return []
        room = READ_BYTES - sum(map(weight, self._entries))
        for count, entry in enumerate(fresh):
            room -= weight(entry)
            if room < 0:
                self.more_after = True
                return fresh[:count]
        return fresh

    def _draw_new(self) -> None:
        """Draw what came since the last time. While it follows the tail, only the newest
        KEEP_BYTES of text stay (older entries are a page away: scrolling to the top asks for
        them), so a command that prints 40 MB costs the app that, not 40 MB of lines. A message
        shown as queued leaves once the prompt that delivers it arrives."""
        self._draw_timer = None
        fresh, self._undrawn = self._undrawn, []
        if self.following and self._trim():
            self._redraw(keep_view=False)
        elif any(self._delivered(entry) for entry in self._waiting.values()):
            self._redraw(keep_view=not self.following)
        else:
            for entry in fresh:
                self._write(entry)
            if self.following:
                self._to_end()

    def _trim(self) -> bool:
        """Drop the oldest entries beyond the one that reaches KEEP_BYTES, counting from the newest
        (that one stays, so no entry of the newest KEEP_BYTES is ever dropped); whether any went."""
        first, size = len(self._entries), 0
        while first > 0 and size < KEEP_BYTES:
            first -= 1
            size += weight(self._entries[first])
        if first <= 0:
            return False
        del self._entries[:first]
        self.more_before, self._asked_before = True, None  # a page asked before the first is no longer next
        return True

    def _fit(self, first: str) -> None:
        """While the person reads: drop entries from the ``first`` end ("top" or "bottom"), then
        from the other, until READ_BYTES hold them, never one in view."""
        low, high = self._in_view()
        size = sum(map(weight, self._entries))
        for end in (first, "bottom" if first == "top" else "top"):
            while size > READ_BYTES and len(self._entries) > 1:
                index = 0 if end == "top" else -1
                if low <= self._entries[index]["seq"] <= high:
                    break
                size -= weight(self._entries.pop(index))
                if end == "top":  # a page asked for beyond the end that went is no longer next
                    self.more_before, self._asked_before = True, None
                else:
                    self.more_after, self._asked_after = True, None

    def _in_view(self) -> tuple[int, int]:
        """The seqs of the first and last entry with a line in view (an empty range if none)."""
        if not self._drawn:
            return 0, -1
        top = self.scroll_offset.y
        return self._drawn_at(top)[0], self._drawn_at(top + self.size.height - 1)[0]

    def _drawn_at(self, line: int) -> tuple[int, int]:
        """The (seq, first line) of the entry drawn on ``line`` (there is one drawn)."""
        index = bisect_right(self._drawn, line, key=lambda drawn: drawn[1]) - 1
        return self._drawn[max(index, 0)]

    def _delivered(self, message: dict[str, Any]) -> bool:
        """Whether a later prompt carries this message's text (several may go in one prompt)."""
        text = (message.get("data") or {}).get("text", "")
        for entry in reversed(self._entries):
            if entry["seq"] <= message["seq"]:
                return False
            if entry["kind"] == "prompt" and text in (entry.get("data") or {}).get("text", ""):
                return True
        return False

    def _first_seq(self) -> int:
        """The seq older pages end before: the first entry held (after the newest seen, if none)."""
        return self._entries[0]["seq"] if self._entries else self.last_seq + 1

    def prepend(self, before: int, entries: list[dict[str, Any]], more: bool) -> None:
        """Put the page asked for before ``before`` above what is shown, keeping the lines in view
        where they were (a page no longer wanted is let go)."""
        if before != self._asked_before:
            return
        self._asked_before = None
        self._entries[:0] = [entry for entry in entries if entry["seq"] < before]
        self.more_before = more
        if self.following:
            self._trim()
        else:
            self._fit(first="bottom")
        self._redraw(keep_view=not self.following)

    def append_page(self, after: int, entries: list[dict[str, Any]], more: bool) -> None:
        """Put the page asked for after ``after`` below what is shown, keeping the lines in view
        where they were; once it reaches the newest entry seen, nothing is left out below."""
        if after != self._asked_after:
            return
        self._asked_after = None
        newer = [entry for entry in entries if after < entry["seq"] <= self.last_seq]
        self._entries.extend(newer)
        self.more_after = bool(newer) and newer[-1]["seq"] < self.last_seq
        self._fit(first="top")
        self._redraw(keep_view=True)

    def page_failed(self) -> None:
        """A page asked for did not come (the daemon refused, or went away): ask again later."""
        self._asked_before = self._asked_after = None

    def want_older(self) -> None:
        """Ask for the page before the first entry held, once at a time, if there is one."""
        if self.more_before and self._asked_before is None:
            self._asked_before = self._first_seq()
            self.post_message(self.Older(self._asked_before))

    def want_newer(self) -> None:
        """Ask for the page after the last entry held, once at a time, if one was let go."""
        if self.more_after and self._asked_after is None and self._entries:
            self._asked_after = self._entries[-1]["seq"]
            self.post_message(self.Newer(self._asked_after))

    def hold(self) -> None:
        """The person scrolls back (PgUp, Home, the wheel): stop following now, before the scroll
        is drawn, so nothing that scrolls to the end in between (a draw, a refresh) undoes it."""
        if self.max_scroll_y > 0 or self.scroll_y > 0:
            self.following = False

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.hold()

    def on_resize(self, event: events.Resize) -> None:
        """A new width wraps every line again (after the log's own handler has learnt its size)."""
        if self._wrapped_at and event.size.width != self._wrapped_at:
            self.call_after_refresh(self._redraw, not self.following)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if self._redrawing:
            return  # the lines are drawn again: the person did not scroll
        if new <= 0 < old:
            self.want_older()
        if new < old and new < self.max_scroll_y:
            self.following = False  # the person scrolled up: stay here
        elif new >= self.max_scroll_y and self.more_after:
            self.want_newer()  # the end of what it holds, not of the timeline
        elif new >= self.max_scroll_y:
            self.following = True

    def watch_following(self, following: bool) -> None:
        if following:
            self.unread = 0
        self.post_message(self.Unread(self.unread))

    def watch_unread(self, count: int) -> None:
        self.post_message(self.Unread(count))

    def watch_stamped(self) -> None:
        self._redraw(keep_view=not self.following)

    def watch_unfolded(self) -> None:
        self._redraw(keep_view=not self.following)

    def follow(self) -> None:
        """Back to the tail, and follow it again (End). When entries were let go below, what is
        held goes too, and the tail is read again from the daemon (``Older``, before the newest)."""
        let_go = self.more_after
        if let_go:
            self._forget()
            self.more_before, self.more_after = True, False
            self._asked_before = self._asked_after = None
        self.following = True
        self._to_end()
        if let_go:
            self.want_older()

    def restyle(self, palette: Palette) -> None:
        """Draw every entry again in a new theme's colours."""
        self._palette = palette
        self._redraw(keep_view=not self.following)

    def _redraw(self, keep_view: bool) -> None:
        """Draw every entry held again; with ``keep_view`` the line at the top of the view stays
        there (the same entry, as far into it), else the view goes to the end."""
        anchor = self._anchor() if keep_view else None
        following, self._redrawing = self.following, True
        self._undrawn.clear()  # every entry is drawn here
        self._drawn.clear()
        self._waiting.clear()
        self.clear()
        for entry in self._entries:
            self._write(entry)
        if anchor is not None:
            seq, offset = anchor
            line = next((line for drawn, line in self._drawn if drawn >= seq), len(self.lines))
            self.scroll_to(y=line + offset, animate=False, immediate=True)
        else:
            self._to_end()
        self._redrawing = False
        self.following = following

    def _anchor(self) -> tuple[int, int] | None:
        """The entry whose line is at the top of the view, and how far into it."""
        if not self._drawn:
            return None
        seq, line = self._drawn_at(self.scroll_offset.y)
        return seq, max(self.scroll_offset.y - line, 0)

    def _to_end(self) -> None:
        """The last line in view now, not after the next refresh: a Home or PgUp pressed in
        between must not be undone by it."""
        self.scroll_end(animate=False, immediate=True, x_axis=False)

    def _write(self, entry: dict[str, Any]) -> None:
        if self._palette is None:
            return
        if entry["kind"] == "message":
            if self._delivered(entry):
                return
            self._waiting[entry["seq"]] = entry
        text = entry_text(entry, self._palette, self.stamped, self.unfolded)
        if text is None:
            return
        self._wrapped_at = self.size.width
        self._drawn.append((entry["seq"], len(self.lines)))
        self.write(text, scroll_end=False)
