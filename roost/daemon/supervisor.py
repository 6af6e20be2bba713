"""The supervisor: the operations clients ask of the daemon, each turned into messages for the
jobs' mailboxes (roost.daemon.engine.core) or answered from the index.

It is the only writer of job records and timelines, through the engine. Spawning creates a record
here; everything that changes a record afterwards goes through that job's mailbox, in order.
One idea at about 510 lines: one method per operation, each short (the checks and the message it
posts); what they share lives in the engine, the index and the rules. It shrinks as operations
move to roost/daemon/ops/, one module each (issue 30).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import secrets
import sqlite3
import time
from typing import TYPE_CHECKING, Any, Callable

from roost.bounds import labels_problem
from roost.config import Config, ConfigError
from roost.config.settings import DriverProfile
from roost.daemon.engine import messages as m
from roost.daemon.git.diffs import DiffCache
from roost.daemon.engine.core import Engine
from roost.daemon.processes.hooks import Hooks
from roost.daemon.storage.index import JobIndex
from roost.daemon.storage.recovery import closed_for_room, recover
from roost.daemon.storage.search import SearchError
from roost.daemon.processes.spare import Spares
from roost.daemon.storage.store import Store
from roost.daemon.engine import spend
from roost.daemon.engine import spawn as spawn_rules
from roost.daemon.engine.slot import stoppable
from roost.daemon.git import worktrees
from roost.daemon.processes.launch import WorkerFactory, adopt_factory, process_factory
from roost.sandbox.probe import probe
from roost.sandbox.walls import IsolationRefused, decide
from roost.daemon.processes.remote_worker import end_left, remote_opener
from roost.daemon.processes.shim_link import ShimRecord, token_hash
from roost.daemon.processes.shim_process import know_shim
from roost.hosts import placement
from roost.hosts.placement import place
from roost.drivers import driver_for
from roost.drivers.base import DriverError
from roost.models import LIFETIMES, RESUMABLE_STATES, Job, State
from roost.paths import Paths
from roost.protocol import LIST_LIMIT, MAX_FRAME, REPORT_STATUSES, ErrorCode, ProtocolError
from roost.rules import approvals as approval_rules, egress
from roost.rules.counts import WorkCounts, work_counts

if TYPE_CHECKING:
    from roost.daemon.server.publisher import Publisher

log = logging.getLogger("roost.daemon")

ID_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"
#: How long shutdown waits for workers to close before it stops waiting.
SHUTDOWN_WAIT = 10.0
#: Room a prompt frame needs besides the message (its type, id and run token).
PROMPT_MARGIN = 4096


def _title_from(prompt: str) -> str:
    first = next((line.strip() for line in prompt.splitlines() if line.strip()), "job")
    return first if len(first) <= 60 else first[:59] + "…"


class Supervisor:
    def __init__(self, store: Store, paths: Paths, config: Callable[[], Config],
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 make_worker: WorkerFactory | None = None, publisher: Publisher | None = None) -> None:
        self.store = store
        self.paths = paths
        self._config = config
        self.clock = clock
        self.index = JobIndex()
        if publisher is None:
            from roost.daemon.server.publisher import Publisher
            publisher = Publisher(self.index, store)
        self.publisher = publisher
        self.hooks = Hooks(config)
        #: Built-in workers started ahead (roost/daemon/processes/spare.py); none with a factory of fakes.
        self.spares = Spares(paths, config) if make_worker is None else None
        #: What this machine can build walls with (roost/sandbox/probe.py), found once at the start.
        self.walls = probe(config().sandbox_bwrap, paths.state_dir)
        self.engine = Engine(store, self.index, self.publisher, config,
                             make_worker or process_factory(paths, config, self.spares, self.walls), clock, monotonic,
                             hooks=self.hooks)
        self.publisher.counts_of = self.counts
        if make_worker is None:
            self.engine.adopt_worker = adopt_factory(paths, config, self._host_link)
        self.engine.prepare_host = self._prepare_host
        self._ended: list[Job] = []
        self._adopt: list[tuple[str, Any]] = []
        #: Workers past daemons left on SSH hosts that this one does not take over.
        self._left: list[ShimRecord] = []
        #: Ids given to spawns not answered yet.
        self._naming: set[str] = set()
        #: Each job's diff, made once per state of its worktree (roost/daemon/git/diffs.py).
        self.diffs = DiffCache(paths.state_dir / "diffs")

    @property
    def config(self) -> Config:
        return self._config()

    def _host_link(self, name: str) -> Any:
        """The daemon's link to SSH host ``name`` (ConfigError when it is gone from the config)."""
        if self.engine.host_socket is None:
            raise ConfigError(f"host {name}: this daemon serves no host sockets")
        return placement.link_for(self.config.host(name), self.engine.host_socket)

    async def _prepare_host(self, job_id: str, worker: Any) -> str | None:
        """A job on another host: its link, its launch there (roost/hosts/placement.py)."""
        return await placement.prepare(self.index.get(job_id), self.config, self.engine.host_socket, worker,
                                       remote_opener)

    async def _ask(self, job_id: str, message: m.Message) -> Any:
        """Post a message to a job's mailbox and wait for its handler's answer."""
        return await self.engine.ask(job_id, message)

    # -- start-up and shutdown ----------------------------------------------------------------------
    def recover(self) -> None:
        """Load every record; no job may claim a worker that did not survive the last daemon."""
        done = recover(self.store, self.index, self.clock, self.paths.state_dir)
        self._ended = done.ended
        self._adopt = done.adopt if self.engine.adopt_worker is not None else []
        for job_id, record in self._adopt:  # their processes are their jobs' from the first hello on
            if record.remote is None:  # a host's shim has the host's pid
                know_shim(record.shim_pid, record.shim_start, job_id)
        self._left = done.left_on_hosts
        runs = [int(turn["run"]) for job_id, _ in self._adopt
                if (turn := (self.index.get(job_id).live or {}).get("turn"))]  # type: ignore[union-attr]
        if runs:  # a new turn's run token is never an adopted turn's
            self.engine.runs = itertools.count(max(runs) + 1)
        self.engine.inbox.update(self.store.pending_counts())
        self.engine.queue.spawns.extend(done.queued)
        self.engine.queue.closed_for_room.update(closed_for_room(self.store, self.index))

    def start(self) -> None:
        """Once the event loop runs: tell parents about children the restart failed, deliver (or
        wake for) reports left in the outbox, resume jobs whose messages were still waiting (for room
        on their host, or for a closing worker), start queued spawns."""
        for job in self._ended:  # the hooks hear of them too: recovery ran before the loop
            self.hooks.job_changed(self.index.row(job.id, full=True), State.WORKING.value, job.state.value)
            self.engine.post(job.id, m.EndedAtStart())
        self._ended = []
        adopting = bool(self._adopt)
        for job_id, record in self._adopt:  # first: their shims keep what the workers said meanwhile
            self.engine.post(job_id, m.Adopt(record=record))
        self._adopt = []
        for record in self._left:  # not taken over (a person stopped it while no daemon ran): ended there
            if record.remote is not None and record.remote.host in self.config.hosts:
                self.engine.spawn_task(end_left(self._host_link(record.remote.host), record))
        self._left = []
        for parent_id in self.store.parents_with_reports():
            if parent_id in self.index.jobs:
                self.engine.post(parent_id, m.Reports())
        for job_id, waiting in self.engine.inbox.items():
            job = self.index.get(job_id)
            if waiting and job is not None and job.state in RESUMABLE_STATES and job.archived_at is None:
                self.engine.post(job_id, m.Resume())
        if adopting:  # after the drain that makes their slots: they hold their places under the caps
            asyncio.get_running_loop().call_soon(self.engine.pump)
        else:
            self.engine.pump()
        if self.spares is not None:
            self.spares.start()
        self.engine.spawn_task(self._index_old_entries())

    async def _index_old_entries(self) -> None:
        """Index, a batch at a time between other work, the entries of a store made before search."""
        try:
            while self.store.index_old_entries():
                await asyncio.sleep(0)
        except (sqlite3.Error, OSError) as exc:  # the next start goes on from where this one stopped
            log.warning("indexing old timeline entries for search stopped: %s", exc)

    def config_changed(self) -> None:
        """A reloaded config may raise the cap or change a time rule: start what may start, and
        re-arm every worker's timer."""
        self.engine.pump()
        for job_id in list(self.engine.slots):
            self.engine.post(job_id, m.Due())
        if self.spares is not None:
            self.spares.config_changed()

    async def shutdown(self, close_workers: bool = True) -> None:
        """Stop. With ``close_workers`` every worker is closed on purpose (records say reaped; a turn in
        flight is aborted first, so the agent saves what it has). Without, each worker a later daemon
        can re-adopt is left running under its shim, its turn going on (docs/reliability.md); the
        others are closed."""
        eng = self.engine
        eng.closing_down = True
        self.diffs.close()
        if self.spares is not None:
            await self.spares.close()
        if not close_workers:
            for job_id, slot in list(eng.slots.items()):
                if self._keeps(job_id, slot):
                    slot.worker.detach()  # type: ignore[attr-defined]
                    del eng.slots[job_id]
        for job_id in list(eng.slots):  # each closed in its own mailbox; the exits write the records
            eng.post(job_id, m.Shutdown())
        try:
            await asyncio.wait_for(eng.workers_gone(), SHUTDOWN_WAIT)
        except asyncio.TimeoutError:
            log.error("shutdown: %d workers did not close within %.0fs", len(eng.slots), SHUTDOWN_WAIT)
        eng.cancel_tasks()
        await self.hooks.close()

    def _keeps(self, job_id: str, slot: Any) -> bool:
        """Whether a stopping daemon leaves this worker running for the next one to re-adopt (a Ray
        host's too: its relay runs under a shim here; an SSH host's under its shim there, its record
        here naming the host, the socket and the tree there)."""
        job = self.index.get(job_id)
        launch = getattr(slot.worker, "launch", None)
        return (job is not None
                and approval_rules.carried(job.approvals, (job.live or {}).get("adapter"))
                and slot.phase.value == "ready"
                and launch is not None and launch.adoptable and hasattr(slot.worker, "detach"))

    # -- spawning ------------------------------------------------------------------------------------
    async def spawn(self, args: dict[str, Any], caller: str | None) -> dict[str, Any]:
        config = self.config
        parent_id = caller if caller is not None else args.get("parent")
        parent = self.index.require(parent_id) if parent_id else None
        if parent is not None and parent.archived_at is not None:  # asked again in the stream (engine/spawn.py)
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
        host, cwd = place(args, profile, parent, config)  # this machine or a [hosts.NAME]; its cwd there
        if not host:  # a program on another host is that host's to have (`roost hosts check` says)
            try:
                driver_for(profile.kind).check(profile.options)
            except DriverError as exc:
                raise ProtocolError(ErrorCode.DRIVER, str(exc)) from None
        lifetime = args.get("lifetime") or profile.lifetime or "task"
        if lifetime not in LIFETIMES:
            raise ProtocolError(ErrorCode.BAD_ARGS, f"lifetime {lifetime!r} is not one of {', '.join(LIFETIMES)}")
        labels = args.get("labels") or {}
        if problem := labels_problem(labels):
            raise ProtocolError(ErrorCode.BAD_ARGS, f"spawn: {problem}")
        policy = _policy(args, profile, parent, caller)
        try:
            isolation, walls = decide(args.get("isolation"), profile.isolation,
                                      parent.driver_opts.get("isolation") if parent else None, caller is not None,
                                      self.walls.ok, self.walls.reason, bool(host))
        except IsolationRefused as exc:
            raise ProtocolError(ErrorCode.DRIVER, str(exc)) from None
        if not args["prompt"].strip():  # a turn on nothing: the agent would only guess
            raise ProtocolError(ErrorCode.BAD_ARGS, "spawn: the prompt is empty: say what the job is to do")
        check_prompt(args["prompt"])
        spend.check_spawn(self.engine, parent)  # a tree (or the day) past its budget takes no new jobs
        if parent is not None:  # nor a tree past its quotas (asked again, and counted, in the mailbox)
            spawn_rules.check_room(self.engine, parent)
        given = {k: args.get(k) for k in ("budget_usd", "budget_tokens")}  # else the driver's table's
        budget = spend.budget_args("spawn", profile.budget_usd if given["budget_usd"] is None else given["budget_usd"],
                                   profile.budget_tokens if given["budget_tokens"] is None else given["budget_tokens"])
        now = self.clock()
        job = Job(id=self.new_id(), title=args.get("title") or _title_from(args["prompt"]), driver=driver_name,
                  cwd=cwd, host=host, parent=parent.id if parent else None, state=State.QUEUED,
                  state_since=now, created_at=now, updated_at=now, labels=labels, lifetime=lifetime, depth=depth,
                  driver_opts={**profile.to_dict(), **placement.spawn_resources(args, profile), "isolation": isolation,
                               "walls": walls, "egress": _egress(profile, parent)}, approval_policy=policy)
        await worktrees.prepare(job, args, profile, self.paths, config)
        try:
            await self._ask(job.id, m.Spawn(job, args["prompt"], caller or "person", budget))
        finally:
            self._naming.discard(job.id)
        return self.index.row(job.id)

    def new_id(self) -> str:
        """A job id no job has and no spawn under way was given (it is taken until its spawn is answered)."""
        for length in (4, 5, 6, 8):
            for _ in range(20):
                job_id = "".join(secrets.choice(ID_ALPHABET) for _ in range(length))
                if job_id not in self.index.jobs and job_id not in self._naming:
                    self._naming.add(job_id)
                    return job_id
        raise RuntimeError("could not find a free job id")

    # -- operations on a job --------------------------------------------------------------------------
    async def send(self, job_id: str, text: str, caller: str | None) -> dict[str, Any]:
        """A message for a job; a person's message to a stopped job restarts it."""
        check_prompt(text)
        message = m.Send(text, caller)
        result = await self._ask(job_id, message)
        return {**result, "outcome": "restarted"} if message.restarted else result

    async def answer_approval(self, approval: str, decision: str, reason: str, rule: str | None) -> dict[str, Any]:
        """A person's answer to one pending approval (handlers let only a person call this)."""
        if rule is not None:
            if decision != "job":
                raise ProtocolError(ErrorCode.BAD_ARGS, "answer_approval: a rule goes with decision \"job\" only")
            try:
                rule = str(approval_rules.parse_rule(rule))
            except approval_rules.RuleError as exc:
                raise ProtocolError(ErrorCode.BAD_ARGS, f"answer_approval: {exc}") from None
        if len(reason) > approval_rules.REASON_MAX:
            raise ProtocolError(ErrorCode.BAD_ARGS, f"answer_approval: a reason is at most "
                                                    f"{approval_rules.REASON_MAX} characters, got {len(reason)}")
        job_id = self.engine.approvals.jobs.get(approval)
        if job_id is None:
            raise self.engine.approvals.refusal(approval)
        return await self._ask(job_id, m.AnswerApproval(approval, decision, reason, rule))

    def approval_text(self, approval: str, offset: int) -> dict[str, Any]:
        """One page of a pending approval's whole request, as the agent will run it (the record and
        the rows keep it cut past WHAT_MAX): what a person reads before answering."""
        job_id = self.engine.approvals.jobs.get(approval)
        entry = next((a for a in self.index.require(job_id).approvals if a["id"] == approval), None) if job_id else None
        if job_id is None or entry is None:
            raise self.engine.approvals.refusal(approval)
        slot = self.engine.slots.get(job_id)
        whole = slot.whole.get(approval) if slot is not None else None
        text = approval_rules.whole_text(entry["tool"], whole if whole is not None else entry["what"])
        page = text[offset:offset + approval_rules.TEXT_PAGE]
        after = offset + len(page)
        return {"approval": approval, "job": job_id, "text": page, "offset": offset, "total": len(text),
                "whole": whole is not None or approval_rules.is_whole(entry["what"]),
                "next": after if after < len(text) else None}

    async def unarchive(self, job_id: str) -> dict[str, Any]:
        """Bring back an archived job and what was archived with it (its subtree, archived at or
        after it). A job whose parent is still archived comes back as a root."""
        job = self.index.require(job_id)
        if job.archived_at is None:
            return self.index.row(job_id)
        since = job.archived_at
        parent = self.index.get(job.parent) if job.parent else None
        back = [j for j in self.index.descendants(job.id, archived=True)
                if j.archived_at is not None and j.archived_at >= since]
        await self._ask(job.id, m.Unarchive(detach=parent is not None and parent.archived_at is not None))
        await asyncio.gather(*(self._ask(j.id, m.Unarchive(detach=False)) for j in back))
        for member in (job, *back):  # a worktree roost removed is made again from its archive ref
            told = await worktrees.bring_back(member)
            if told is not None:
                await self._ask(member.id, told)
        return self.index.row(job_id)

    async def stop(self, job_id: str, tree: bool, caller: str | None) -> dict[str, Any]:
        job = self.index.require(job_id)
        targets = [job, *self.index.descendants(job.id)] if tree else [job]
        targets = [t for t in targets if stoppable(t, self.engine.slots.get(t.id))]
        # Each handler answers how many of the agent's own subagents its stop ends (None: not stopped).
        results = await asyncio.gather(*(self._ask(t.id, m.Stop(caller)) for t in targets))
        stopped = [t.id for t, ended in zip(targets, results) if ended is not None]
        return {"stopped": len(stopped), "ids": stopped, "subagents": sum(r for r in results if r is not None),
                "already": job.state == State.STOPPED and not tree and not stopped}

    async def set_budget(self, job_id: str, usd: float | None, tokens: int | None) -> dict[str, Any]:
        """A person's ``budget``: through the job's mailbox (roost/daemon/engine/spend.py)."""
        self.index.require(job_id)
        return await self._ask(job_id, m.SetBudget(usd, tokens))

    async def close(self, job_id: str, reason: str = "closed by its owner") -> dict[str, Any]:
        self.index.require(job_id)
        return await self._ask(job_id, m.Close(reason))

    async def set_pinned(self, job_id: str, pinned: bool) -> dict[str, Any]:
        self.index.require(job_id)
        await self._ask(job_id, m.Pin(pinned))
        return self.index.row(job_id)

    async def set_label(self, job_id: str, key: str, value: str | None) -> dict[str, Any]:
        self.index.require(job_id)
        await self._ask(job_id, m.Label(key, value))
        return self.index.row(job_id)

    async def report(self, caller: str, status: str, text: str) -> dict[str, Any]:
        """A job's report on its own turn (the server lets only a job's connection call this)."""
        if status not in REPORT_STATUSES:
            raise ProtocolError(ErrorCode.BAD_ARGS, f"report status {status!r} is not one of {', '.join(REPORT_STATUSES)}")
        self.index.require(caller)
        return await self._ask(caller, m.Report(status, text))

    async def archive(self, job_id: str) -> dict[str, Any]:
        """Archive a job and its subtree; a child someone has open is detached instead, so it
        stays in view."""
        job = self.index.require(job_id)
        archived: list[str] = []
        detached: list[str] = []
        stack = [job]
        while stack:
            member = stack.pop()
            archived.append(member.id)
            for kid in self.index.kids(member.id):
                if self.index.attached(kid.id):
                    detached.append(kid.id)
                else:
                    stack.append(kid)
        await asyncio.gather(*(self._ask(j, m.Detach()) for j in detached),
                             *(self._ask(j, m.Archive()) for j in archived))
        return {"archived": archived, "detached": detached}

    async def detach(self, job_id: str, caller: str | None = None) -> dict[str, Any]:
        self.index.require(job_id)
        await self._ask(job_id, m.Detach(caller))
        return self.index.row(job_id)

    # -- clients holding jobs open ----------------------------------------------------------------------
    async def attach(self, job_id: str, conn_id: int, resume: bool = False) -> dict[str, Any]:
        """A client opened the job (decided in its mailbox: roost/daemon/engine/attach.py)."""
        self.index.require(job_id)
        await self._ask(job_id, m.Attach(conn_id, resume))
        return self.index.row(job_id)

    async def release(self, job_id: str, conn_id: int) -> None:
        if self.index.get(job_id) is not None:
            await self._ask(job_id, m.Release(conn_id))

    def forget_connection(self, conn_id: int) -> None:
        """A client that disconnects has nothing open any more."""
        for job_id in self.index.attached_by(conn_id):
            self.engine.post(job_id, m.Release(conn_id))

    # -- reading ------------------------------------------------------------------------------------------
    def show(self, job_id: str) -> dict[str, Any]:
        return self.index.row(job_id, full=True)

    def list_page(self, **args: Any) -> dict[str, Any]:
        return self.index.page(**args)

    def children_of(self, job_id: str, limit: int = LIST_LIMIT, cursor: str | None = None) -> dict[str, Any]:
        """One page of a job's children (``list``'s shape: ``rows``, ``next``, ``total``)."""
        return self.index.kids_page(job_id, limit=limit, cursor=cursor)

    def logs(self, job_id: str, limit: int = 200, before: int | None = None,
             after: int | None = None) -> dict[str, Any]:
        self.index.require(job_id)
        return self.store.timeline_page(job_id, limit=limit, before=before, after=after)

    def search(self, text: str, under: str | None, archived: bool, limit: int,
               before: int | None) -> dict[str, Any]:
        """Timeline entries matching ``text``, newest first: of ``under``'s subtree (None: every
        job), archived jobs' only with ``archived``."""
        index = self.index
        if under is not None:
            index.require(under)

        def visible(job_id: str) -> bool:
            job = index.get(job_id)
            return (job is not None and (archived or job.archived_at is None)
                    and (under is None or index.under(job_id, under)))
        try:
            page = self.store.search(text, visible, limit, before)
        except SearchError as exc:
            raise ProtocolError(ErrorCode.BAD_ARGS, str(exc)) from None
        for result in page["results"]:
            result["title"] = index.jobs[result["job"]].title
        return page

    def token_valid(self, job_id: str, token: str | None) -> bool:
        """Whether ``token`` proves a connection is that job's worker (tokens die with it)."""
        slot = self.engine.slots.get(job_id)
        return slot is not None and bool(token) and secrets.compare_digest(slot.token_hash, token_hash(token or ""))

    def counts(self) -> WorkCounts:
        """Working and queued jobs, subagents too, and the run slots used (roost/rules/counts.py)."""
        return work_counts(self.index.tally, self.engine.queue.running(), self.config.max_running_jobs)

    def status(self) -> dict[str, Any]:
        return {"jobs": len(self.index.jobs), "workers": len(self.engine.slots), "counts": self.counts().to_wire(),
                "queued": self.engine.queue.queued_count(), "store_notice": self.store.notice(),
                "spares": self.spares.status() if self.spares is not None else None, "sandbox": self.walls.to_wire()}


