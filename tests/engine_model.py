"""The engine as a model-checked state machine: Hypothesis drives the in-process engine (a real
store, fake workers, the fake clock) through random interleavings of every message — spawns
through their message, a store that refuses writes for a while, attach and release, a shutdown
and a restart with recovery, the archive of a job with a real git worktree — and after each step
checks what must always hold. tests/test_engine_model.py runs it on a fixed budget in
CI; bench/model.py runs it long."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from roost.config import Config
from roost.daemon.engine import records as engine_module
from roost.daemon.storage.briefs import READ, Brief
from roost.models import ACTIVE_STATES, State
from roost.protocol import ProtocolError
from roost.rules import state_table
from tests.engine_fakes import FullDisk, Rig

#: What a brief holds of a record (besides how many approvals wait).
BRIEFED = ("parent", "state", "created_at", "archived_at", "depth", "pid", "title", "cwd", "worktree")

CFG = Config(idle_timeout=50, subagent_auto_close_delay=4, report_hold_max=30, max_running_jobs=2,
             max_live_workers=3, approval_timeout=40, stall_after=45, start_stall_after=35, max_turn_time=120)
MAX_JOBS = 5


class EngineModel(RuleBasedStateMachine):
    """One engine on one store, restarted now and then; each rule one message or event."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = Path(tempfile.mkdtemp(prefix="roost-model-"))
        self.config = CFG
        self.illegal: list[str] = []
        self._check = state_table.check
        engine_module.check_transition = self._checked
        self.rig = self._run(self._new_rig())
        self.jobs: list[str] = []
        #: Accepted messages not yet seen delivered: (job, text).
        self.accepted: list[tuple[str, str]] = []
        self.texts = 0
        #: How often each outbox row was handed over (a report is delivered once).
        self.handed: dict[int, int] = {}
        #: Jobs a person stopped since their last turn began (none may fail for its own abort).
        self.stopped_by_person: set[str] = set()
        self.over_cap_from: set[str] | None = None
        self.live_before: set[str] = set()
        self.queued_before: set[str] = set()
        #: Asked, not answered yet (each must be answered once no abort is held back).
        self.pending: list[asyncio.Future[Any]] = []
        #: The store refuses every commit while set (``store_refuses``).
        self.disk = FullDisk.under(self.rig.store)
        self.worktree_jobs: list[str] = []

    # -- plumbing ---------------------------------------------------------------------------------
    def _checked(self, job_id: str, old: State, new: State, kind: str) -> None:
        try:
            self._check(job_id, old, new, kind)
        except state_table.IllegalTransition as exc:
            self.illegal.append(str(exc))
            raise

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def _new_rig(self, workers: dict[str, list[Any]] | None = None) -> Rig:
        rig = Rig(self.tmp, self.config)
        if workers is not None:  # the old daemon's workers, for what they were handed
            rig.workers = workers
        store = rig.store
        mark, undo = store.mark_reports, store.undeliver_reports

        def marked(ids: list[int], ts: float) -> None:
            for i in ids:
                self.handed[i] = self.handed.get(i, 0) + 1
            mark(ids, ts)

        def undelivered(ids: list[int]) -> None:
            for i in ids:
                self.handed[i] = self.handed.get(i, 0) - 1
            undo(ids)

        store.mark_reports, store.undeliver_reports = marked, undelivered  # type: ignore[method-assign]
        await rig.settle()
        return rig

    async def _call(self, coro: Any) -> Any:
        """Ask, and let every effect run; None when the answer waits on a later step (a close or a
        resume behind an abort not answered yet: ``answers_come`` checks they do come)."""
        task = asyncio.ensure_future(coro)
        await self.rig.settle()
        if not task.done():
            self.pending.append(task)
            return None
        try:
            return task.result()
        except ProtocolError as exc:
            assert exc.message, "a refusal says why"
            return exc

    def teardown(self) -> None:
        async def stop() -> None:
            self.rig.sup.engine.cancel_tasks()
            for fut in self.pending:
                fut.cancel()
            await asyncio.sleep(0)
        self._run(stop())
        self.rig.store.close()
        self.loop.close()
        engine_module.check_transition = self._check
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _do(self, act: Any) -> None:
        """Run a step that posts to the engine (it needs the loop running), then let it settle."""
        async def step() -> None:
            act()
            await self.rig.settle()
        self._run(step())

    def _worker(self, job_id: str) -> Any:
        slot = self.rig.sup.engine.slots.get(job_id)
        return slot.worker if slot is not None else None

    def _text(self) -> str:
        self.texts += 1
        return f"say m{self.texts}"

    # -- rules ------------------------------------------------------------------------------------
    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(parent=st.integers(0, MAX_JOBS), by_job=st.booleans())
    def spawn(self, parent: int, by_job: bool) -> None:
        owner = self.jobs[parent] if parent < len(self.jobs) else None
        args: dict[str, Any] = {"prompt": self._text(), "cwd": str(self.rig.paths.state_dir)}
        if owner is not None and not by_job:
            args["parent"] = owner
        row = self._run(self._call(self.rig.sup.spawn(args, owner if by_job else None)))
        if isinstance(row, dict):
            self.jobs.append(row["id"])
            self.accepted.append((row["id"], args["prompt"]))

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, MAX_JOBS), from_job=st.booleans())
    def send(self, pick: int, from_job: bool) -> None:
        job = self.jobs[pick % len(self.jobs)]
        parent = self.rig.sup.index.get(job).parent  # type: ignore[union-attr]
        caller = parent if from_job and parent else None
        text = self._text()
        result = self._run(self._call(self.rig.sup.send(job, text, caller)))
        if result is None or isinstance(result, dict) and result["outcome"] != "denied":
            self.accepted.append((job, text))
        if caller is None and not isinstance(result, ProtocolError):
            self.stopped_by_person.discard(job)

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, MAX_JOBS), tree=st.booleans(), late=st.booleans())
    def stop(self, pick: int, tree: bool, late: bool) -> None:
        job = self.jobs[pick % len(self.jobs)]
        worker = self._worker(job)
        if late and worker is not None:
            worker.abort_gate = asyncio.Event()  # the abort is answered only by ``abort_answered``
        result = self._run(self._call(self.rig.sup.stop(job, tree, None)))
        if isinstance(result, dict):
            self.stopped_by_person.update(result["ids"])
            self._forget_dropped(result["ids"])

    @rule()
    def abort_answered(self) -> None:
        for slots in self.rig.workers.values():
            for worker in slots:
                if worker.abort_gate is not None:
                    worker.abort_gate.set()
                    worker.abort_gate = None
        self._do(lambda: None)

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, MAX_JOBS))
    def close(self, pick: int) -> None:
        self._run(self._call(self.rig.sup.close(self.jobs[pick % len(self.jobs)])))

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, MAX_JOBS))
    def archive(self, pick: int) -> None:
        job = self.jobs[pick % len(self.jobs)]
        members = [job, *(j.id for j in self.rig.sup.index.descendants(job))]
        if not isinstance(self._run(self._call(self.rig.sup.archive(job))), ProtocolError):
            self._forget_dropped(members)

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, MAX_JOBS))
    def detach(self, pick: int) -> None:
        self._run(self._call(self.rig.sup.detach(self.jobs[pick % len(self.jobs)])))

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, MAX_JOBS), outcome=st.sampled_from(["ok", "failed", "waiting", "done", "blocked"]))
    def turn_end(self, pick: int, outcome: str) -> None:
        worker = self._worker(self.jobs[pick % len(self.jobs)])
        if worker is None or worker.exited or not worker.prompts:
            return
        if outcome in ("done", "blocked"):
            self._run(self._call(self.rig.sup.report(worker.job.id, outcome, f"{outcome} it")))
            outcome = "ok"
        extra = {"question": "which?"} if outcome == "waiting" else {}
        self._do(lambda: worker.on_event({"type": "turn_end", "run": worker.prompts[-1][0], "outcome": outcome,
                                          **extra}))

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, MAX_JOBS), until=st.sampled_from([None, -5, 3, 35]), retrying=st.booleans(),
          fails=st.booleans())
    def limited(self, pick: int, until: float | None, retrying: bool, fails: bool) -> None:
        """The provider bounces a call: the agent retries by itself, or gives up and the turn fails
        (a ``limited`` event with or without its reset, then a failed end; or a 429 in the error only)."""
        worker = self._worker(self.jobs[pick % len(self.jobs)])
        if worker is None or worker.exited or not worker.prompts:
            return
        event: dict[str, Any] = {"type": "limited", "words": "429 rate limited", "retrying": retrying}
        if until is not None:
            event["until"] = self.rig.clock.wall() + until

        def bounce() -> None:
            if not fails:
                worker.on_event(event)
            if fails or not retrying:
                worker.on_event({"type": "turn_end", "run": worker.prompts[-1][0], "outcome": "failed",
                                 "error": "429 Too Many Requests"})
        self._do(bounce)

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, MAX_JOBS))
    def retrying(self, pick: int) -> None:
        worker = self._worker(self.jobs[pick % len(self.jobs)])
        if worker is not None and not worker.exited:
            self._do(lambda: worker.on_event({"type": "retrying", "words": "Connection error.", "attempt": 1}))

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, MAX_JOBS))
    def ask_approval(self, pick: int) -> None:
        worker = self._worker(self.jobs[pick % len(self.jobs)])
        if worker is not None and not worker.exited:
            self.texts += 1
            self._do(lambda: worker.ask(f"w{self.texts}"))

    @rule(decision=st.sampled_from(["once", "job", "deny"]), pick=st.integers(0, 50))
    def answer_approval(self, decision: str, pick: int) -> None:
        pending = sorted(self.rig.sup.engine.approvals.jobs)
        if pending:
            aid = pending[pick % len(pending)]
            self._run(self._call(self.rig.sup.answer_approval(aid, decision, "", None)))

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, MAX_JOBS), code=st.sampled_from([0, 1, -9]))
    def worker_exits(self, pick: int, code: int) -> None:
        worker = self._worker(self.jobs[pick % len(self.jobs)])
        if worker is not None:
            self._do(lambda: worker.exit(code))

    @rule(seconds=st.sampled_from([0.5, 4, 31, 41, 51]))
    def time_passes(self, seconds: float) -> None:
        self._run(self.rig.advance(seconds))

    @rule(running=st.integers(0, 3), live=st.integers(0, 4))
    def reload(self, running: int, live: int) -> None:
        self.config = replace(CFG, max_running_jobs=running, max_live_workers=live)
        self.rig.config = self.config
        self.over_cap_from = None
        self._do(self.rig.sup.config_changed)

    @precondition(lambda self: not self.disk.full)
    @rule()
    def restart(self) -> None:
        """The daemon dies with its workers; a new engine recovers from the same store."""
        old = self.rig
        for slots in old.workers.values():
            for worker in slots:
                worker.exited = True  # they went with the daemon: no word of theirs reaches the new one

        async def again() -> Rig:
            old.sup.engine.cancel_tasks()
            old.store.close()
            return await self._new_rig(old.workers)
        self.rig = self._run(again())
        self.disk = FullDisk.under(self.rig.store)
        self.over_cap_from = None
        # what was waiting for the old daemon's workers is still waiting (or failed and said so)

    @rule(full=st.booleans())
    def store_refuses(self, full: bool) -> None:
        """The disk fills (every commit fails) or frees; once it frees, what waited is applied again."""
        self.disk.full = full
        if not full:
            self._do(self.rig.sup.engine.retry_stalled)

    @precondition(lambda self: self.jobs)
    @rule(pick=st.integers(0, MAX_JOBS), conn=st.integers(1, 2), resume=st.booleans(), attach=st.booleans())
    def attach_or_release(self, pick: int, conn: int, resume: bool, attach: bool) -> None:
        job = self.jobs[pick % len(self.jobs)]
        sup = self.rig.sup
        self._run(self._call(sup.attach(job, conn, resume) if attach else sup.release(job, conn)))

    @precondition(lambda self: not self.disk.full and not self._gated())
    @rule()
    def shutdown_and_restart(self) -> None:
        """The daemon shuts down on purpose (every worker closed through its mailbox), and starts again."""
        old = self.rig

        async def again() -> Rig:
            await asyncio.wait_for(old.sup.shutdown(), 30)
            assert not old.sup.engine.slots, "the shutdown waited for every exit"
            old.store.close()
            return await self._new_rig(old.workers)
        self.rig = self._run(again())
        self.disk = FullDisk.under(self.rig.store)
        self.over_cap_from = None

    @precondition(lambda self: not self.disk.full and not self.worktree_jobs and len(self.jobs) < MAX_JOBS)
    @rule(run_first=st.booleans())
    def archive_with_a_worktree(self, run_first: bool) -> None:
        """A job in its own git worktree is archived: the worktree is settled once its worker's exit is
        applied (no poll), removed or kept with the reason on the timeline."""
        repo = self.tmp / "repo"
        if not repo.exists():
            repo.mkdir()
            for cmd in (["init", "-q", "-b", "main"], ["-c", "user.email=m@x", "-c", "user.name=m", "commit", "-q",
                                                        "--allow-empty", "-m", "first"]):
                subprocess.run(["git", *cmd], cwd=repo, check=True, capture_output=True)

        async def go() -> str:
            row = await asyncio.wait_for(self.rig.sup.spawn({"prompt": self._text(), "cwd": str(repo),
                                                             "worktree": True}, None), 30)
            await self.rig.settle()
            if run_first:  # let its start (the worktree's setup, real git) go so a worker is there to exit
                await self._until(lambda: row["id"] in self.rig.sup.engine.slots or self._state(row["id"]) != "queued")
            await asyncio.wait_for(self.rig.sup.archive(row["id"]), 30)
            job = self.rig.sup.index.jobs[row["id"]]
            await self._until(lambda: job.worktree is None or "worktree" in self.rig.kinds(job.id))
            assert not self.rig.sup.engine.teardowns or row["id"] in self.rig.sup.engine.slots
            return row["id"]
        job_id = self._run(go())
        self.jobs.append(job_id)
        self.worktree_jobs.append(job_id)

    async def _until(self, done: Any, timeout: float = 20.0) -> None:
        """Wait for real work (git) to come to ``done`` (checked as the loop turns, bounded)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not done():
            assert loop.time() < deadline, "timed out waiting for the worktree's git work"
            await asyncio.sleep(0.01)

    def _state(self, job_id: str) -> str:
        return self.rig.sup.index.jobs[job_id].state.value

    def _gated(self) -> bool:
        return any(w.abort_gate is not None for ws in self.rig.workers.values() for w in ws)

    def _forget_dropped(self, ids: list[str]) -> None:
        """A stop or an archive settles the messages waiting for a job (docs/lifecycle.md)."""
        gone = set(ids)
        self.accepted = [(j, t) for j, t in self.accepted if j not in gone or self._delivered(j, t)]

    def _delivered(self, job: str, text: str) -> bool:
        return any(text == p for w in self.rig.workers.get(job, []) for _, p in w.prompts)

    # -- what always holds ----------------------------------------------------------------------------
    @invariant()
    def answers_come(self) -> None:
        self.pending = [f for f in self.pending if not f.done()]
        waits = self._gated() or self.disk.full  # an abort held back, or a worker's word the store refused
        assert waits or not self.pending, f"{len(self.pending)} requests never answered"

    @invariant()
    def nothing_waits_for_a_store_that_takes_writes(self) -> None:
        assert self.disk.full or not self.rig.sup.engine.stalled, self.rig.sup.engine.stalled

    @invariant()
    def no_illegal_transition(self) -> None:
        assert not self.illegal, self.illegal

    @invariant()
    def memory_equals_the_store(self) -> None:
        stored = {j.id: j for j in self.rig.store.jobs()}
        for job in self.rig.sup.index.jobs.values():
            on_disk = stored[job.id]
            for name in ("state", "parent", "archived_at", "pid", "reaped", "approvals", "depth", "last_text", "pinned",
                         "session", "worktree", "unseen", "question", "provider_running"):
                assert getattr(job, name) == getattr(on_disk, name), (job.id, name, getattr(job, name),
                                                                     getattr(on_disk, name))
        briefs = {b.id: b for b in map(Brief, self.rig.store._db.execute(READ))}
        assert briefs.keys() == stored.keys(), "every record has its brief, and no brief outlives its record"
        for job_id, brief in briefs.items():  # what a start would load says what the record says
            record = stored[job_id]
            said = {name: getattr(brief, name) for name in (*BRIEFED, "approvals")}
            assert said == {**{name: getattr(record, name) for name in BRIEFED},
                            "approvals": len(record.approvals)}, (job_id, said, record)

    @invariant()
    def kept_counts_equal_a_recount(self) -> None:
        eng, index = self.rig.sup.engine, self.rig.sup.index
        for job_id in index.jobs:
            assert eng.inbox[job_id] == self.rig.store.pending_count(job_id), job_id
            below = index.descendants(job_id)
            assert index.counts(job_id) == (len(below), sum(k.state in ACTIVE_STATES for k in below)), job_id

    @invariant()
    def each_report_is_delivered_once(self) -> None:
        assert all(n <= 1 for n in self.handed.values()), self.handed

    @invariant()
    def a_stopped_job_never_fails_for_its_own_abort(self) -> None:
        for job in self.stopped_by_person:
            entries = self.rig.store.timeline_page(job, limit=5000)["entries"]
            assert not any(e["kind"] == "state" and "aborted its turn by itself" in str(e["data"].get("reason"))
                           for e in entries), job

    @invariant()
    def caps_hold(self) -> None:
        """Past ``max_live_workers`` (right after a lowered cap or a restart) no new worker starts;
        at ``max_running_jobs`` no queued spawn does (the cap is on starting spawns: a message to a
        live worker, or a resume, is not held by it)."""
        eng, cfg = self.rig.sup.engine, self.config
        live = set(eng.slots)
        if cfg.max_live_workers and eng.queue.live_count() > cfg.max_live_workers:
            if self.over_cap_from is None:
                self.over_cap_from = self.live_before
            assert live <= self.over_cap_from, (live, self.over_cap_from)
        else:
            self.over_cap_from = None
        if cfg.max_running_jobs and eng.queue.running() > cfg.max_running_jobs:
            started = {j for j in live - self.live_before if j in self.queued_before}
            assert not started, (started, eng.queue.running(), cfg.max_running_jobs)
        self.live_before = live
        self.queued_before = {j.id for j in self.rig.sup.index.jobs.values() if j.state == State.QUEUED}

    @invariant()
    def a_rate_limited_job_runs_no_turn_and_its_reset_is_kept(self) -> None:
        eng = self.rig.sup.engine
        for job in self.rig.sup.index.jobs.values():
            slot = eng.slots.get(job.id)
            if job.state == State.RATE_LIMITED:
                assert slot is None or slot.turn is None, job.id
            else:
                assert job.limited_until is None and not job.limited_words, job.id
            if slot is not None and slot.turn is None:
                assert job.stall == "", (job.id, job.stall)  # a flag is on a turn: none runs, none shows

    @invariant()
    def no_job_both_queued_and_running(self) -> None:
        eng = self.rig.sup.engine
        for job_id in eng.queue.spawns:
            assert job_id not in eng.slots, job_id

    @invariant()
    def every_accepted_message_is_delivered_or_waiting(self) -> None:
        waiting = {(j, m["text"]) for j in self.rig.sup.index.jobs for m in self.rig.store.pending_messages(j)}
        lost = [(j, t) for j, t in self.accepted if (j, t) not in waiting and not self._delivered(j, t)]
        assert not lost, lost
