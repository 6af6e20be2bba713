"""``d`` on a job: its changes against its base (the daemon's ``diff`` op, every page read), the
changed files and their counts on the left, the selected file's diff in colour on the right.

A job still at work (or one that just stopped working) is read again every REFRESH_SECONDS by
the screen's own timer; a diff that did not change is not drawn again, so the place you read
in stays put. A job with no worktree of its own opens nothing: the screen that asked says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.syntax import Syntax
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.reactive import reactive
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from roost.client import ClientError
from roost.config import Config
from roost.models import STOPPABLE_STATES, Row, State
from roost.text import safe_text
from roost.tui.daemon_link import DaemonLink, LinkUpdate
from roost.tui.roost_screen import RoostScreen, plural

#: Seconds between reads of the diff of a job that is still working.
REFRESH_SECONDS = 3.0
#: The most characters of diff the view reads (whole pages); the rest is left to ``roost diff``.
MAX_TEXT = 4 * 1024 * 1024
_FILE_START = re.compile(r"(?m)^(?=diff --git )")


@dataclass(frozen=True)
class FileDiff:
    """One changed file: its path as ``git diff --numstat`` gives it, its counts (None: binary)
    and its part of the diff text."""

    path: str
    added: int | None
    deleted: int | None
    text: str


def split_diff(files: list[dict[str, Any]], text: str) -> tuple[FileDiff, ...]:
    """Each listed file with its part of ``text``. The daemon lists files in the order the diff
    holds them, so the parts go in order; when the counts disagree (a list cut at FILES_MAX, a
    diff cut at MAX_TEXT) a part is found by the ``b/PATH`` of its header instead."""
    parts = [part for part in _FILE_START.split(text) if part.startswith("diff --git ")]
    by_header = {part.split("\n", 1)[0].rsplit(" b/", 1)[-1]: part for part in parts}
    in_order = len(parts) == len(files)
    return tuple(FileDiff(str(f["path"]), f.get("added"), f.get("deleted"),
                          parts[i] if in_order else by_header.get(str(f["path"]), ""))
                 for i, f in enumerate(files))


def file_label(diff: FileDiff) -> Text:
    """``+12 -3  path`` (``bin`` for a binary file), the counts in the diff's own colours."""
    label = Text(no_wrap=True, overflow="ellipsis")
    if diff.added is None or diff.deleted is None:
        label.append(f"{'bin':>9}", style="dim")
    else:
        label.append(f"{'+' + str(diff.added):>4}", style="green")
        label.append(f" {'-' + str(diff.deleted):>4}", style="red")
    label.append(f"  {safe_text(diff.path)}")
    return label


def no_worktree(row: Row) -> str | None:
    """Why ``row``'s job has no diff to show (the daemon's rule: no branch of its own), or None."""
    if row.job.branch is None or row.job.repo is None:
        return (f"{row.job.title} [{row.id}] has no worktree of its own: its changes are not kept apart "
                "(spawn it with --worktree)")
    return None


def open_diff(screen: RoostScreen, row: Row) -> None:
    """Open ``row``'s diff view at once (keys typed behind ``d`` reach it), or say why not."""
    reason = no_worktree(row)
    if reason is not None:
        screen.status.say(reason)
        return
    screen.app.push_screen(DiffScreen(screen.link, screen.config, screen.clock, row))


