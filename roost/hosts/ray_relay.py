"""A job's worker on a Ray cluster, as the daemon sees it: a local process that speaks the worker
protocol on its stdio and relays it to a detached actor on the cluster (``roost.hosts.ray_actor``).

The daemon starts this instead of the worker (``roost/hosts/placement.py`` rewrites the launch, as
for an SSH host), with the path of a setup file (0600, removed once read: it holds the cluster's
token and the job's). It

- checks the cluster requires a token (a call to its GCS without one must be refused) and refuses
  one that does not unless the host says ``insecure = true``;
- connects (``ray.init``, namespace ``roost``), ends a leftover actor of the job's name, and creates
  the job's actor (named by the job id, detached) with the host's CPUs and resources, so Ray places it;
- moves stdin to the actor (``write``, then ``close_stdin`` at EOF) and the actor's output back to
  stdout and stderr (``read``, a long poll), and exits with the worker's exit code.

When the actor dies (its node removed or lost), the relay says so in Ray's words on stderr and exits
``ACTOR_LOST``: the job fails with that reason, and a message resumes it on another node. SIGTERM
or SIGHUP ends the worker through the actor, then the actor.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from roost.hosts.bundle import bundle
from roost.hosts.remote import load_setup

#: The namespace of roost's actors (a detached actor outside a named one cannot be found again).
NAMESPACE = "roost"
#: Exit codes: the cluster was refused or unreachable; the actor (or its node) died.
REFUSED = 2
ACTOR_LOST = 3
NOT_INSTALLED = 127
#: How long a read waits for output, and how long a relay may be silent before its actor ends (the
#: host's ``lost_after`` when the setup gives it).
READ_WAIT = 1.0
LEASE = 30.0
#: How long an actor may be unavailable (its node not answering) before the worker counts as lost.
UNAVAILABLE_FOR = 15.0
UNAVAILABLE_PAUSE = 0.5
#: This process's start, and how long before the daemon's ready time it gives up waiting for a node.
STARTED = time.monotonic()
PLACE_MARGIN = 2.0
#: How long a stop waits for the actor to end the worker: under the daemon's 3 s from SIGTERM to SIGKILL.
STOP_WAIT = 2.5
#: How long the relay waits for Ray to know why an actor died.
CAUSE_WAIT = 5.0
#: How long the GCS may take to answer the token probe.
PROBE_TIMEOUT = 10
INSTALL_HINT = "pip install 'roost[ray]'"


def say(text: str) -> None:
    print(f"roost: {text}", file=sys.stderr, flush=True)


def _host_of(address: str) -> str:
    return address.rsplit(":", 1)[0].strip("[]")


def _loopback(address: str) -> bool:
    host = _host_of(address)
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def needs_token(address: str) -> bool | str:
    """Whether the cluster refuses a call without a token (True), answers it (False), or cannot be
    reached (the reason). Asked with the process's auth mode off (``serve`` set it before Ray's import),
    before it is set for ``ray.init``."""
    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError

    host, _, port = address.rpartition(":")
    try:  # Ray's own client waits ~40 s for a GCS that is not there: a refused connection says it at once
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT).close()
    except (OSError, ValueError) as exc:
        return f"cannot connect to {address}: {getattr(exc, 'strerror', None) or exc}"
    try:
        GcsClient(address=address).internal_kv_get(b"roost-probe", None, timeout=PROBE_TIMEOUT)
    except AuthenticationError:
        return True
    except Exception as exc:  # noqa: BLE001 - Ray's own words say why it is unreachable
        return f"{type(exc).__name__}: {exc}"
    return False


def _use_token(token: str) -> None:
    """Make this process present ``token`` to the cluster (Ray reads its auth settings once)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def connect(setup: dict[str, Any]) -> int | None:
    """``ray.init`` to the cluster once its token rule holds; an exit code when it cannot be."""
    import ray

    address, name = setup["address"], setup["host"]
    required = needs_token(address)
    if isinstance(required, str):
        say(f"Ray cluster {address} (host {name}) unreachable: {required.splitlines()[0][:300]}")
        return REFUSED
    if not required and not setup["insecure"]:
        say(f"host {name}: the Ray cluster at {address} requires no auth token, so anybody who can reach its "
            f"ports can run code on it; roost refuses it (start it with RAY_AUTH_MODE=token, or set "
            f"insecure = true in [hosts.{name}] for a cluster you trust without one)")
        return REFUSED
    if required and not setup["token"]:
        say(f"host {name}: the Ray cluster at {address} requires an auth token; give token_env or token_file "
            f"in [hosts.{name}]")
        return REFUSED
    if setup["token"]:
        _use_token(setup["token"])
    # No node address of ours: Ray joins through a raylet of this machine that it finds itself (the
    # cluster's head first). Naming one (say the loopback address the cluster was reached at) finds
    # none when the nodes registered with this machine's own address, as ``ray start`` does.
    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.ERROR)
    return None