def _policy(args: dict[str, Any], profile: Any, parent: Job | None, caller: str | None) -> list[dict[str, Any]]:
    """A new job's approval policy: its parent's levels, then its own — the spawn's ``approvals`` and
    ``approval_rules``, else its driver profile's. A job that spawns cannot loosen the profile either:
    when it overrides one that says something, the profile stays a level above the child's own."""
    asked = args.get("approvals") is not None or args.get("approval_rules") is not None
    configured = profile.approvals is not None or bool(profile.approval_rules)
    mode = args.get("approvals") or profile.approvals
    rules = args.get("approval_rules") if args.get("approval_rules") is not None else profile.approval_rules
    try:
        above = list(parent.approval_policy) if parent is not None else []
        if asked and configured and caller is not None:
            above.append(approval_rules.level(profile.approvals or "ask", profile.approval_rules))
        return approval_rules.child_policy(above, mode, rules)
    except approval_rules.RuleError as exc:
        raise ProtocolError(ErrorCode.BAD_ARGS, f"spawn: {exc}") from None


def check_prompt(text: str) -> None:
    """A message must fit in one worker-protocol frame with room to spare, or no worker could
    ever take it (it would wait in the inbox for good)."""
    size = len(json.dumps(text, ensure_ascii=False).encode())
    if size > MAX_FRAME - PROMPT_MARGIN:
        raise ProtocolError(ErrorCode.BAD_ARGS, f"a message of {size} bytes is over the {MAX_FRAME - PROMPT_MARGIN}"
                                                "-byte limit for one prompt; send it as a file the agent reads")


def _egress(profile: DriverProfile, parent: Job | None) -> dict[str, Any]:
    """A new job's network policy as its record keeps it: its profile's, never more open than its
    parent's (roost/rules/egress.py)."""
    return egress.resolve(profile.network, profile.allow, None, None,
                          parent.driver_opts.get("egress") if parent is not None else None).stored()