class DiffScreen(RoostScreen):
    """A job's diff: a list of the changed files, and the selected one's diff beside it."""

    CSS_PATH = "diff_view.tcss"
    BINDINGS = [
        Binding("escape", "back", "back"),
        # Over the file list's own PgUp/PgDn: those keys scroll the diff, the arrows pick a file.
        Binding("pageup", "scroll_diff(-1)", "scroll", key_display="PgUp/PgDn", priority=True),
        Binding("pagedown", "scroll_diff(1)", "scroll", show=False, priority=True),
        Binding("r", "reload", "read again"),
        Binding("j", "move(1)", "down", show=False),
        Binding("k", "move(-1)", "up", show=False),
    ]

    #: The changed files with their parts of the diff, as last read.
    files: reactive[tuple[FileDiff, ...]] = reactive(())
    #: The path of the file whose diff is shown (None: nothing changed, or not read yet).
    selected: reactive[str | None] = reactive(None)

    def __init__(self, link: DaemonLink, config: Config, clock: Callable[[], float], row: Row) -> None:
        super().__init__(link, config, clock)
        self.row = row
        self.job_id = row.id
        #: Whether the diff has been read once; the plain text of the diff on the right.
        self.loaded = False
        self.shown = ""
        self._header: dict[str, Any] = {}
        self._more = ""
        #: The job's state when the diff was last read (one read more after it stops working).
        self._read_in: State | None = None
        self.topbar = Static(id="topbar")
        self.file_list = OptionList(id="diff-files")
        self.diff_text = Static(id="diff-text")
        self.pane = VerticalScroll(self.diff_text, id="diff-pane")

    def compose(self) -> ComposeResult:
        yield self.topbar
        with Horizontal(id="diff-body"):
            yield self.file_list
            yield self.pane
        yield from self.compose_bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.file_list.focus()
        self._draw_topbar()
        self.load()
        self.set_interval(REFRESH_SECONDS, self._refresh)  # the screen's: it ends when the screen goes

    # -- reading ----------------------------------------------------------------------------------------
    def _state(self) -> State | None:
        row = self.link.rows.get(self.job_id)
        return row.state if row is not None else None

    def _refresh(self) -> None:
        state = self._state()
        if state is None or state in STOPPABLE_STATES or state != self._read_in:
            self.load()

    @work(group="diff", exclusive=True)
    async def load(self) -> None:
        """Every page of the diff (up to MAX_TEXT), then the files and their parts."""
        state = self._state()
        try:
            page = await self.link.call("diff", job=self.job_id)
            text = page["text"]
            while page["next"] is not None and len(text) < MAX_TEXT:
                page = await self.link.call("diff", job=self.job_id, offset=page["next"], snapshot=page["snapshot"])
                text += page["text"]
        except ClientError as exc:
            self.status.say(exc.message, error=True)
            return
        self._read_in = state
        self._header = page
        cut = page["next"] is not None or page.get("cut", False)  # cut here, or by the daemon (DIFF_MAX)
        self._more = " · ".join(part for part in (
            f"{plural(page['files_more'], 'more file')} not listed" if page["files_more"] else "",
            f"the diff is cut after {len(text.encode()) // 1024:,} KB: roost diff {self.job_id} has it all" if cut else "",
        ) if part)
        self.files = split_diff(page["files"], text)
        self.loaded = True
        self._draw_topbar()
        self._show()

    def action_reload(self) -> None:
        self.load()

    # -- drawing -------------------------------------------------------------------------------------------
    def watch_files(self, files: tuple[FileDiff, ...]) -> None:
        """The list again, the selection kept on the same path while it is still there."""
        keep = self.selected
        paths = [f.path for f in files]
        self.file_list.clear_options()
        self.file_list.add_options([Option(file_label(f), id=f.path) for f in files])
        if files:
            self.file_list.highlighted = paths.index(keep) if keep in paths else 0
        self.selected = paths[self.file_list.highlighted or 0] if files else None

    @on(OptionList.OptionHighlighted, "#diff-files")
    def _highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.selected = event.option.id

    def watch_selected(self) -> None:
        self._show()

    def _show(self) -> None:
        """The selected file's diff, coloured as a diff (what an agent wrote never acts on the terminal)."""
        chosen = next((f for f in self.files if f.path == self.selected), None)
        if not self.loaded:
            text = ""
            self.diff_text.update(Text("reading the diff…", style="dim"))
        elif chosen is None:
            text = ""
            base = self._header.get("base")
            self.diff_text.update(Text(f"no changes against {base} yet", style="dim"))
        else:
            text = safe_text(chosen.text) if chosen.text else ""
            if text:
                dark = self.app.current_theme.dark
                self.diff_text.update(Syntax(text, "diff", theme="ansi_dark" if dark else "ansi_light",
                                             background_color="default", word_wrap=False))
            else:
                self.diff_text.update(Text(f"{chosen.path}: no text to show (binary, or past where the diff was cut)",
                                           style="dim"))
        if text != self.shown:
            self.pane.scroll_home(animate=False)
        self.shown = text

    def restyle(self) -> None:
        self.shown = ""  # drawn again in the new theme's colours
        self._show()

    def _draw_topbar(self) -> None:
        row = self.link.rows.get(self.job_id) or self.row
        bar = Text(no_wrap=True, overflow="ellipsis", end="")
        bar.append(f"diff · {safe_text(row.job.title)} [{row.id}]", style="bold")
        bar.append(f"  ·  {row.job.branch} against {row.job.base}")
        if self.loaded:
            added = sum(f.added or 0 for f in self.files)
            deleted = sum(f.deleted or 0 for f in self.files)
            bar.append(f"  ·  {plural(len(self.files), 'file')}  ")
            bar.append(f"+{added}", style="green")
            bar.append(" ")
            bar.append(f"-{deleted}", style="red")
        if row.state in STOPPABLE_STATES:
            bar.append(f"  ·  {row.state.value}: read again every {REFRESH_SECONDS:g}s", style="dim")
        if self._more:
            bar.append(f"  ·  {self._more}", style="dim")
        self.topbar.update(bar)

    def rows_changed(self, update: LinkUpdate) -> None:
        self._draw_topbar()  # the job's state: "read again every 3s" while it works

    # -- keys ------------------------------------------------------------------------------------------------
    def action_back(self) -> None:
        self.dismiss()

    def action_scroll_diff(self, pages: int) -> None:
        if pages < 0:
            self.pane.scroll_page_up(animate=False)
        else:
            self.pane.scroll_page_down(animate=False)

    def action_move(self, step: int) -> None:
        if step > 0:
            self.file_list.action_cursor_down()
        else:
            self.file_list.action_cursor_up()
