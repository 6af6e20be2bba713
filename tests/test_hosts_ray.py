"""Workers on a Ray cluster: a real cluster on this machine, started as users start one (``ray start
--head --temp-dir=DIR``, then ``ray start --address=…`` for each further node, every node asked for
127.0.0.1), started once for the module with token auth on: a head that takes no workers (as the
daemon's machine would be: ``--num-cpus=0``), node ``a`` with the custom resource ``gpu_box``, node
``b`` without. Nothing of the cluster's is in the daemon's environment (no TMPDIR, no RAY_ variable):
the host's address and token are all roost is given. Each node's raylet has ``ROOST_TEST_NODE`` set
to its name, so a built-in agent's ``run echo`` says where Ray placed it."""

from __future__ import annotations

import ast
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import procs_where

from roost.config import ConfigError, parse_config

try:
    import ray  # noqa: F401 - only whether it is there
    NO_RAY = ""
except ImportError as exc:  # CI installs it (the test extra); a bare checkout may not have it
    NO_RAY = f"Ray cannot be imported: {exc} (pip install 'roost[ray]')"
#: The tests that need Ray itself (a cluster, or the relay joining one); the rest run without it.
needs_ray = pytest.mark.skipif(bool(NO_RAY), reason=NO_RAY)

FINISHED = ("idle", "done", "failed", "stopped", "blocked")
TOKEN_VAR = "ROOST_TEST_RAY_TOKEN"
#: Small nodes: the machine has 2 cores shared with other work.
NODE_ARGS = ("--node-ip-address=127.0.0.1", "--object-store-memory=80000000", "--disable-usage-stats")
ECHO_NODE = "run echo node=$ROOST_TEST_NODE"
#: Marks every process of a test cluster (in its environment), so the test ends only its own.
CLUSTER_VAR = "ROOST_TEST_RAY_CLUSTER"


