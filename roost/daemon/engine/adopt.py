"""Re-adoption: a worker a past daemon started and left running under its shim becomes this daemon's
again (docs/reliability.md, "Workers that outlive the daemon"). Recovery found it
(roost/daemon/storage/recovery.py ``adoptable``); an ``Adopt`` message per job makes its slot as it
was, on a handle connected to the shim's socket; a ``Resynced`` after the shim's replay settles a
turn whose prompt never reached the worker."""

from __future__ import annotations

import asyncio
from typing import Any

from roost.config import ConfigError
from roost.daemon.engine.messages import Adopt, Exited, Resynced
from roost.daemon.engine.ports import EngineApi
from roost.daemon.engine.slot import Phase, Slot, turn_of
from roost.daemon.engine.turns import deliver_next
from roost.daemon.engine.worker_events import sinks
from roost.drivers.base import DriverError
from roost.models import Job, State

#: How long a re-adopted worker has to answer get_state (behind what its shim kept).
ADOPT_TIMEOUT = 30.0


def on_adopt(eng: EngineApi, job: Job, msg: Adopt) -> None:
    """Take over the worker a past daemon left running (docs/reliability.md): a slot as it was —
    ready, its turn in flight with the same run token — on a handle that connects to its shim; what the
    worker said since the last commit comes again, and nothing before it. A shim that cannot be
    reached fails the job through its exit, as a worker's death would."""
    if job.id in eng.slots or eng.adopt_worker is None:
        return
    live = job.live or {}
    holder: list[Any] = []
    on_event, on_exit = sinks(eng, job.id, holder)
    committed = int(live.get("seq", 0))
    try:
        worker = eng.adopt_worker(job, msg.record, committed, on_event, on_exit)
    except (ConfigError, DriverError) as exc:
        msg.record.tree.kill_now()
        msg.record.kill()
        eng.set_state(job, State.FAILED, "failure", reason=f"could not re-adopt its worker: {exc}")
        job.pid, job.reaped = None, True
        eng.save(job)
        return
    holder.append(worker)
    now = eng.monotonic()
    turn = turn_of(live.get("turn"))
    slot = Slot(worker=worker, token_hash=msg.record.token_hash, ready_timeout=0.0, phase=Phase.READY, turn=turn, seq=committed,
                adapter=live.get("adapter"), idle_since=None if turn else now, turn_started_at=now if turn else None,
                last_event_at=now)
    if turn is None and job.state == State.DONE:
        # Done when the last daemon went (its monotonic times went with it): the auto-close wait
        # starts again from now, so its worker is closed as the live daemon would have closed it.
        slot.done_at = slot.last_report_at = now
    eng.slots[job.id] = slot
    eng.timeline(job, "worker", pid=job.pid, adopted=True)
    for entry in job.approvals:  # its agent still waits on them (recovery.adoptable): asked again, same id
        slot.approvals[entry["id"]] = (str(entry["wid"]), now)
        eng.approvals.jobs[entry["id"]] = job.id
        eng.timeline(job, "approval", id=entry["id"], asked=True, again=True, tool=entry["tool"], what=entry["what"])
    eng.spawn_task(_adopt(eng, job.id, worker, msg.record))


async def _adopt(eng: EngineApi, job_id: str, worker: Any, record: Any) -> None:
    try:
        await worker.start()
    except OSError as exc:  # its shim is gone, or is not the one started: what is left of it goes
        await record.tree.end(grace=0)
        record.kill()
        eng.post(job_id, Exited(worker, -9, [f"could not re-adopt its worker: {exc}"]))
        return
    try:  # answered after every line the shim kept: a turn_end among them is applied first
        state = await worker.request("get_state", timeout=ADOPT_TIMEOUT)
    except (asyncio.TimeoutError, ConnectionError):
        return  # it exited (Exited says how), or hangs: the stall rules see to a turn that never ends
    eng.post(job_id, Resynced(worker, bool((state.get("data") or {}).get("busy"))))


def on_resynced(eng: EngineApi, job: Job, msg: Resynced) -> None:
    """A turn the record says is in flight but the worker never began: its prompt was committed and
    the daemon went before writing it to the shim. It was not delivered: it goes again."""
    slot = eng.current(job, msg)
    turn = slot.turn if slot is not None else None
    if slot is None or turn is None or msg.busy or turn.kind == "own":
        return
    slot.turn = None
    slot.idle_since = eng.monotonic()
    if turn.kind == "prompt":
        eng.put_back_message(job.id, turn.ids[0])
    else:
        eng.store.undeliver_reports(turn.ids)
    eng.timeline(job, "error", message="the prompt had not reached the worker when the daemon stopped; it goes again")
    if job.state == State.WORKING:
        eng.set_state(job, turn.state_before, "prompt-refused")
    eng.save(job)
    deliver_next(eng, job)