def create_actor(setup: dict[str, Any]) -> Any:
    """The job's actor, placed by Ray; a leftover one of the same name (a relay that died) ended first."""
    import ray
    from ray import cloudpickle

    from roost.hosts import ray_actor

    cloudpickle.register_pickle_by_value(ray_actor)  # the nodes need not have roost installed
    job_id = setup["job"]
    try:
        ray.kill(ray.get_actor(job_id, namespace=NAMESPACE), no_restart=True)
    except ValueError:  # none: the usual case
        pass
    cls = ray.remote(ray_actor.WorkerActor)
    shipped = bundle()
    options = {"name": job_id, "namespace": NAMESPACE, "lifetime": "detached", "max_restarts": 0,
               "max_concurrency": 4, "num_cpus": setup["num_cpus"], "resources": setup["resources"]}
    for attempt in range(50):  # a killed actor's name is freed a moment later
        try:
            return cls.options(**options).remote(job_id, shipped.name, shipped.data,
                                                 setup["worker"], setup.get("lease", LEASE))
        except ValueError:
            if attempt == 49:
                raise
            threading.Event().wait(0.1)


class Relay:
    """The two directions between this process's stdio and the actor."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.stopping = threading.Event()
        #: Whether the actor runs (it answered ``where``): until then a stop only kills it.
        self.started = False

    def feed(self) -> None:
        """stdin to the actor until EOF, then EOF to the worker."""
        import ray

        fd = sys.stdin.fileno()
        try:
            while data := os.read(fd, 1 << 16):
                if not ray.get(self.actor.write.remote(data)):
                    return
            ray.get(self.actor.close_stdin.remote())
        except Exception:  # noqa: BLE001 - the actor is gone: the read loop says why
            return

    def pump(self) -> int:
        """The actor's output to stdout and stderr until the worker exits: its code."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        unavailable = 0
        while True:
            try:
                got = ray.get(self.actor.read.remote(READ_WAIT))
            except ActorUnavailableError as exc:  # a moment without its node: Ray says died if it is gone
                unavailable += 1
                if unavailable * UNAVAILABLE_PAUSE < UNAVAILABLE_FOR:
                    time.sleep(UNAVAILABLE_PAUSE)
                    continue
                say(f"the worker's Ray actor was unavailable for {UNAVAILABLE_FOR:.0f}s: {ray_words(exc)}")
                return ACTOR_LOST
            except RayActorError as exc:
                if self.stopping.is_set():
                    return 143
                say(f"the worker's Ray actor died: {ray_words(self.death(exc))}")
                return ACTOR_LOST
            unavailable = 0
            for stream, data in ((sys.stdout, got["out"]), (sys.stderr, got["err"])):
                if data:
                    stream.buffer.write(data)
                    stream.buffer.flush()
            if got["exit"] is not None:
                return int(got["exit"])

    def death(self, exc: BaseException) -> BaseException:
        """Why the actor died, as Ray says it: a call cut short says only "died unexpectedly", a new
        call to the dead actor gets the cause (its node died, it was killed, its process exited) once
        the cluster knows it."""
        import ray

        if "because" in str(exc):
            return exc
        deadline = time.monotonic() + CAUSE_WAIT
        while time.monotonic() < deadline:  # the cause is known once the cluster has seen the node go
            try:
                ray.get(self.actor.where.remote(), timeout=CAUSE_WAIT)
            except ray.exceptions.RayActorError as cause:
                if "because" in str(cause):
                    return cause
                exc = cause
            except Exception:  # noqa: BLE001 - no better words than the first error's
                break
            time.sleep(0.2)
        return exc

    def stop(self) -> None:
        """SIGTERM/SIGHUP: end the worker through the actor (its stdin closed, the wrapper ends the
        tree), then the actor — within the daemon's grace before its SIGKILL, and at once for an actor
        still waiting for a node."""
        import ray

        self.stopping.set()
        if self.started:
            try:
                ray.get(self.actor.end.remote(), timeout=STOP_WAIT)
            except Exception:  # noqa: BLE001 - gone already, or slow: the kill below closes its pipes
                pass
        ray.kill(self.actor, no_restart=True)


