"""How the job screen reads its job: it opens it (which resumes a closed one), subscribes to its
subtree and timeline, and pages the timeline in as the transcript asks, above or below what it holds.

Tail first: the transcript starts from the newest page and follows from its last entry, so none
falls between; after a reconnect it goes on from the last entry shown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import work

from roost.client import ClientError
from roost.tui.daemon_link import LinkUpdate, safe_row

if TYPE_CHECKING:
    from roost.tui.roost_screen import RoostScreen
    from roost.tui.subagent_panel import SubagentPanel
    from roost.tui.transcript import Transcript

    _Base = RoostScreen
else:
    _Base = object

#: Entries shown above the one a search result opens at (scrolling up reads the rest).
OPEN_AT_ABOVE = 5


class JobFeed(_Base):
    """The reading side of a job screen: ``job_id``'s transcript and panel, fed from the daemon."""

    job_id: str
    at: int | None
    loaded: bool
    transcript: Transcript
    panel: SubagentPanel
    _streaming: bool
    _early: list[dict[str, Any]]
    _subs: list[int]

    if TYPE_CHECKING:
        def rows_changed(self, update: LinkUpdate) -> None: ...

    @work(group="load", exclusive=True)
    async def follow(self) -> None:
        """Open the job (which resumes a closed one) and subscribe to its subtree and timeline.

        The first time, the transcript starts from the newest page of the log and the timeline
        is followed from its last entry, so none falls between; after a reconnect it goes on
        from the last entry shown (a gap too big for one snapshot starts from the newest page, or,
        while the person reads further up, is left for the transcript to page in below)."""
        self._subs, self._streaming = [], False
        try:
            await self.link.call("attach", job=self.job_id, resume=True)  # opening a job resumes it
            await self.link.call("seen", job=self.job_id)  # and shows it to a person: its mark goes for every client
            sub, _, update = await self.link.subscribe("subtree", job=self.job_id)
            self._subs.append(sub["sub"])
            own = await self.link.call("show", job=self.job_id)
            update.rows |= self.link.hold(sub["sub"], [own], newer=False).rows
            self.path = await self._path_to_root(own.get("parent"))
            if not self.loaded and self.at is not None:  # a search result: the entry, and a few before it
                above = await self.link.call("logs", job=self.job_id, before=self.at, limit=OPEN_AT_ABOVE)
                page = await self.link.call("logs", job=self.job_id, after=self.at - 1)
                self.transcript.start_at(above["entries"], page["entries"], above["more"], page["more"])
                self.panel.take_entries([*above["entries"], *page["entries"]])
            elif not self.loaded:
                page = await self.link.call("logs", job=self.job_id)
                self.transcript.start(page["entries"], page["more"])
                self.panel.take_entries(page["entries"])
            result, entries, _ = await self.link.subscribe("timeline", job=self.job_id, after=self.transcript.last_seq)
            self._subs.append(result["sub"])
            if result.get("skipped") and not self.transcript.following:
                self.transcript.missed()  # the person reads further up: what was missed pages in below
            elif result.get("skipped"):
                page = await self.link.call("logs", job=self.job_id)
                self.transcript.start(page["entries"], page["more"])
        except ClientError as exc:
            self.status.say(exc.message, error=True)
            return
        self.transcript.add(entries)
        self.transcript.add(self._early)  # what streamed in while the log was on its way
        self.panel.take_entries([*entries, *self._early])
        self._early.clear()
        self.loaded = self._streaming = True
        self.rows_changed(update)

    async def _path_to_root(self, parent: str | None) -> list[str]:
        """The titles of every job above this one, root first (rows the app holds, else ``show``)."""
        titles: list[str] = []
        seen: set[str] = set()
        while parent is not None and parent not in seen:
            seen.add(parent)
            row = self.link.rows.get(parent) or safe_row(await self.link.call("show", job=parent))
            titles.append(row.job.title)
            parent = row.parent
        return titles[::-1]

    @work(group="older", exclusive=True)
    async def _read_older(self, before: int) -> None:
        """The page of the timeline before ``before``, above what the transcript shows."""
        page = await self._logs_page(before=before)
        if page is not None:
            self.transcript.prepend(before, page["entries"], page["more"])
            self.panel.take_entries(page["entries"])

    @work(group="newer", exclusive=True)
    async def _read_newer(self, after: int) -> None:
        """The page of the timeline after ``after``, below what the transcript shows (it let
        those entries go while the person read further up)."""
        page = await self._logs_page(after=after)
        if page is not None:
            self.transcript.append_page(after, page["entries"], page["more"])

    async def _logs_page(self, **where: int) -> dict[str, Any] | None:
        """A page of this job's timeline the transcript asked for; None when it did not come
        (the status line says why, and the transcript may ask again)."""
        try:
            return await self.link.call("logs", job=self.job_id, **where)
        except ClientError as exc:
            self.transcript.page_failed()
            self.status.say(exc.message, error=True)
            return None
