"""The supervisor: every job's lifecycle — spawn, turns, messages, stops, reports, closing, resuming.

It is the only writer of job records and timelines. Each change is committed to the store before
it is acknowledged or pushed. All lifecycle changes of one job run under that job's lock, so a
message racing the reaper is never lost and never makes two workers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from roost.config import Config, ConfigError
from roost.drivers import driver_for
from roost.drivers.base import DriverError, LaunchContext
from roost.daemon.store import Store
from roost.daemon.worker import Worker, describe_exit
from roost.models import (ACTIVE_STATES, LIFETIMES, STOPPABLE_STATES, TURN_STATES, Job, Row, State)
from roost.paths import Paths
from roost.protocol import REPORT_STATUSES, ErrorCode, ProtocolError
from roost.rules.lifecycle import (WorkerFacts, auto_close_due, reap_due, report_action,
                                   reports_opted_out)

log = logging.getLogger("roost.daemon")

ID_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"
#: The state a turn leaves the job in, by what it reported ("idle", or no report, is IDLE).
REPORT_STATES = {"done": State.DONE, "blocked": State.BLOCKED}
PROMPT_TIMEOUT = 10.0
ABORT_TIMEOUT = 5.0


class Subscriber(Protocol):
    """A client connection that receives pushed events."""

    conn_id: int

    def push(self, frame: dict[str, Any]) -> None: ...


@dataclass
class Live:
    """What the daemon holds in memory for a job: its worker and the turn in flight."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    worker: Worker | None = None
    token: str = ""
    run: int = 0
    in_turn: bool = False
    starting: bool = False
    closing: bool = False
    close_reason: str = ""
    idle_since: float | None = None
    last_report_at: float | None = None
    done_at: float | None = None
    turn_report: tuple[str, str] | None = None
    #: What started the turn in flight ("prompt" or "reports") and the state before it.
    turn_kind: str = "prompt"
    state_before: State | None = None
    text_before: str = ""
    held_since: float | None = None


def report_message(reports: list[dict[str, Any]], jobs: dict[str, Job]) -> str:
    """The prompt that carries children's reports to their parent (format in docs/protocols.md)."""
    blocks = []
    for rep in reports:
        child = jobs.get(rep["child"])
        title = child.title if child else rep["child"]
        kind = "question" if rep["question"] else "report"
        body = rep["text"].replace("</roost-report", "&lt;/roost-report")  # the block's end stays unique
        blocks.append(f'<roost-report child="{rep["child"]}" title="{_attr(title)}" state="{rep["state"]}" '
                      f'kind="{kind}">\n{body}\n</roost-report>')
    return "\n".join(blocks)


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace("\n", " ")


def _title_from(prompt: str) -> str:
    first = next((line.strip() for line in prompt.splitlines() if line.strip()), "job")
    return first if len(first) <= 60 else first[:59] + "…"


