"""``explain``: why a job is in its state — the change that put it there, by which rule and whom, and
when — what it waits for (a person, a message, its children, a run slot, a live-worker place, its
host, a usage limit's reset, a budget, the store), and what would move it next (its timers, soonest
first, and what someone can do). ``roost explain JOB`` prints it; people attach it to bug reports.

A read: it posts nothing. It gathers what the daemon holds of the job — its record, the entries around
its last ``state`` entry (two indexed reads of its timeline), its worker's slot, its place in the run
queue, its timers — and roost/rules/explain.py says it in words. A job reaches its own subtree (as
``logs``: the answer quotes its timeline).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roost.daemon.engine import spend
from roost.daemon.ops.operation import MINE, Context, Operation, Request
from roost.models import Job
from roost.protocol import JOB_ID
from roost.rules import explain as words
from roost.rules.approvals import next_timeout
from roost.rules.counts import slot_wait
from roost.rules.lifecycle import auto_close_at, close_blocker, hold_until, reap_at

if TYPE_CHECKING:
    from roost.daemon.engine.core import Engine
    from roost.daemon.supervisor import Supervisor


def explain(sup: Supervisor, job_id: str) -> dict[str, Any]:
    """The answer for one job (roost/rules/explain.py ``explain``)."""
    job = sup.index.require(job_id)
    return words.explain(facts(sup.engine, job))


def facts(eng: Engine, job: Job) -> words.Facts:
    """What the daemon knows of ``job``, gathered for the words."""
    store = eng.store
    change = store.newest_entry(job.id, "state")
    around: dict[str, Any] = {}
    if change is not None:
        seq = change["seq"]
        before = store.timeline_page(job.id, limit=1, before=seq)["entries"]
        after = store.timeline_page(job.id, limit=1, after=seq)["entries"]
        around = {"previous": store.newest_entry(job.id, "state", before=seq),
                  "before": before[0] if before else None, "after": after[0] if after else None}
    slot = eng.slots.get(job.id)
    turn = slot.turn if slot is not None else None
    worker = eng.facts(job)
    return words.Facts(
        job=job, change=change, spawned=None if change is not None else store.newest_entry(job.id, "spawned"),
        phase=slot.phase.value if slot is not None else "",
        turn=None if turn is None else {"run": turn.run, "kind": turn.kind,
                                        "ending": f"{turn.ending.why} by {turn.ending.by}" if turn.ending else None},
        inbox=eng.inbox[job.id], running_children=eng.index.counts(job.id)[1], queued=tuple(_queued(eng, job)),
        budget=spend.turn_refusal(eng, job), store=eng.stalled.get(job.id),
        blocker=close_blocker(job, worker, eng.index.kids(job.id)), timers=_timers(eng, job), **around)


def _queued(eng: Engine, job: Job) -> list[words.Wait]:
    """Where the run queue holds the job, and what for (roost/daemon/engine/run_queue.py)."""
    queue, config = eng.queue, eng.config
    out = []
    if job.id in queue.releasing:
        out.append(words.Wait("worker", "its start: the run queue let it go, its Start is on its way"))
    if job.id in queue.live:
        out.append(words.Wait("live_place", f"a live-worker place (max_live_workers = {config.max_live_workers}: "
                                            f"{queue.live_count()} held), number {queue.live.index(job.id) + 1} in line; "
                                            "an idle worker closes for it, or the next one that ends"))
    waiting = queue.hosts.get(job.host)
    if waiting is not None and job.id in waiting:
        out.append(words.Wait("host", f"room on host {job.host} (max_running_jobs = "
                                      f"{config.host(job.host).max_running_jobs}: {queue.host_load(job.host)} live), "
                                      f"number {list(waiting).index(job.id) + 1} in line"))
    if job.id in queue.spawns:
        out.append(words.Wait("run_slot", f"{slot_wait(queue.running(), config.max_running_jobs).removeprefix('waiting for ')}, number "
                                          f"{list(queue.spawns).index(job.id) + 1} in line"))
    return out


def _timers(eng: Engine, job: Job) -> dict[str, float]:
    """When each time rule acts on the job next, in epoch seconds (only a job with a worker has them)."""
    if job.id not in eng.slots:
        return {}
    worker, kids, config = eng.facts(job), eng.index.kids(job.id), eng.config
    due = {"auto_close": auto_close_at(job, worker, kids, config), "reap": reap_at(job, worker, kids, config),
           "hold": hold_until(worker, config), "approval_timeout": next_timeout(worker.approvals_asked,
                                                                                config.approval_timeout),
           "limit": worker.limit_at, "stall": worker.stall_due}
    now, mono = eng.clock(), eng.monotonic()
    return {name: now + (at - mono) for name, at in due.items() if at is not None}


def _run(ctx: Context, req: Request) -> dict[str, Any]:
    return explain(ctx.supervisor, req.args["job"])


OPERATION = Operation("explain", {"job": JOB_ID}, MINE, _run)
