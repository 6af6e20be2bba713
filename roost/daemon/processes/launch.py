"""Making a job's worker: its driver, its launch (argv, environment, cwd) and the process object.

The engine calls ``make_worker``; tests of the engine pass a factory of their own that returns a
fake worker with the same handle, so the lifecycle runs in process with a fake clock. A job that a
spare worker can serve (roost/daemon/processes/spare.py) gets a worker that takes one when it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from roost.config import Config, DriverProfile
from roost.daemon.engine.slot import WorkerHandle
from roost.daemon.processes.spare import Spares
from roost.daemon.processes.process import Worker
from roost.daemon.processes.remote_worker import adopt_remote
from roost.daemon.processes.shim_process import adopt_opener
from roost.daemon.processes.shim_link import ShimRecord, token_hash
from roost.drivers import driver_for
from roost.drivers.base import Driver, DriverError, LaunchContext
from roost.models import Job
from roost.paths import Paths
from roost.rules import egress
from roost.rules.egress import Policy
from roost.sandbox.enclose import enclose
from roost.sandbox.network import network_walls, note_mark
from roost.sandbox.probe import Support

#: Takes one step of a worker's events (roost/daemon/engine/worker_events.py ``sinks``).
EventSink = Callable[[list[dict[str, Any]]], None]
ExitSink = Callable[[int, list[str]], Awaitable[None]]


@dataclass
class Made:
    """A worker not yet started, with what the engine needs to know about it."""

    worker: WorkerHandle
    ready_timeout: float
    session: str | None


WorkerFactory = Callable[[Job, str, EventSink, ExitSink], Made]
#: (the job, its shim's record, the last line of it committed, the sinks) -> the worker's handle.
AdoptFactory = Callable[[Job, ShimRecord, int, EventSink, ExitSink], WorkerHandle]


def network_policy(job: Job, profile: DriverProfile, driver: Driver) -> Policy:
    """The job's network (roost/rules/egress.py): what its record keeps from its spawn, else (a job from
    before policies) its profile's; its driver's provider hosts always in."""
    stored = job.driver_opts.get("egress") or egress.resolve(profile.network, profile.allow, None, None, None).stored()
    return egress.from_record(stored, driver.provider_hosts(profile.options))


def process_factory(paths: Paths, config: Callable[[], Config], spares: Spares | None = None,
                    support: Support | None = None) -> WorkerFactory:
    """The real factory: the job's driver launches an OS process, inside the job's walls when its
    record says it has them (``support``: what this machine can build, probed at the daemon's start),
    its network among them (roost/sandbox/network.py; a job without walls keeps the machine's).
    Raises ConfigError or DriverError (say, the profile is gone from the config) for the engine to report."""

    def make(job: Job, token: str, on_event: EventSink, on_exit: ExitSink) -> Made:
        settings = config()
        profile = settings.driver(job.driver)
        driver = driver_for(profile.kind)
        ctx = LaunchContext(socket=paths.socket, token=token, sessions_dir=paths.sessions_dir,
                            state_dir=paths.state_dir, options=profile.options, remote=bool(job.host))
        launch = driver.launch(job, ctx)
        mark = note_mark(token_hash(token))
        walled = job.driver_opts.get("walls") == "sandbox" and not job.host
        if walled:
            if support is None or not support.ok:  # the machine lost it since the spawn: no job runs bare
                raise DriverError(f"this job was spawned with a sandbox, and none can be built now: "
                                  f"{support.reason if support else 'not probed'}")
            net = network_walls(launch, job.id, network_policy(job, profile, driver),
                                driver.provider_urls(profile.options), token, mark, paths.runtime_dir)
            launch = enclose(net, job, paths, settings, support, driver.env_prefixes)
        # A spare started ahead of its job is outside any job's walls.
        opener = spares.open if spares is not None and not walled and spares.serves(job, profile) else None
        worker = Worker(job.id, launch, driver.adapter(job), paths.job_log(job.id), on_event=on_event,
                        on_exit=on_exit, opener=opener, note_mark=mark)
        ready = settings.host(job.host).ready_time(driver.ready_timeout) if job.host else driver.ready_timeout
        return Made(worker=worker, ready_timeout=ready, session=launch.session)

    return make


def adopt_factory(paths: Paths, config: Callable[[], Config], host_link: Callable[[str], Any] | None = None
                  ) -> AdoptFactory:
    """The handle of a worker a past daemon started, taken over through its shim's socket (on an SSH
    host: through a relay over ``host_link(NAME)``, the daemon's link to that host): the job's
    driver as a fresh start would have it, its adapter restored from the job's record (what it knew
    after the last line committed). Raises ConfigError
    or DriverError (its profile, or its host, is gone from the config) for the engine to report."""

    def adopt(job: Job, record: ShimRecord, committed: int, on_event: EventSink, on_exit: ExitSink) -> WorkerHandle:
        profile = config().driver(job.driver)
        driver = driver_for(profile.kind)
        ctx = LaunchContext(socket=paths.socket, token="", sessions_dir=paths.sessions_dir,  # it runs already
                            state_dir=paths.state_dir, options=profile.options, remote=bool(job.host))
        launch = driver.launch(job, ctx)
        adapter = driver.adapter(job)
        live = job.live or {}
        turn = live.get("turn") or {}
        try:
            adapter.restore(live.get("adapter") or {}, None if turn.get("kind") == "own" else turn.get("run"))
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:  # a record changed by hand
            raise DriverError(f"what its adapter knew cannot be read back from the job's record: {exc!r}") from None
        if record.remote is None:
            opener = adopt_opener(record, committed)
        elif host_link is None:
            raise DriverError(f"its worker runs on host {record.remote.host}, and this daemon reaches no hosts")
        else:
            settings = config()
            opener = adopt_remote(host_link(record.remote.host), record, committed, lambda: settings.host_lost_after)
        return Worker(job.id, launch, adapter, paths.job_log(job.id), on_event=on_event, on_exit=on_exit,
                      opener=opener, note_mark=note_mark(record.token_hash))

    return adopt