class Supervisor:
    def __init__(self, store: Store, paths: Paths, config: Callable[[], Config],
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.paths = paths
        self._config = config
        self.clock = clock
        self.jobs: dict[str, Job] = {}
        self.children: dict[str, set[str]] = {}
        self.live: dict[str, Live] = {}
        self.subscribers: dict[int, Subscriber] = {}
        self.attachments: dict[str, set[int]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._queued_spawns: list[str] = []
        self._recovered_failures: list[Job] = []
        self._closing_down = False

    @property
    def config(self) -> Config:
        return self._config()

    # -- bookkeeping ------------------------------------------------------------------------------
    def _spawn_task(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    def _live(self, job_id: str) -> Live:
        return self.live.setdefault(job_id, Live())

    def _index(self, job: Job) -> None:
        self.jobs[job.id] = job
        if job.parent:
            self.children.setdefault(job.parent, set()).add(job.id)

    def _kids(self, job_id: str, archived: bool = False) -> list[Job]:
        kids = [self.jobs[c] for c in self.children.get(job_id, ()) if c in self.jobs]
        return kids if archived else [k for k in kids if k.archived_at is None]

    def _descendants(self, job_id: str) -> list[Job]:
        out: list[Job] = []
        stack = [job_id]
        while stack:
            for kid in self._kids(stack.pop()):
                out.append(kid)
                stack.append(kid.id)
        return out

    def _ancestors(self, job: Job) -> list[Job]:
        out: list[Job] = []
        seen = {job.id}
        while job.parent and job.parent in self.jobs and job.parent not in seen:
            job = self.jobs[job.parent]
            seen.add(job.id)
            out.append(job)
        return out

    def check_caller(self, caller: str | None, job: Job, what: str) -> None:
        """A job acting through its tools may act on itself and on its own subtree only;
        a person (no job) may act on anything."""
        if caller is None or caller == job.id or any(a.id == caller for a in self._ancestors(job)):
            return
        raise ProtocolError(ErrorCode.AUTH, f"job {caller} may not {what} {job.id}: only its owner may")

    def get(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise ProtocolError(ErrorCode.UNKNOWN_JOB, f"no job with id {job_id!r}")
        return job

    def _new_id(self) -> str:
        for length in (4, 5, 6, 8):
            for _ in range(20):
                job_id = "".join(secrets.choice(ID_ALPHABET) for _ in range(length))
                if job_id not in self.jobs:
                    return job_id
        raise RuntimeError("could not find a free job id")

    def _facts(self, job: Job) -> WorkerFacts:
        live = self._live(job.id)
        queued = len(self.store.pending_messages(job.id)) if live.worker else 0
        return WorkerFacts(
            up=live.worker is not None, in_turn=live.in_turn,
            busy=live.starting or live.closing, attached=bool(self.attachments.get(job.id)),
            queued=queued, idle_since=live.idle_since, last_report_at=live.last_report_at,
            done_at=live.done_at,
            owner_up=job.parent is not None and self._live(job.parent).worker is not None)

    # -- what clients see -------------------------------------------------------------------------
    def parent_open(self, job: Job) -> bool:
        if job.parent is None:
            return True
        parent = self.jobs.get(job.parent)
        if parent is None or parent.archived_at is not None:
            return False
        return self._live(parent.id).worker is not None or bool(self.attachments.get(parent.id))

    def row(self, job: Job, counts: tuple[int, int] | None = None) -> Row:
        if counts is None:
            desc = self._descendants(job.id)
            counts = (len(desc), sum(d.state in ACTIVE_STATES for d in desc))
        return Row(job=job, parent_open=self.parent_open(job), attached=bool(self.attachments.get(job.id)),
                   descendants=counts[0], running_descendants=counts[1])

    def _all_counts(self) -> dict[str, tuple[int, int]]:
        """(descendants, running descendants) of every job in one pass, deepest first."""
        counts: dict[str, list[int]] = {j: [0, 0] for j in self.jobs}
        for job in sorted(self.jobs.values(), key=lambda j: -j.depth):
            if job.archived_at is not None or job.parent not in counts:
                continue
            mine, up = counts[job.id], counts[job.parent]
            up[0] += mine[0] + 1
            up[1] += mine[1] + (job.state in ACTIVE_STATES)
        return {j: (c[0], c[1]) for j, c in counts.items()}

    def rows(self, archived: bool = False) -> list[dict[str, Any]]:
        jobs = sorted(self.jobs.values(), key=lambda j: (j.created_at, j.id))
        counts = self._all_counts()
        return [self.row(j, counts[j.id]).to_wire() for j in jobs if archived or j.archived_at is None]

    def _push(self, frame: dict[str, Any]) -> None:
        for sub in list(self.subscribers.values()):
            sub.push(frame)

    def _push_rows(self, job: Job, with_children: bool = False) -> None:
        if not self.subscribers:
            return
        targets = [job, *self._ancestors(job)]
        if with_children:
            targets += self._kids(job.id)
        for target in targets:
            self._push({"event": "row", "row": self.row(target).to_wire()})

    def _timeline(self, job: Job, kind: str, **data: Any) -> dict[str, Any]:
        entry = self.store.add_timeline(job.id, kind, data, self.clock())
        if self.subscribers:
            self.store.after_commit(lambda: self._push({"event": "timeline", "entry": entry}))
        return entry

    def _save(self, job: Job) -> None:
        job.updated_at = self.clock()
        self.store.save_job(job)

    def _set_state(self, job: Job, state: State, **data: Any) -> None:
        if job.state != state:
            job.state = state
            job.state_since = self.clock()
            self._timeline(job, "state", state=state.value, **data)

    # -- start-up and shutdown ---------------------------------------------------------------------
    def recover(self) -> None:
        """Load every record; no job may claim a worker that did not survive the last daemon."""
        for job in self.store.jobs():
            self._index(job)
        started = self.clock()
        lost: list[Job] = []
        with self.store.transaction():
            for job in self.jobs.values():
                if job.pid is not None:
                    _kill_stale_worker(job)
                    job.pid = None
                    job.reaped = True
                    if job.state in TURN_STATES:
                        self._set_state(job, State.FAILED, reason="the daemon restarted while its turn ran")
                        self._timeline(job, "error", message="worker lost: the daemon restarted during the turn")
                    else:
                        self._timeline(job, "closed", reason="the daemon restarted")
                    self._save(job)
                elif job.state == State.STARTING and job.archived_at is None:
                    self._queued_spawns.append(job.id)
                elif job.state == State.WORKING:
                    self._set_state(job, State.FAILED, reason="no worker after a restart")
                    self._save(job)
                if job.state == State.FAILED and job.state_since >= started:
                    lost.append(job)
        self._recovered_failures = lost

    def after_recovery(self) -> None:
        """Once the event loop runs: start queued spawns, tell parents about children the restart
        failed, and deliver (or wake for) reports left in the outbox."""
        for job in self._recovered_failures:
            self._route_report(job, State.FAILED, self._last_error(job))
        self._recovered_failures = []
        for parent_id in self.store.parents_with_reports():
            if parent_id in self.jobs:
                self._dispatch_reports(self.jobs[parent_id])
        self._start_queued()

    async def shutdown(self) -> None:
        """Close every worker on purpose (records say reaped, nothing is marked failed)."""
        self._closing_down = True
        closers = []
        for live in self.live.values():
            if live.worker is not None:
                live.closing = True
                live.close_reason = "the daemon shut down"
                closers.append(self._shut(live.worker, abort_first=live.in_turn))
        if closers:
            await asyncio.gather(*closers, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()

    @staticmethod
    async def _shut(worker: Worker, abort_first: bool) -> None:
        """Abort a turn in flight first, so the agent saves what it has (closing stdin mid-stream
        loses pi's partial answer), then close."""
        if abort_first:
            try:
                await worker.request("abort", timeout=2.0)
            except (asyncio.TimeoutError, ConnectionError):
                pass
        await worker.close(grace=2.0)

    # -- spawning ---------------------------------------------------------------------------------
    async def spawn(self, args: dict[str, Any], caller: str | None) -> dict[str, Any]:
        config = self.config
        parent_id = caller if caller is not None else args.get("parent")
        parent = self.get(parent_id) if parent_id else None
        if parent is not None and parent.archived_at is not None:
            raise ProtocolError(ErrorCode.ARCHIVED, f"parent {parent.id} is archived")
        depth = parent.depth + 1 if parent else 0
        if depth > config.max_depth:
            raise ProtocolError(ErrorCode.DEPTH, f"spawning under {parent_id} would be depth {depth}, over "
                                                 f"max_depth = {config.max_depth}")
        driver_name = args.get("driver") or config.default_driver
        try:
            profile = config.driver(driver_name)
        except ConfigError as exc:
            raise ProtocolError(ErrorCode.DRIVER, exc.message) from None
        try:
            driver_for(profile.kind).check(profile.options)
        except DriverError as exc:
            raise ProtocolError(ErrorCode.DRIVER, str(exc)) from None
        lifetime = args.get("lifetime") or profile.lifetime or "task"
        if lifetime not in LIFETIMES:
            raise ProtocolError(ErrorCode.BAD_ARGS, f"lifetime {lifetime!r} is not one of {', '.join(LIFETIMES)}")
        cwd = args.get("cwd") or (parent.cwd if parent else os.getcwd())
        if not os.path.isdir(cwd):
            raise ProtocolError(ErrorCode.BAD_ARGS, f"working directory {cwd} does not exist")
        labels = {str(k): str(v) for k, v in (args.get("labels") or {}).items()}
        now = self.clock()
        job = Job(id=self._new_id(), title=args.get("title") or _title_from(args["prompt"]), driver=driver_name,
                  cwd=os.path.abspath(cwd), parent=parent.id if parent else None, state=State.STARTING,
                  state_since=now, created_at=now, updated_at=now, labels=labels, lifetime=lifetime, depth=depth,
                  driver_opts=profile.to_dict())
        self._index(job)
        with self.store.transaction():
            self._save(job)
            self._timeline(job, "spawned", parent=job.parent, driver=driver_name, lifetime=lifetime,
                           by=caller or "person")
            self.store.add_message(job.id, args["prompt"], now)
        self._push_rows(job)
        self._queued_spawns.append(job.id)
        self._start_queued()
        return self.row(job).to_wire()

    def _running_count(self) -> int:
        """Jobs holding a slot under ``max_running_jobs``: a turn in flight, and no live children
        (a parent waiting for its subagents has handed its work down; counting it could deadlock)."""
        return sum(1 for j in self.jobs.values()
                   if j.state in TURN_STATES and (self._live(j.id).worker is not None or self._live(j.id).starting)
                   and not any(k.state in ACTIVE_STATES for k in self._kids(j.id)))

    def _start_queued(self) -> None:
        cap = self.config.max_running_jobs
        while self._queued_spawns and not self._closing_down:
            if cap and self._running_count() >= cap:
                return
            job_id = self._queued_spawns.pop(0)
            job = self.jobs.get(job_id)
            if job is None or job.archived_at is not None or job.state != State.STARTING:
                continue
            self._live(job_id).starting = True
            self._spawn_task(self._run_queued(job))

    async def _run_queued(self, job: Job) -> None:
        live = self._live(job.id)
        async with live.lock:
            if job.archived_at is None and job.state == State.STARTING and await self._ensure_worker(job):
                await self._deliver_next(job)
            live.starting = False

    # -- workers ------------------------------------------------------------------------------------
    async def _ensure_worker(self, job: Job) -> bool:
        """Start the job's worker (from its session file when it has one). Caller holds the lock.
        Returns False, with the job failed and the reason on its timeline, when it cannot start."""
        live = self._live(job.id)
        if live.worker is not None:
            return True
        config = self.config
        live.starting = True
        try:
            profile = config.driver(job.driver)
            driver = driver_for(profile.kind)
            live.token = secrets.token_hex(16)
            ctx = LaunchContext(socket=self.paths.socket, token=live.token, sessions_dir=self.paths.sessions_dir,
                                state_dir=self.paths.state_dir, options=profile.options)
            launch = driver.launch(job, ctx)
            worker = Worker(job.id, launch, driver.adapter(job), self.paths.job_log(job.id),
                            on_event=lambda ev, j=job: self._on_event(j, ev),
                            on_exit=lambda rc, tail, j=job: self._on_exit(j, rc, tail))
            await worker.start()
        except (ConfigError, DriverError, OSError) as exc:
            live.starting = False
            reason = getattr(exc, "message", None) or str(exc)
            with self.store.transaction():
                self._set_state(job, State.FAILED, reason=f"could not start its worker: {reason}")
                self._timeline(job, "error", message=f"could not start its worker: {reason}")
                self._save(job)
            self._push_rows(job)
            self._route_report(job, State.FAILED, f"could not start: {reason}")
            return False
        live.worker = worker
        live.in_turn = False
        resumed = job.session is not None
        with self.store.transaction():
            job.pid = worker.pid
            job.reaped = False
            if launch.session:
                job.session = launch.session
            self._timeline(job, "worker", pid=worker.pid, resumed=resumed, argv=launch.argv[:3])
            self._save(job)
        self._push_rows(job, with_children=True)
        try:
            state = await worker.request("get_state", timeout=driver.ready_timeout)
        except (asyncio.TimeoutError, ConnectionError) as exc:
            worker.kill()
            live.starting = False
            if isinstance(exc, asyncio.TimeoutError):
                with self.store.transaction():
                    self._timeline(job, "error", message=f"worker did not answer within {driver.ready_timeout:.0f}s")
            return False
        data = state.get("data") or {}
        if data.get("session") and data["session"] != job.session:
            with self.store.transaction():
                job.session = str(data["session"])
                self._save(job)
        live.starting = False
        live.idle_since = self.clock()
        return True

    async def _deliver_next(self, job: Job) -> bool:
        """Give the worker its next prompt: a waiting message, else the reports held for it.
        Caller holds the lock. Returns True when a turn started."""
        live = self._live(job.id)
        if live.worker is None or live.in_turn or job.state == State.STOPPED or job.archived_at is not None:
            return False
        messages = self.store.pending_messages(job.id)
        now = self.clock()
        if messages:
            text, kind, ids = messages[0]["text"], "prompt", [messages[0]["id"]]
        else:
            reports = self.store.pending_reports(job.id)
            if not reports:
                return False
            text, kind, ids = report_message(reports, self.jobs), "reports", [r["id"] for r in reports]
        live.run += 1
        run = live.run
        before = job.state
        with self.store.transaction():
            if kind == "prompt":
                self.store.mark_message(ids[0], now)
            else:
                self.store.mark_reports(ids, now)
            self._timeline(job, kind, text=text, run=run)
            # Working from the moment it is handed over, so a stop right after a message cuts it.
            self._set_state(job, State.WORKING)
            self._save(job)
        self._push_rows(job)
        live.in_turn = True
        live.turn_report = None
        live.turn_kind = kind
        live.state_before = before
        live.text_before = job.last_text
        live.held_since = None
        try:
            resp = await live.worker.request("prompt", timeout=PROMPT_TIMEOUT, message=text, run=run)
            accepted = bool(resp.get("success"))
            refusal = str(resp.get("error", "refused"))
        except (asyncio.TimeoutError, ConnectionError) as exc:
            accepted, refusal = False, f"the worker did not take the prompt: {exc or 'timeout'}"
        if not accepted and live.run == run:  # (a worker that died meanwhile has cleared in_turn)
            live.in_turn = False
            with self.store.transaction():  # undo: it was never delivered
                if kind == "prompt":
                    self.store.undeliver_message(ids[0])
                else:
                    self.store.undeliver_reports(ids)
                self._timeline(job, "error", message=f"prompt refused: {refusal}")
                if job.state == State.WORKING:
                    self._set_state(job, before)
                self._save(job)
            self._push_rows(job)
            return False
        return accepted

    # -- events from workers -------------------------------------------------------------------------
    def _on_event(self, job: Job, event: dict[str, Any]) -> None:
        kind = event.get("type")
        live = self._live(job.id)
        if kind == "text":
            text = str(event.get("text", ""))
            with self.store.transaction():
                job.last_text = text[-4000:]
                self._timeline(job, "text", text=text)
                self._save(job)
            self._push_rows(job)
        elif kind == "tool":
            with self.store.transaction():
                self._timeline(job, "tool", name=event.get("name"), args=event.get("args"),
                               result=event.get("result"), error=bool(event.get("error")))
        elif kind == "usage":
            usage = event.get("usage")
            if isinstance(usage, dict):
                with self.store.transaction():
                    job.usage = {**job.usage, **usage}
                    self._save(job)
                self._push_rows(job)
        elif kind in ("turn_start", "response"):
            pass  # a response here answers a command that already timed out
        elif kind == "turn_end":
            if live.closing:  # a turn cut short by closing the worker is settled when it exits
                return
            if event.get("run") != live.run or not live.in_turn:
                with self.store.transaction():
                    self._timeline(job, "note", message=f"ignored the end of an older turn (run {event.get('run')})")
                return
            self._end_turn(job, event)
        elif kind == "malformed":
            with self.store.transaction():
                self._timeline(job, "error", message=f"worker wrote a line that is not a protocol event: "
                                                     f"{event.get('line', '')!r}")
        else:
            with self.store.transaction():
                self._timeline(job, "note", message=f"unknown worker event {kind!r}")

    def _end_turn(self, job: Job, event: dict[str, Any]) -> None:
        live = self._live(job.id)
        live.in_turn = False
        now = self.clock()
        live.idle_since = now
        outcome = event.get("outcome")
        report = live.turn_report
        live.turn_report = None
        text = job.last_text
        # A turn that only took in children's reports and handed nothing back leaves the job as it
        # was (a done parent stays done) and tells its own parent nothing new.
        quiet = (outcome == "ok" and report is None and live.turn_kind == "reports"
                 and live.state_before in (State.DONE, State.IDLE, State.BLOCKED, State.WAITING))
        with self.store.transaction():
            if job.state == State.STOPPED:
                self._timeline(job, "turn_end", outcome=outcome, note="stopped")
            elif quiet:
                assert live.state_before is not None
                self._set_state(job, live.state_before)
                job.last_text = live.text_before  # the peek keeps the question or the result
                self._timeline(job, "turn_end", outcome="ok", report=None, note="reports taken in")
            elif outcome == "ok":
                status = report[0] if report else "idle"
                if report and report[1]:
                    text = report[1]
                new = REPORT_STATES.get(status, State.IDLE)
                if new == State.DONE:
                    live.done_at = now
                self._set_state(job, new)
                self._timeline(job, "turn_end", outcome="ok", report=status if report else None)
            elif outcome == "waiting":
                text = str(event.get("question") or text)
                self._set_state(job, State.WAITING, question=text)
                self._timeline(job, "turn_end", outcome="waiting")
            elif outcome == "aborted":  # nobody asked (a stop sets STOPPED first): a failed turn
                self._set_state(job, State.FAILED, reason="the worker aborted its turn by itself")
                self._timeline(job, "turn_end", outcome="aborted")
            else:
                text = str(event.get("error") or "the turn failed")
                self._set_state(job, State.FAILED, reason=text)
                self._timeline(job, "turn_end", outcome="failed", error=text)
            self._save(job)
        self._push_rows(job)
        if job.state != State.STOPPED and not quiet:
            self._route_report(job, job.state, text)
        self._spawn_task(self._after_turn(job))
        self._start_queued()

    async def _after_turn(self, job: Job) -> None:
        async with self._live(job.id).lock:
            await self._deliver_next(job)

    async def _on_exit(self, job: Job, returncode: int, stderr_tail: list[str]) -> None:
        live = self._live(job.id)
        worker = live.worker
        live.worker = None
        live.token = ""  # its tools may no longer act as the job
        live.in_turn = False
        live.starting = False
        with self.store.transaction():
            job.pid = None
            if worker is not None and worker.closing:
                job.reaped = True
                self._timeline(job, "closed", reason=live.close_reason or "closed", exit=describe_exit(returncode))
                if job.state in TURN_STATES:  # it never sits at "working" with no worker
                    self._set_state(job, State.FAILED, reason=f"{live.close_reason or 'closed'} during its turn")
            elif job.state == State.STOPPED or job.archived_at is not None or self._closing_down:
                job.reaped = True
                self._timeline(job, "closed", reason="worker ended after a stop", exit=describe_exit(returncode))
            else:
                what = describe_exit(returncode)
                message = f"worker {what}" + (": " + " | ".join(stderr_tail) if stderr_tail else "")
                self._set_state(job, State.FAILED, reason=message)
                self._timeline(job, "error", message=message, exit=what, stderr=stderr_tail)
            self._save(job)
        live.closing = False
        self._push_rows(job, with_children=True)
        if job.state == State.FAILED and not (worker is not None and worker.closing) and job.archived_at is None:
            self._route_report(job, State.FAILED, self._last_error(job))
        self._start_queued()

    def _last_error(self, job: Job) -> str:
        entry = self.store.last_entry(job.id, "error")
        return str(entry.get("message", "failed")) if entry else "failed"

    # -- reports to parents -----------------------------------------------------------------------------
    def _route_report(self, child: Job, state: State, text: str) -> None:
        """Put a child's finished turn or question in its parent's outbox, then try to deliver."""
        if child.parent is None or child.archived_at is not None:
            return
        parent = self.jobs.get(child.parent)
        if parent is None or reports_opted_out(parent.labels) or reports_opted_out(child.labels):
            return
        question = state in (State.WAITING, State.BLOCKED)
        limit = self.config.report_text_max
        body = text if not limit or len(text) <= limit else text[: limit - 1] + "…"
        now = self.clock()
        with self.store.transaction():
            self.store.add_report(parent.id, child.id, state.value, body, question, now)
            self._timeline(child, "reported", to=parent.id, state=state.value)
        self._live(child.id).last_report_at = now
        self._dispatch_reports(parent)

    def _dispatch_reports(self, parent: Job) -> None:
        pending = self.store.pending_reports(parent.id)
        if not pending:
            return
        live = self._live(parent.id)
        question = any(r["question"] for r in pending)
        action = report_action(parent, self._facts(parent), question, pending[0]["created_at"], self.config,
                               self.clock())
        if action == "drop":
            with self.store.transaction():
                self.store.mark_reports([r["id"] for r in pending], self.clock())
        elif action == "deliver":
            self._spawn_task(self._after_turn(parent))
        elif action == "wake":
            self._spawn_task(self._resume(parent))
        elif action == "steer":
            self._spawn_task(self._steer_reports(parent))
        elif action == "hold" and live.held_since is None:
            live.held_since = pending[0]["created_at"]

    async def _steer_reports(self, parent: Job) -> None:
        live = self._live(parent.id)
        if live.worker is None or not live.in_turn:
            async with live.lock:
                await self._deliver_next(parent)
            return
        reports = self.store.pending_reports(parent.id)
        if not reports:
            return
        text = report_message(reports, self.jobs)
        with self.store.transaction():
            self.store.mark_reports([r["id"] for r in reports], self.clock())
            self._timeline(parent, "reports", text=text, steer=True)
        try:
            resp = await live.worker.request("steer", timeout=PROMPT_TIMEOUT, message=text)
            accepted = bool(resp.get("success"))
        except (asyncio.TimeoutError, ConnectionError):
            accepted = False
        if not accepted:  # the turn ended meanwhile: it goes as the next prompt instead
            with self.store.transaction():
                self.store.undeliver_reports([r["id"] for r in reports])
            async with live.lock:
                await self._deliver_next(parent)

    async def _resume(self, job: Job) -> None:
        live = self._live(job.id)
        async with live.lock:
            if job.archived_at is None and job.state != State.STOPPED and await self._ensure_worker(job):
                await self._deliver_next(job)

    # -- operations -------------------------------------------------------------------------------------
    async def send(self, job_id: str, text: str, caller: str | None) -> dict[str, Any]:
        job = self.get(job_id)
        if job.archived_at is not None:
            raise ProtocolError(ErrorCode.ARCHIVED, f"job {job_id} is archived; it takes no messages")
        live = self._live(job.id)
        async with live.lock:
            if job.state == State.STOPPED:
                raise ProtocolError(ErrorCode.STOPPED, f"job {job_id} is stopped; a stopped job takes no messages")
            with self.store.transaction():
                self.store.add_message(job.id, text, self.clock())
                self._timeline(job, "message", text=text, by=caller or "person")
            if live.in_turn or live.starting or job.id in self._queued_spawns:
                self._push_rows(job)
                return {"outcome": "queued", "job": job.id}
            outcome = "delivered"
            if live.worker is None:
                outcome = "resumed"
                if not await self._ensure_worker(job):
                    raise ProtocolError(ErrorCode.REFUSED, f"job {job_id} could not be resumed: {self._last_error(job)}"
                                                           "; the message is kept for its next resume")
            if not await self._deliver_next(job):
                outcome = "queued"
            return {"outcome": outcome, "job": job.id}

    async def stop(self, job_id: str, tree: bool, caller: str | None) -> dict[str, Any]:
        job = self.get(job_id)
        self.check_caller(caller, job, "stop")
        targets = [job, *self._descendants(job.id)] if tree else [job]
        stopped = [t for t in targets if t.state in STOPPABLE_STATES and t.archived_at is None]
        await asyncio.gather(*(self._stop_one(t, caller) for t in stopped))
        return {"stopped": len(stopped), "ids": [t.id for t in stopped],
                "already": job.state == State.STOPPED and not tree and not stopped}

    async def _stop_one(self, job: Job, caller: str | None) -> None:
        live = self._live(job.id)
        run = live.run
        with self.store.transaction():
            self._set_state(job, State.STOPPED, by=caller or "person")
            self.store.drop_messages(job.id, self.clock())
            self._save(job)
        self._push_rows(job)
        worker = live.worker
        if worker is None or not live.in_turn:
            return
        try:
            await worker.request("abort", timeout=ABORT_TIMEOUT)
        except (asyncio.TimeoutError, ConnectionError):
            worker.kill()
        if live.run == run and live.in_turn:  # no turn_end came: settle this run ourselves
            live.in_turn = False
            live.idle_since = self.clock()

    async def close(self, job_id: str, caller: str | None, reason: str = "closed by its owner") -> dict[str, Any]:
        job = self.get(job_id)
        self.check_caller(caller, job, "close")
        live = self._live(job.id)
        async with live.lock:
            if live.worker is None:
                return {"closed": False, "reason": "no worker is running"}
            if live.in_turn:
                raise ProtocolError(ErrorCode.REFUSED, f"job {job_id} is in a turn; stop it first or wait")
            await self._close_worker(job, reason)
        return {"closed": True}

    async def _close_worker(self, job: Job, reason: str) -> None:
        """Close a worker on purpose; its record stays and the next message resumes it."""
        live = self._live(job.id)
        if live.worker is None:
            return
        live.closing = True
        live.close_reason = reason
        await live.worker.close()

    def set_pinned(self, job_id: str, pinned: bool, caller: str | None) -> dict[str, Any]:
        job = self.get(job_id)
        self.check_caller(caller, job, "pin" if pinned else "unpin")
        with self.store.transaction():
            job.pinned = pinned
            self._timeline(job, "pinned" if pinned else "unpinned")
            self._save(job)
        self._push_rows(job)
        return self.row(job).to_wire()

    def set_label(self, job_id: str, key: str, value: str | None, caller: str | None) -> dict[str, Any]:
        job = self.get(job_id)
        self.check_caller(caller, job, "label")
        with self.store.transaction():
            if value is None:
                job.labels.pop(key, None)
            else:
                job.labels[key] = value
            self._save(job)
        self._push_rows(job)
        return self.row(job).to_wire()

    def report(self, caller: str, status: str, text: str) -> dict[str, Any]:
        """A job's report on its own turn (the server lets only a job's connection call this)."""
        if status not in REPORT_STATUSES:
            raise ProtocolError(ErrorCode.BAD_ARGS, f"report status {status!r} is not one of {', '.join(REPORT_STATUSES)}")
        job = self.get(caller)
        live = self._live(job.id)
        with self.store.transaction():
            self._timeline(job, "report", status=status, text=text)
            if text:
                job.last_text = text
            self._save(job)
        if live.in_turn:
            live.turn_report = (status, text)
            return {"recorded": True, "applies": "at the end of this turn"}
        # Outside a turn (a shell tool after the fact): it takes effect at once.
        new = REPORT_STATES.get(status, State.IDLE)
        if job.state != State.STOPPED:
            with self.store.transaction():
                self._set_state(job, new)
                self._save(job)
            if new == State.DONE:
                live.done_at = self.clock()
            self._push_rows(job)
            self._route_report(job, new, text or job.last_text)
        return {"recorded": True, "applies": "now"}

    def children_of(self, job_id: str) -> list[dict[str, Any]]:
        self.get(job_id)
        return [self.row(k).to_wire() for k in sorted(self._kids(job_id), key=lambda j: j.created_at)]

    def attach(self, job_id: str, conn_id: int, resume: bool = False) -> dict[str, Any]:
        """A client opened the job. With ``resume``, a job whose worker is closed is started again
        from its session file (opening a job resumes it), taking any messages and reports waiting."""
        job = self.get(job_id)
        first = not self.attachments.get(job.id)
        self.attachments.setdefault(job.id, set()).add(conn_id)
        if first:
            self._push_rows(job, with_children=True)
        live = self._live(job.id)
        if (resume and live.worker is None and not live.starting and job.archived_at is None
                and job.state in (State.IDLE, State.DONE, State.WAITING, State.BLOCKED)):
            self._spawn_task(self._resume(job))
        return self.row(job).to_wire()

    def release(self, job_id: str, conn_id: int) -> None:
        job = self.jobs.get(job_id)
        holders = self.attachments.get(job_id)
        if not holders or conn_id not in holders:
            return
        holders.discard(conn_id)
        if not holders:
            del self.attachments[job_id]
            if job is not None:
                self._push_rows(job, with_children=True)

    def forget_connection(self, conn_id: int) -> None:
        """A client that disconnects has nothing open any more."""
        self.subscribers.pop(conn_id, None)
        for job_id in [j for j, holders in self.attachments.items() if conn_id in holders]:
            self.release(job_id, conn_id)

    async def archive(self, job_id: str, caller: str | None) -> dict[str, Any]:
        job = self.get(job_id)
        self.check_caller(caller, job, "archive")
        archived: list[str] = []
        detached: list[str] = []
        await self._archive_tree(job, archived, detached)
        return {"archived": archived, "detached": detached}

    async def _archive_tree(self, job: Job, archived: list[str], detached: list[str]) -> None:
        live = self._live(job.id)
        async with live.lock:
            now = self.clock()
            with self.store.transaction():
                job.archived_at = now
                if job.state in STOPPABLE_STATES:
                    self._set_state(job, State.STOPPED, reason="archived")
                self.store.drop_messages(job.id, now)
                self.store.mark_reports([r["id"] for r in self.store.pending_reports(job.id)], now)
                self._timeline(job, "archived")
                self._save(job)
            archived.append(job.id)
            if live.worker is not None:
                if live.in_turn:
                    try:
                        await live.worker.request("abort", timeout=ABORT_TIMEOUT)
                    except (asyncio.TimeoutError, ConnectionError):
                        pass
                await self._close_worker(job, "archived")
        self._push_rows(job)
        for kid in self._kids(job.id):
            if self.attachments.get(kid.id):
                self.detach(kid.id)
                detached.append(kid.id)
            else:
                await self._archive_tree(kid, archived, detached)

    def detach(self, job_id: str, caller: str | None = None) -> dict[str, Any]:
        job = self.get(job_id)
        self.check_caller(caller, job, "detach")
        if job.parent is None:
            return self.row(job).to_wire()
        old_parent = self.jobs.get(job.parent)
        self.children.get(job.parent, set()).discard(job.id)
        with self.store.transaction():
            self._timeline(job, "detached", parent=job.parent)
            job.parent = None
            for member in [job, *self._descendants(job.id)]:
                member.depth = member.depth - job.depth if member is not job else 0
                self._save(member)
            job.depth = 0
            self._save(job)
        if old_parent is not None:
            self._push_rows(old_parent)
        self._push_rows(job, with_children=True)
        return self.row(job).to_wire()

    # -- the clock ------------------------------------------------------------------------------------------
    async def tick_forever(self, interval: float = 0.2) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                self.tick()
            except Exception:  # a rule must never take the daemon down
                log.exception("tick failed")

    def tick(self) -> None:
        """Apply the time-driven rules: auto-close, the idle reaper, the bounded report hold."""
        now = self.clock()
        config = self.config
        for job_id, live in list(self.live.items()):
            job = self.jobs.get(job_id)
            if job is None or live.worker is None or live.closing or live.lock.locked():
                continue
            facts = self._facts(job)
            kids = self._kids(job.id)
            if auto_close_due(job, facts, kids, config, now):
                self._spawn_task(self._close_if(job, "done: subagent auto-close", auto_close_due))
            elif reap_due(job, facts, kids, config, now):
                self._spawn_task(self._close_if(job, f"idle for {config.idle_timeout:g}s", reap_due))
            elif live.held_since is not None and live.in_turn and now - live.held_since >= config.report_hold_max:
                live.held_since = None
                self._spawn_task(self._steer_reports(job))

    async def _close_if(self, job: Job, reason: str, rule: Callable[..., bool]) -> None:
        live = self._live(job.id)
        async with live.lock:  # re-check under the lock: a message may have won the race
            if live.worker is None or live.closing:
                return
            if rule(job, self._facts(job), self._kids(job.id), self.config, self.clock()):
                await self._close_worker(job, reason)
        if job.parent and job.parent in self.jobs:
            self._push_rows(self.jobs[job.parent])


def _kill_stale_worker(job: Job) -> None:
    """Kill a worker left by a daemon that died, if that pid is still that job's worker."""
    pid = job.pid
    if pid is None:
        return
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return
    if f"ROOST_JOB_ID={job.id}".encode() not in environ.split(b"\0"):
        return  # the pid was reused by something else
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