def _ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _clean_env(**values: str) -> dict[str, str]:
    """This process's environment without Ray's variables or TMPDIR, with ``values``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "TMPDIR"}
    return {**env, **values}


class Cluster:
    """A cluster from Ray's CLI: ``ray start --head --temp-dir=DIR``, and nodes by ``ray start --address``."""

    def __init__(self, token: str | None) -> None:
        self.temp = tempfile.mkdtemp(prefix="rt")  # short: Ray's sockets live under it
        self.mark = secrets.token_hex(8)
        self.auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token} if token else {"RAY_AUTH_MODE": "disabled"}
        self.address = f"127.0.0.1:{_free_port()}"

    def ray_start(self, node: str, *args: str) -> None:
        env = _clean_env(**self.auth, ROOST_TEST_NODE=node, **{CLUSTER_VAR: f"{self.mark}:{node}"})
        done = subprocess.run([_ray_cli(), "start", *args, *NODE_ARGS], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    def start_head(self, cpus: int) -> None:
        self.ray_start("head", "--head", f"--temp-dir={self.temp}", f"--port={self.address.rsplit(':', 1)[1]}",
                       f"--num-cpus={cpus}", "--include-dashboard=false")

    def add(self, name: str, **resources: float) -> None:
        self.ray_start(name, f"--address={self.address}", "--num-cpus=2",
                       *([f"--resources={json.dumps(resources)}"] if resources else []))

    def procs(self, node: str | None = None) -> list[int]:
        """This cluster's processes (or one node's), by the mark in their environment."""
        prefix = f"{CLUSTER_VAR}={self.mark}:".encode()
        out = []
        for entry in Path("/proc").iterdir():
            try:
                environ = (entry / "environ").read_bytes() if entry.name.isdigit() else b""
            except OSError:
                continue
            marks = [item[len(prefix):] for item in environ.split(b"\0") if item.startswith(prefix)]
            if marks and (node is None or marks[0] == node.encode()):
                out.append(int(entry.name))
        return out

    def kill(self, node: str | None = None) -> None:
        for pid in self.procs(node):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def shutdown(self) -> None:
        self.kill()
        shutil.rmtree(self.temp, ignore_errors=True)


class Nodes:
    """The module's cluster, and its worker nodes by name."""

    def __init__(self, cluster: Cluster, token: str) -> None:
        self.cluster = cluster
        self.token = token

    @property
    def address(self) -> str:
        return self.cluster.address

    def add(self, name: str, **resources: float) -> None:
        self.cluster.add(name, **resources)

    def remove(self, name: str) -> None:
        """The node's machine gone: every process of it killed at once."""
        self.cluster.kill(name)


@pytest.fixture(scope="module")
def nodes() -> Iterator[Nodes]:
    if NO_RAY:
        pytest.skip(NO_RAY)
    token = secrets.token_hex(16)
    started = time.monotonic()
    cluster = Cluster(token)
    try:
        cluster.start_head(cpus=0)
        found = Nodes(cluster, token)
        found.add("a", gpu_box=1)
        found.add("b")
        print(f"cluster of 3 nodes up in {time.monotonic() - started:.1f}s")
        yield found
    finally:
        cluster.shutdown()


def _config(nodes: Nodes, extra: str = "") -> str:
    return (extra + f'[hosts.ray]\nkind = "ray"\naddress = "{nodes.address}"\ntoken_env = "{TOKEN_VAR}"\n'
            'num_cpus = 0.1\n\n'
            f'[hosts.gpu]\nkind = "ray"\naddress = "{nodes.address}"\ntoken_env = "{TOKEN_VAR}"\n'
            'num_cpus = 0.1\nresources = { gpu_box = 0.01 }\n')


@pytest.fixture
def start(daemon_factory, nodes: Nodes, monkeypatch: pytest.MonkeyPatch):
    """A daemon with hosts ray and gpu on the module's cluster; ``extra`` goes first (ADDRESS and TOKEN
    in it stand for the cluster's)."""
    monkeypatch.setenv(TOKEN_VAR, nodes.token)
    return lambda extra="": daemon_factory(_config(nodes, extra.replace("ADDRESS", nodes.address)
                                                   .replace('"TOKEN"', f'"{TOKEN_VAR}"')))


def node_of(daemon, job_id: str, after: int = 0) -> str:
    """The node the job's agent said it ran on (its ``run echo``), the ``after``-th such line on."""
    said = daemon.wait_for(lambda: [t for t in daemon.texts(job_id) if t.startswith("node=")][after:],
                           timeout=30, what=f"job {job_id} to say its node")
    return said[0].strip().removeprefix("node=")


def worker_procs(job_id: str) -> list[int]:
    """This job's agent processes on the nodes (the built-in agent names its session file)."""
    name = f"{job_id}.jsonl".encode()
    return procs_where(lambda argv: any(name in a for a in argv) and not any(b"roost.hosts.ray_relay" in a for a in argv))


def test_a_job_on_ray_takes_turns_and_is_placed_by_a_custom_resource(start, tmp_path):
    daemon = start('[drivers.on-gpu]\nkind = "builtin"\nresources = { gpu_box = 0.01 }\n\n')
    started = time.monotonic()
    job = daemon.spawn(f"say hello from the cluster\n{ECHO_NODE}", host="ray", cwd=str(tmp_path))
    row = daemon.wait_state(job, *FINISHED, timeout=60)
    print(f"spawn to idle on Ray: {time.monotonic() - started:.2f}s")
    assert row["state"] == "idle", row["reason"]
    assert row["host"] == "ray" and "hello from the cluster" in daemon.texts(job)
    assert node_of(daemon, job) in ("a", "b")  # never the head: it takes no workers
    daemon.call("send", job=job, text="say a second turn")
    daemon.wait_for(lambda: "a second turn" in daemon.texts(job), timeout=30, what="the second turn")
    # Placement: only node a has gpu_box, so every job of host gpu runs there.
    for _ in range(2):
        placed = daemon.spawn(ECHO_NODE, host="gpu", cwd=str(tmp_path))
        assert daemon.wait_state(placed, *FINISHED, timeout=60)["state"] == "idle"
        assert node_of(daemon, placed) == "a"
    # The same by a driver profile's resources, and by a spawn's (the CLI's --resource), on the host
    # without any.
    profiled = daemon.spawn(ECHO_NODE, host="ray", driver="on-gpu", cwd=str(tmp_path))
    spawned = subprocess.run([sys.executable, "-m", "roost.cli", "spawn", "--host", "ray", "--cwd", str(tmp_path),
                              "--resource", "gpu_box=0.01", "--num-cpus", "0.2", ECHO_NODE], env=daemon.env,
                             capture_output=True, text=True, timeout=60)
    assert spawned.returncode == 0, spawned.stderr
    asked = spawned.stdout.strip()
    assert daemon.show(asked)["driver_opts"]["resources"] == {"gpu_box": 0.01}
    for placed in (profiled, asked):
        assert daemon.wait_state(placed, *FINISHED, timeout=60)["state"] == "idle"
        assert node_of(daemon, placed) == "a"
    listed = subprocess.run([sys.executable, "-m", "roost.cli", "hosts"], env=daemon.env, capture_output=True,
                            text=True)
    assert f"gpu  ray {daemon_address(daemon)}" in listed.stdout and "idle" in listed.stdout, listed.stdout
    checked = subprocess.run([sys.executable, "-m", "roost.cli", "hosts", "check", "gpu"], env=daemon.env,
                             capture_output=True, text=True)
    assert checked.returncode == 0 and "Ray is installed here" in checked.stdout, checked.stdout + checked.stderr
    print("idle jobs' relays:", "; ".join(memory(p) for p in relay_procs()))
    print("their actors:", "; ".join(memory(p) for p in procs_named(b"ray::WorkerActor")))


def procs_named(word: bytes, but: bytes | None = None) -> list[int]:
    """The processes whose command line holds ``word`` (and not ``but``)."""
    out = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
        except OSError:
            continue
        if word in cmdline and (but is None or but not in cmdline):
            out.append(int(entry.name))
    return out


def relay_procs() -> list[int]:
    """The relays of this machine's Ray jobs (each under its shim, whose command line names the relay
    too: it is left out)."""
    return procs_named(b"roost.hosts.ray_relay", but=b"programs/shim.py")


def memory(pid: int) -> str:
    """A process's resident and own (private) memory, for the record."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0]) / 1024
    own = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return f"{fields.get('Rss', 0):.0f} MB resident ({own:.0f} MB its own)"


def daemon_address(daemon) -> str:
    from roost.config import load_config

    return load_config(daemon.config_path).host("gpu").address


def test_stop_mid_turn_then_close_end_the_worker_on_its_node(start, tmp_path):
    daemon = start()
    job = daemon.spawn("wait-for never", host="ray", cwd=str(tmp_path))
    daemon.wait_state(job, "working", timeout=60)
    daemon.wait_for(lambda: worker_procs(job), what="the worker on its node")
    daemon.call("stop", job=job)
    assert daemon.wait_state(job, "stopped", timeout=15)["state"] == "stopped"
    daemon.close_after_turn(job, timeout=15)
    daemon.wait_row(job, lambda r: r["pid"] is None, timeout=20)
    daemon.wait_for(lambda: not worker_procs(job), timeout=15, what="the worker on the node to end")


def test_a_job_no_node_can_take_fails_before_its_ready_time_saying_what_it_needs(start, tmp_path):
    daemon = start('[hosts.nowhere]\nkind = "ray"\naddress = "ADDRESS"\ntoken_env = "TOKEN"\nnum_cpus = 0.1\n'
                   'resources = { no_such_box = 1 }\nplace_within = 5\n\n')
    job = daemon.spawn("say hi", host="nowhere", cwd=str(tmp_path))
    reason = daemon.wait_state(job, "failed", timeout=40)["reason"]
    print("no node:", reason)
    assert "no node of the Ray cluster took the worker" in reason and "no_such_box = 1" in reason, reason


def test_a_sigterm_to_the_relay_ends_the_worker_on_its_node_through_the_actor(start, tmp_path):
    daemon = start()
    job = daemon.spawn("wait-for never", host="ray", cwd=str(tmp_path))
    daemon.wait_state(job, "working", timeout=60)
    daemon.wait_for(lambda: worker_procs(job), what="the worker on its node")
    relay = [p for p in relay_procs() if f"{job}.json".encode() in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(relay) == 1
    os.kill(relay[0], signal.SIGTERM)
    daemon.wait_state(job, "failed", timeout=30)  # the agent's own words: its stdin ended mid-turn
    daemon.wait_for(lambda: not worker_procs(job), timeout=15, what="the worker on the node to end")
    daemon.wait_row(job, lambda r: r["pid"] is None, timeout=20)


def test_a_worker_whose_relay_is_killed_ends_after_lost_after(start, tmp_path):
    daemon = start('[hosts.brief]\nkind = "ray"\naddress = "ADDRESS"\ntoken_env = "TOKEN"\nnum_cpus = 0.1\n'
                   'lost_after = 3\n\n')
    job = daemon.spawn("wait-for never", host="brief", cwd=str(tmp_path))
    daemon.wait_state(job, "working", timeout=60)
    daemon.wait_for(lambda: worker_procs(job), what="the worker on its node")
    relay = [p for p in relay_procs() if f"{job}.json".encode() in Path(f"/proc/{p}/cmdline").read_bytes()]
    os.kill(relay[0], signal.SIGKILL)  # no word to the actor: only its silence
    killed = time.monotonic()
    assert daemon.wait_state(job, "failed", timeout=30)["state"] == "failed"
    daemon.wait_for(lambda: not worker_procs(job), timeout=20, what="the actor to end the worker after lost_after")
    gone = time.monotonic() - killed
    print(f"relay SIGKILLed -> the worker on its node gone in {gone:.1f}s (lost_after = 3)")
    assert gone >= 1.5  # the actor waited out its lease (its last call came at most ~1 s before the kill)


def test_the_reaper_closes_a_ray_worker_and_a_message_resumes_its_session(start, tmp_path):
    daemon = start("idle_timeout = 1\n")
    job = daemon.spawn("say first", host="ray", cwd=str(tmp_path))
    daemon.wait_row(job, lambda r: r["reaped"] and r["pid"] is None, timeout=60)
    daemon.wait_for(lambda: not worker_procs(job), timeout=15, what="the worker on the node to end")
    daemon.call("send", job=job, text="recall")
    daemon.wait_for(lambda: any("earlier prompts: say first" in t for t in daemon.texts(job)), timeout=60,
                    what="the resumed worker to recall its session")


def test_a_ray_child_reports_to_its_local_parent(start, tmp_path):
    daemon = start()
    parent = daemon.spawn("say parent here", cwd=str(tmp_path))
    daemon.wait_state(parent, "idle", timeout=20)
    child = daemon.spawn("report done child on ray", host="ray", parent=parent, cwd=str(tmp_path))
    assert daemon.show(child)["host"] == "ray"

    def reports() -> list[str]:
        return [r["child"] for e in daemon.timeline(parent) if e["kind"] == "reports" for r in e["data"]["reports"]]

    daemon.wait_for(lambda: child in reports(), timeout=60, what="the Ray child's report on the local parent")
    assert daemon.show(child)["state"] == "done"


def test_a_node_lost_mid_turn_fails_the_job_in_rays_words_and_a_message_resumes_it_elsewhere(start, nodes, tmp_path):
    daemon = start()
    job = daemon.spawn(f"{ECHO_NODE}\nwait-for never", host="ray", cwd=str(tmp_path))
    first = node_of(daemon, job)
    daemon.wait_state(job, "working", timeout=30)
    lost = time.monotonic()
    nodes.remove(first)
    try:
        row = daemon.wait_state(job, "failed", timeout=60)
        print(f"node lost -> job failed in {time.monotonic() - lost:.1f}s: {row['reason']}")
        assert "Ray actor died" in row["reason"] and "its node has died" in row["reason"], row["reason"]
        daemon.wait_for(lambda: not worker_procs(job), timeout=20, what="the worker to go with its node")
        daemon.call("send", job=job, text=f"recall\n{ECHO_NODE}")
        daemon.wait_for(lambda: any("earlier prompts: run echo" in t for t in daemon.texts(job)), timeout=60,
                        what="the job to resume from its session")
        assert node_of(daemon, job, after=1) == ({"a", "b"} - {first}).pop()
    finally:
        nodes.add(first, **({"gpu_box": 1} if first == "a" else {}))


def test_a_cluster_without_token_auth_is_refused_unless_the_host_says_insecure(start, tmp_path):
    open_cluster = Cluster(token=None)
    try:
        open_cluster.start_head(cpus=1)
        daemon = start(f'[hosts.open]\nkind = "ray"\naddress = "{open_cluster.address}"\ntoken_env = "{TOKEN_VAR}"\n'
                       'num_cpus = 0.1\n\n'
                       f'[hosts.trusted]\nkind = "ray"\naddress = "{open_cluster.address}"\ninsecure = true\n'
                       'num_cpus = 0.1\n\n')
        refused = daemon.spawn("say hi", host="open", cwd=str(tmp_path))
        reason = daemon.wait_state(refused, "failed", timeout=60)["reason"]
        assert "requires no auth token" in reason and "insecure = true" in reason, reason
        trusted = daemon.spawn(f"say trusted\n{ECHO_NODE}", host="trusted", cwd=str(tmp_path))
        assert daemon.wait_state(trusted, *FINISHED, timeout=60)["state"] == "idle"
        assert node_of(daemon, trusted) == "head"
    finally:
        open_cluster.shutdown()


def test_ray_host_config_is_strict_and_names_its_token():
    base = '[hosts.c]\nkind = "ray"\naddress = "10.0.0.1:6379"\n'
    host = parse_config(base + 'token_file = "~/.ray/auth_token"\nresources = { gpu = 1, ssd = 0.5 }\n', "t").hosts["c"]
    assert host.kind == "ray" and dict(host.resources) == {"gpu": 1.0, "ssd": 0.5} and host.num_cpus == 1.0
    assert parse_config(base + "insecure = true\n", "t").hosts["c"].insecure
    profile = parse_config('[drivers.big]\nkind = "builtin"\nnum_cpus = 4\nresources = { gpu = 1 }\n', "t").driver("big")
    assert profile.num_cpus == 4.0 and dict(profile.resources) == {"gpu": 1.0}
    ray = parse_config(base + 'insecure = true\nplace_within = 7\n', "t").hosts["c"]
    assert ray.ready_time(30.0) == 37.0, "a worker on Ray has its driver's ready time and Ray's time to place it"
    assert parse_config('[hosts.s]\nssh = "me@x"\n', "t").hosts["s"].ready_time(30.0) == 30.0
    for bad, key, words in ((base, "hosts.c.token_env", "insecure = true"),
                            ('[hosts.c]\nkind = "ray"\ninsecure = true\n', "hosts.c.address", "missing"),
                            (base + 'token_env = "T"\nssh = "me@x"\n', "hosts.c.ssh", "not a key of a ray host"),
                            ('[hosts.c]\nssh = "me@x"\naddress = "h:1"\n', "hosts.c.address", "not a key of a ssh"),
                            (base + 'token_env = "T"\ntoken_file = "f"\n', "hosts.c.token_file", "not both"),
                            (base + 'insecure = true\nresources = { gpu = -1 }\n', "hosts.c.resources.gpu", ">= 0"),
                            (base + 'insecure = true\nlost_after = 1\n', "hosts.c.lost_after", "at least 3"),
                            (base + 'insecure = true\nplace_within = 0\n', "hosts.c.place_within", "> 0"),
                            ('[hosts.c]\nssh = "me@x"\nplace_within = 5\n', "hosts.c.place_within", "not a key of a ssh")):
        with pytest.raises(ConfigError) as info:
            parse_config(bad, "t")
        assert info.value.key == key and words in info.value.message, (info.value.key, info.value.message)


def test_without_ray_installed_the_relay_says_what_to_install(tmp_path):
    setup = tmp_path / "setup.json"
    setup.write_text('{"host": "c", "address": "127.0.0.1:1"}')
    done = subprocess.run([sys.executable, "-c", "import sys; sys.modules['ray'] = None\n"
                           "from roost.hosts.ray_relay import main; main()", str(setup)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 127 and "pip install 'roost[ray]'" in done.stderr, done.stderr
    assert not setup.exists()  # read once and removed: a real one holds the token


@needs_ray
def test_a_cluster_that_is_down_fails_the_job_at_once_saying_so(daemon_factory, tmp_path, monkeypatch):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv(TOKEN_VAR, "a-token")
    daemon = daemon_factory(f'[hosts.down]\nkind = "ray"\naddress = "127.0.0.1:{port}"\ntoken_env = "{TOKEN_VAR}"\n')
    started = time.monotonic()
    job = daemon.spawn("say hi", host="down", cwd=str(tmp_path))
    reason = daemon.wait_state(job, "failed", timeout=30)["reason"]
    assert time.monotonic() - started < 10, reason
    assert f"Ray cluster 127.0.0.1:{port} (host down) unreachable" in reason and "refused" in reason, reason


def test_the_actor_needs_nothing_of_roost_on_the_nodes():
    """It is shipped by value: at module level it imports only the standard library (Ray inside methods)."""
    import roost.hosts.ray_actor as actor

    tree = ast.parse(Path(actor.__file__).read_text())
    top = {alias.name.split(".")[0] for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
           for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])}
    assert top <= set(sys.stdlib_module_names) | {"__future__"}, top


def test_roost_without_a_ray_host_never_imports_ray():
    probe = ("import sys, roost.daemon.supervisor, roost.daemon.server.listener, roost.hosts.placement, "
             "roost.hosts.commands, roost.cli, roost.config; print('ray' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


async def test_a_ray_host_without_ray_installed_fails_the_start_naming_the_extra(monkeypatch, tmp_path):
    """What the daemon's start says (placement's check, before any relay runs) when Ray is missing."""
    import importlib.util

    from roost.drivers.base import Launch
    from roost.hosts import placement
    from roost.models import Job

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    config = parse_config('[hosts.c]\nkind = "ray"\naddress = "127.0.0.1:6379"\ninsecure = true\n', "t")
    worker = type("W", (), {"launch": Launch(argv=["x"], env={}, cwd="/")})()
    job = Job(id="j1", title="t", driver="builtin", cwd=str(tmp_path), host="c")
    reason = await placement.prepare(job, config, lambda name: tmp_path / "s.sock", worker)
    assert reason == "host c is a Ray cluster and Ray is not installed here: pip install 'roost[ray]'"
    assert worker.launch.argv == ["x"]  # nothing started


def test_a_spawns_resources_are_checked_at_the_door(daemon_factory, tmp_path):
    from roost.socket_connect import ClientError

    daemon = daemon_factory('[hosts.c]\nkind = "ray"\naddress = "127.0.0.1:1"\ninsecure = true\n')
    for bad, words in (({"resources": {"gpu": -1}}, "resource 'gpu' must be a number >= 0"),
                       ({"resources": {"x" * 65: 1}}, "1 to 64 characters"),
                       ({"resources": {f"r{i}": 1 for i in range(17)}}, "at most 16 resources"),
                       ({"num_cpus": -0.5}, "num_cpus must be a number >= 0"),
                       ({"resources": ["gpu"]}, "'resources' must be")):
        with pytest.raises(ClientError) as info:
            daemon.spawn("say hi", host="c", cwd=str(tmp_path), **bad)
        assert info.value.code == "bad_args" and words in info.value.message, info.value.message


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_ray_turn_goes_on_across_a_daemon_restart_whole_and_once(start, tmp_path, how):
    """The relay to the actor runs under a shim on this machine: a new daemon re-adopts it as it does a
    local worker, and the turn held on the node ends once, on the same relay and the same worker."""
    daemon = start()
    job = daemon.spawn(f"{ECHO_NODE}\nwait-for ray-gate\nsay after the gate", host="ray", cwd=str(tmp_path))
    daemon.wait_state(job, "working", timeout=60)
    daemon.at_gate(job, "ray-gate", timeout=60)
    relay = daemon.show(job)["pid"]
    workers = worker_procs(job)
    assert relay and workers
    if how == "SIGKILL":
        daemon.kill()
    else:
        daemon.stop(keep_workers=True)
    daemon.start()
    row = daemon.show(job)
    assert row["state"] == "working" and row["pid"] == relay, (row["state"], row["reason"])
    for gates in (tmp_path, Path(daemon.env["ROOST_GATES"])):  # the agent's gates: its own dir, or the daemon's
        gates.mkdir(parents=True, exist_ok=True)
        (gates / "ray-gate").touch()
    row = daemon.wait_state(job, *FINISHED, timeout=60)
    assert row["state"] == "idle" and row["pid"] == relay, row
    texts = daemon.texts(job)
    assert texts.count("after the gate") == 1, texts
    assert [e["kind"] for e in daemon.timeline(job)].count("turn_end") == 1
    assert worker_procs(job) == workers  # the same worker on its node, not a second
    assert daemon.call("send", job=job, text="say next")["outcome"] == "delivered"
    daemon.wait_for(lambda: "next" in daemon.texts(job), timeout=30, what="the next turn on the same worker")


def test_roost_stop_with_no_daemon_ends_a_ray_jobs_worker_on_its_node(start, tmp_path):
    """``roost stop`` while no daemon runs reaches a Ray job: its relay's shim is on record here, the
    relay's SIGTERM ends the worker on its node through the actor; the next daemon records it stopped."""
    daemon = start()
    job = daemon.spawn("wait-for never", host="ray", cwd=str(tmp_path))
    daemon.at_gate(job, "never", timeout=60)
    daemon.wait_for(lambda: worker_procs(job), what="the worker on its node")
    relay = daemon.show(job)["pid"]
    daemon.kill()
    done = subprocess.run([sys.executable, "-m", "roost.cli", "stop", job], env=daemon.env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and f"ended its worker (pid {relay})" in done.stdout, done.stdout + done.stderr
    daemon.wait_for(lambda: not worker_procs(job), timeout=20, what="the worker on its node to end")
    daemon.start()
    row = daemon.wait_state(job, "stopped", timeout=30)
    assert row["reason"] == "stopped by a person while no daemon ran (roost stop)" and row["pid"] is None