#: The "name: value" lines Ray lists under an actor's error (class_name, actor_id, pid, ip, …).
FIELD = re.compile(r"[a-z_]+: \S*")


def ray_words(exc: BaseException) -> str:
    """The gist of a Ray error: its first lines, without the traceback Ray puts in front."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Traceback", "File ", "^"))
              and not FIELD.fullmatch(line)]
    return " ".join(useful[:4])[:500] or type(exc).__name__


@contextlib.contextmanager
def quiet_stderr() -> Iterator[list[str]]:
    """Hold what is written to fd 2 (Ray's C++ logs go there directly) in a file while the block
    runs; on leaving, pass on only the lines roost said (and those the block adds to the list), so
    a job's reason is roost's words and Ray's, not Ray's start-up noise."""
    said: list[str] = []
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield said
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read(1 << 20).decode(errors="replace").splitlines()
            for line in [line for line in lines if line.startswith("roost: ")] + [f"roost: {s}" for s in said]:
                print(line, file=sys.stderr, flush=True)


def serve(setup: dict[str, Any]) -> int:
    os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):  # the daemon's own are not the host's
        os.environ.pop(name, None)
    os.environ["RAY_AUTH_MODE"] = "disabled"  # read once, at import: the token probe goes without one
    if _loopback(setup["address"]):  # else Ray swaps a loopback address for this machine's own
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        import ray
    except ImportError:
        say(f"host {setup['host']} is a Ray cluster and Ray is not installed here: {INSTALL_HINT}")
        return NOT_INSTALLED
    with quiet_stderr() as said:  # Ray's own log lines while it connects; kept only for a failure
        try:
            code = connect(setup)
        except Exception as exc:  # noqa: BLE001 - ray.init's own failure is the job's reason
            code = REFUSED
            said.append(f"cannot connect to the Ray cluster at {setup['address']}: {ray_words(exc)}")
    if code is not None:
        return code
    try:
        actor = create_actor(setup)
    except Exception as exc:  # noqa: BLE001 - Ray refused the options (a resource's name, its amount)
        say(f"the worker's Ray actor could not be created: {ray_words(exc)}")
        return REFUSED
    relay = Relay(actor)

    def on_signal(*_: Any) -> None:  # also while the actor waits for a node: it must not be left behind
        threading.Thread(target=lambda: (relay.stop(), os._exit(143)), daemon=True).start()

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    # Placed before the daemon stops waiting for the worker (the driver's ready time, counted from
    # this process's start), or given up here with the reason and the pending actor killed.
    within = setup.get("ready_within", 60.0) - (time.monotonic() - STARTED) - PLACE_MARGIN
    try:
        where = ray.get(actor.where.remote(), timeout=max(within, 1.0))
    except ray.exceptions.GetTimeoutError:
        say(f"no node of the Ray cluster took the worker within {max(within, 1.0):.0f}s: it needs "
            f"num_cpus = {setup['num_cpus']:g}{''.join(f', {k} = {v:g}' for k, v in setup['resources'].items())} "
            f"free on one node (host {setup['host']} and its driver profile say so)")
        ray.kill(actor, no_restart=True)
        return REFUSED
    except ray.exceptions.RayActorError as exc:
        say(f"the worker's Ray actor could not start: {ray_words(exc)}")
        return ACTOR_LOST
    relay.started = True
    say(f"job {setup['job']} runs on Ray node {where['node']}")
    threading.Thread(target=relay.feed, daemon=True).start()
    code = relay.pump()
    if not relay.stopping.is_set():
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - the actor is gone already
            pass
    return code


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    sys.stdout.flush()
    code = serve(load_setup(Path(args[0])))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # Ray's threads would hold a plain exit up


if __name__ == "__main__":
    main()
