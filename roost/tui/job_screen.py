"""A job opened from the agent view or the subagent panel: its transcript, its subagents, a composer.

Its length is the panel's bindings and the composer's commands, one action each; reading the job
(job_feed.py), the panel's row keys (panel_keys.py), the job bar, the transcript, the panel, the
composer and the diff and provider views are modules of their own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding

from roost.config import Config
from roost.models import State
from roost.rules.attention import jump_order, next_attention
from roost.rules.provider_subagents import READ_ONLY_HINT, is_provider
from roost.rules.ticks import next_age_change, next_lifetime_end
from roost.rules.views import SUBAGENT_HINT, subagent_hint_visible, tree_running_ids
from roost.tui.approval_block import ApprovalBlock
from roost.tui.approval_keys import APPROVAL_KEYS
from roost.tui.approval_text import Approval, row_approvals
from roost.tui.composer import Composer
from roost.tui.daemon_link import DaemonLink, LinkUpdate
from roost.tui.diff_view import open_diff
from roost.tui.filter_box import FilterBox
from roost.tui.job_bar import JobBar
from roost.tui.job_feed import JobFeed
from roost.tui.panel_keys import PANEL_ACTIONS, READ_ONLY_ACTIONS, PanelKeys
from roost.tui.roost_screen import JobClosed, RoostScreen, plural, send_outcome
from roost.tui.subagent_panel import SubagentPanel
from roost.tui.transcript import Transcript

#: What ``/subagents ARG`` does: the panel mode to enter, or "stop".
SUBAGENT_COMMANDS = {"": "recent", "all": "all", "stop": "stop"}
#: The composer's commands, for the messages that list them.
COMPOSER_COMMANDS = "/subagents, /subagents all, /subagents stop, /stop or /diff"
#: Key names of printable keys that are not the character itself.
_KEY_CHARACTERS = {"slash": "/", "question_mark": "?"}


class JobScreen(JobFeed, PanelKeys, RoostScreen):
    """One job: what it said and did, its subagents, and a composer to write to it."""

    CSS_PATH = "job_screen.tcss"
    BINDINGS = [
        Binding("enter", "open_subagent", "open"),
        Binding("m", "message_subagent", "message"),
        Binding("x", "stop_or_hide", "stop / hide"),
        Binding("r", "rename_subagent", "rename"),
        Binding("K", "stop_subagents", "stop all", key_display="K K"),
        Binding("slash", "panel_filter", "filter"),
        Binding("g,home", "panel_edge(0)", "first", show=False),
        Binding("G,end", "panel_edge(-1)", "last", show=False),
        Binding("escape", "leave_panel", "leave panel"),
        Binding("up", "leave_panel", "leave panel", show=False),
        Binding("escape", "back", "back"),
        Binding("down", "enter_panel", "subagents", show=False),
        Binding("pageup", "scroll(-1)", "scroll", key_display="PgUp/PgDn"),
        Binding("pagedown", "scroll(1)", "scroll", show=False),
        Binding("home", "top", "top", show=False),
        Binding("end", "follow", "follow", key_display="End"),
        Binding("ctrl+t", "stamp", "times", key_display="^t"),
        Binding("ctrl+o", "unfold", "unfold", key_display="^o"),
        Binding("d", "diff_subagent", "diff"),
        # ``w`` where the focus takes no text (the panel, the approval block); Ctrl+N anywhere, the composer too.
        Binding("ctrl+n", "next_needing", "next needing you", key_display="^n"),
        Binding("w", "next_needing", "next needing you", show=False),
        # Last, so the footer keeps its order when no approval waits (keys already bound keep their place).
        Binding("up", "enter_block", "answer the request", key_display="↑"),
        Binding("escape,down", "leave_block", "back to the composer", key_display="esc"),
    ]

    def __init__(self, link: DaemonLink, config: Config, clock: Callable[[], float], job_id: str,
                 at: int | None = None, notice: str = "") -> None:
        super().__init__(link, config, clock)
        self.job_id = job_id
        #: What the status line says once the screen is up (the jump says why it opened this job).
        self.notice = notice
        #: The entry to open at (a search result), instead of the tail.
        self.at = at
        #: Whether the transcript has been read once.
        self.loaded = False
        #: Whether the timeline subscription is in place; entries streamed before wait in ``_early``.
        self._streaming = False
        self._early: list[dict[str, Any]] = []
        #: This screen's subscriptions on the current connection (its subtree, its timeline).
        self._subs: list[int] = []
        # Kept, not queried: the footer asks check_action even while the screen is taken down.
        self.jobbar = JobBar(id="jobbar")
        self.transcript = Transcript(id="transcript")
        self.panel = SubagentPanel(job_id, clock, config.finished_row_lifetime, id="panel")
        self.filter_box = FilterBox(id="panel-filter")
        self.approval_block = ApprovalBlock(id="approval")
        self.composer = Composer(placeholder="message this job · /subagents · /subagents all · /subagents stop · /stop",
                                 id="composer")
        #: Titles from the root down to this job's parent (the breadcrumb), read once on open.
        self.path: list[str] = []

    def compose(self) -> ComposeResult:
        yield self.jobbar
        yield self.transcript
        yield self.filter_box
        yield self.panel
        yield self.approval_block
        yield self.composer
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.restyle()
        self.set_focus(self.composer)
        if self.notice:
            self.status.say(self.notice)
        self.follow()

    def on_unmount(self) -> None:
        self.app.post_message(JobClosed(self.job_id, tuple(self._subs)))

    @on(Transcript.Older)
    def _older(self, message: Transcript.Older) -> None:
        self._read_older(message.before)

    @on(Transcript.Newer)
    def _newer(self, message: Transcript.Newer) -> None:
        self._read_newer(message.after)

    # -- keeping it current ------------------------------------------------------------------------
    def rows_changed(self, update: LinkUpdate) -> None:
        mine = [entry for entry in update.entries if entry["job"] == self.job_id]
        if mine:
            if self._streaming:
                self.transcript.add(mine)
                self.panel.take_entries(mine)
            else:
                self._early.extend(mine)
        if update.rows:
            self.panel.show_rows(self.link.rows, update.rows)  # the panel's tree takes those rows alone
            self._after_change()

    def tick(self) -> None:
        self.panel.recompute()
        self._after_change()

    def next_change(self, now: float) -> float | None:
        """The job bar's and the panel's ages, and the end of the lifetime of a recent row below
        this job (it leaves the panel, or the footer hint goes)."""
        own = self.link.rows.get(self.job_id)
        shown = [line.row for line in self.panel.lines] + ([own] if own is not None else [])
        changes = (next_age_change(shown, now),
                   next_lifetime_end(self.panel.row_tree.below(self.job_id), now,
                                     self.config.finished_row_lifetime))
        return min((change for change in changes if change is not None), default=None)

    def restyle(self) -> None:
        assert self.palette is not None
        self.panel.palette = self.palette
        self.transcript.restyle(self.palette)
        self.panel.show_rows(self.link.rows)
        self._after_change()

    def _after_change(self) -> None:
        if self.transcript.following:  # the panel may have grown: keep the end in view
            self.call_after_refresh(self._keep_end)
        if self.focused is self.panel and not self.panel.lines:
            self.action_leave_panel()
        # The panel's tree: this job's subtree and its agent's own subagents, not every row held.
        hint = subagent_hint_visible(self.panel.row_tree, self.job_id, self.clock(), self.config.finished_row_lifetime)
        unread = self.transcript.unread
        line = self.panel.selected() if self.focused is self.panel else None
        self.status.hint = (f"↓ {unread} new · End follows" if unread
                            else READ_ONLY_HINT if line is not None and is_provider(line.row)
                            else SUBAGENT_HINT if hint and self.panel.mode == "normal" else "")
        row = self.link.rows.get(self.job_id)
        self.composer.subagents_below = row is not None and (row.descendants > 0 or bool(self.panel.provider))
        self.composer.restarts = row is not None and row.state is State.STOPPED
        self._show_approvals(row_approvals(row) if row is not None else ())
        self._draw_jobbar()
        self.refresh_bindings()

    def _show_approvals(self, approvals: tuple[Approval, ...]) -> None:
        """The block above the composer, the composer's hint, and what each place shows since when
        (a key answers what was on screen when it was made)."""
        if self.palette is not None:
            self.approval_block.show(approvals, self.palette, {row.id: row.job.title for row in self.panel.provider})
        self.composer.denies = bool(approvals)
        if self.focused is self.approval_block and not approvals:
            self.set_focus(self.composer)
        now = time.monotonic()
        self.shown.show("block", approvals[0] if approvals else None, now)
        for line in self.panel.lines:
            self.shown.show(line.row.id, next(iter(self.panel.approvals_of(line.row)), None), now)
        self.shown.keep(["block", *(line.row.id for line in self.panel.lines)])

    def answer_place(self) -> str | None:
        """The approval block, or the selected panel row, when it shows an approval and has the focus."""
        if self.focused is self.approval_block and self.approval_block.shown is not None:
            return "block"
        line = self.panel.selected() if self.focused is self.panel else None
        return line.row.id if line is not None and self.panel.approvals_of(line.row) else None

    def _keep_end(self) -> None:
        """The end in view, unless the person scrolled away since it was asked (Home, PgUp)."""
        if self.transcript.following:
            self.transcript.scroll_end(animate=False, immediate=True)

    def _draw_jobbar(self) -> None:
        row = self.link.rows.get(self.job_id)
        if row is not None and self.palette is not None:
            self.jobbar.show(row, self.path, self.palette, self.clock(), self.jobbar.content_size.width or self.size.width)

    def on_resize(self) -> None:
        self._draw_jobbar()

    # -- keys ----------------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        in_panel = self.focused is self.panel
        if action == "enter_block":
            return self.focused is self.composer and self.approval_block.shown is not None
        if action == "leave_block":
            return self.focused is self.approval_block
        if action in PANEL_ACTIONS:
            line = self.panel.selected() if in_panel else None
            if line is not None and is_provider(line.row) and action in READ_ONLY_ACTIONS:
                return None  # shown, greyed: the agent's own subagent takes no message, no rename
            return in_panel
        if action == "back":
            return not in_panel and self.focused is not self.approval_block
        if action == "enter_panel":
            return self.focused is self.composer
        if action == "follow":
            return not self.transcript.following
        return super().check_action(action, parameters)

    def single_press_keys(self) -> frozenset[str]:
        """In the panel, its letter keys act only alone: typed in a burst they are text."""
        if self.focused is self.approval_block:
            return APPROVAL_KEYS | {"?", "w"}
        if self.focused is not self.panel:
            return frozenset()
        return PANEL_KEYS | APPROVAL_KEYS | {"?", "w"}

    def take_text(self, text: str) -> bool:
        """Typing in the panel or the approval block leaves it; the text goes to the composer, whole."""
        if self.focused is self.panel:
            self.action_leave_panel()
        self.composer.insert_text_at_cursor(" ".join(text.splitlines()))
        self.composer.focus()
        return True

    def action_enter_panel(self, mode: str = "recent") -> None:
        """Select the panel (``↓``, ``/subagents``, ``/subagents all``); it lists more in these modes."""
        panel = self.panel
        panel.mode = mode
        if not panel.lines:
            panel.mode = "normal"
            self.status.say("no subagents to show: /subagents all lists every one it ever had")
            return
        panel.select_first()
        self.set_focus(panel)  # now, so keys right behind this one already go to the panel
        self._after_change()

    def action_leave_panel(self) -> None:
        self.panel.mode = "normal"
        self.panel.cursor = None
        self.set_focus(self.composer)
        self._after_change()

    def action_back(self) -> None:
        self.dismiss()

    def action_enter_block(self) -> None:
        """``↑`` from the composer: select the approval block, where ``y`` ``Y`` ``N`` answer it."""
        self.set_focus(self.approval_block)
        self.focus_since = time.monotonic()  # now, not when the focus event comes: keys behind ↑ are no answer
        self.refresh_bindings()

    def action_leave_block(self) -> None:
        self.set_focus(self.composer)
        self.refresh_bindings()

    def action_scroll(self, pages: int) -> None:
        """A page up or down, at once: an animated scroll goes on moving after the key (on a busy
        machine for many frames), and a second PgUp in a burst would start from halfway."""
        if pages < 0:
            self.transcript.hold()
            if self.transcript.scroll_y <= 0:
                self.transcript.want_older()
            self.transcript.scroll_page_up(animate=False)
        else:
            if self.transcript.scroll_y >= self.transcript.max_scroll_y:
                self.transcript.want_newer()
            self.transcript.scroll_page_down(animate=False)

    def action_top(self) -> None:
        """The transcript's first line (older pages load as it gets there)."""
        self.transcript.hold()
        self.transcript.scroll_home(animate=False, immediate=True)
        self.transcript.want_older()

    def action_follow(self) -> None:
        self.transcript.follow()

    def action_stamp(self) -> None:
        """Timestamps on each entry, or off again."""
        self.transcript.stamped = not self.transcript.stamped

    def action_unfold(self) -> None:
        """Long outputs whole, or folded again."""
        self.transcript.unfolded = not self.transcript.unfolded

    def open_job(self, job_id: str, notice: str = "") -> None:
        self.app.push_screen(JobScreen(self.link, self.config, self.clock, job_id, notice=notice))

    def action_next_needing(self) -> None:
        """``w`` (``Ctrl+N`` in the composer): open the next job that needs you, the most urgent kind
        first (roost/rules/attention.py). In the panel, the next of its rows, over this screen; elsewhere
        the next of every job the app holds after this one, in this screen's place."""
        if self.focused is self.panel:
            found = next_attention([line.row for line in self.panel.lines], self.panel.cursor)
            if found is None:
                self.status.say("no subagent needs you")
                return
            row, kind = found
            self.panel.cursor = row.id
            if is_provider(row):
                self.action_open_subagent()
            else:
                self.open_job(row.id, f"{kind.word}: {row.job.title}")
            return
        found = next_attention(jump_order(self.link.rows.values()), self.job_id)
        if found is None or found[0].id == self.job_id:
            self.status.say("no other job needs you" if found else "no job needs you")
            return
        row, kind = found
        self.app.switch_screen(JobScreen(self.link, self.config, self.clock, row.id,
                                         notice=f"{kind.word}: {row.job.title}"))

    @on(Transcript.Unread)
    def _unread(self) -> None:
        self._after_change()

    def _running_ids(self) -> list[str]:
        """The running rows of the tree, and this job when subagents of its agent's own run: they stop
        with it (a stop of the job's agent stops them, its turn too if one runs)."""
        row = self.link.rows.get(self.job_id)
        own = [self.job_id] if row is not None and row.job.provider_running else []
        return tree_running_ids(self.link.rows.values(), self.job_id) + own

    def action_stop_subagents(self) -> None:
        running = self._running_ids()
        if not running:
            self.status.say("no subagent is running")
            return
        self.stop_twice(self.job_id, f"{plural(len(running), 'running subagent')}", self._stop_subagents)

    @work(group="requests")
    async def _stop_subagents(self) -> None:
        """Stop every running row of the tree, nested ones too, as they are now; say how many."""
        ids = self._running_ids()
        results = await asyncio.gather(*(self.link.call("stop", job=job_id) for job_id in ids),
                                       return_exceptions=True)
        stopped = sum(result.get("subagents", 0) if job_id == self.job_id else result["stopped"]
                      for job_id, result in zip(ids, results) if isinstance(result, dict))
        self.status.say(f"stopped {plural(stopped, 'subagent')}")

    # -- what the composer and the panel ask for ------------------------------------------------------
    @on(Composer.Send)
    def _send(self, message: Composer.Send) -> None:
        row = self.link.rows.get(self.job_id)
        if row is not None:
            self.request("send", {"job": self.job_id, "text": message.text},
                         lambda result: send_outcome(row, result))

    @on(Composer.Command)
    def _command(self, message: Composer.Command) -> None:
        if message.name == "stop" and not message.argument:
            self.request("stop", {"job": self.job_id}, lambda result: (
                "this job was not running" if not result["stopped"] else "stopped this job" + (
                    f" and {plural(result['subagents'], 'subagent')} of its agent's own" if result.get("subagents")
                    else "")))
            return
        if message.name == "diff" and not message.argument:
            row = self.link.rows.get(self.job_id)
            if row is not None:
                open_diff(self, row)
            return
        what = SUBAGENT_COMMANDS.get(message.argument) if message.name == "subagents" else None
        if what is None:
            self.status.say(f"unknown command /{message.name} {message.argument}".rstrip()
                            + f": try {COMPOSER_COMMANDS}", error=True)
        elif what == "stop":
            if self._running_ids():
                self._stop_subagents()
            else:
                self.status.say("no subagent is running")
        else:
            self.action_enter_panel(what)

    @on(SubagentPanel.Moved)
    def _panel_moved(self) -> None:
        self._after_change()

    @on(FilterBox.Changed, "#panel-filter")
    def _filter_changed(self, event: FilterBox.Changed) -> None:
        self.panel.filter_text = event.value.strip()

    @on(FilterBox.Done)
    def _filter_done(self, event: FilterBox.Done) -> None:
        self.filter_box.set_class(not event.cleared and bool(self.panel.filter_text), "-open")
        if self.panel.lines:
            self.panel.select_first()
            self.set_focus(self.panel)
        else:
            self.action_leave_panel()



#: The panel's letter keys, from the bindings: each acts only when pressed alone (docs/keys.md).
PANEL_KEYS = frozenset(_KEY_CHARACTERS.get(key, key) for b in JobScreen.BINDINGS if isinstance(b, Binding)
                       and b.action.split("(")[0] in PANEL_ACTIONS for key in b.key.split(",")
                       if len(_KEY_CHARACTERS.get(key, key)) == 1)
