"""Shared fixtures: a private ROOST_HOME per test and a real daemon process to talk to."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from roost import paths as paths_mod
from roost.client import Client, ClientError, daemon_running
from roost.daemon.storage.recovery import kill_stale_workers
from roost.protocol import PROTOCOL_VERSION

#: How long a wait for an event gives it by default. A wait returns as soon as the event comes, so
#: this costs nothing when things work; it is a bound for a loaded machine (the suite runs its tests
#: side by side, pytest-xdist, with other work beside it), not a claim about how fast roost is: a
#: test that checks a speed says so with a timeout of its own.
WAIT = 30.0

LEAKY_ENV = ("ROOST_CONFIG", "ROOST_JOB_ID", "ROOST_TOKEN", "ROOST_SOCKET", "NO_COLOR", "TEXTUAL_THEME",
             "COLUMNS", "LINES")


def release_gate(name: str, gates: Path | None = None) -> None:
    """Let a built-in agent's ``wait-for NAME`` go on: the file NAME in its gates directory
    (``ROOST_GATES``, which ``roost_home`` points at a directory of the test's own)."""
    where = gates or Path(os.environ["ROOST_GATES"])
    where.mkdir(parents=True, exist_ok=True)
    (where / name).touch()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Note on the test whether any of its phases failed: ``roost_home`` keeps a failed test's home."""
    report = yield
    if report.failed:
        item.stash[FAILED] = True
    return report


FAILED = pytest.StashKey[bool]()
#: A short test home's name in the system's temporary directory (``roost_home``).
SHORT_PREFIX = "roost-"


@pytest.fixture
def roost_home(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private ROOST_HOME: nothing a test does touches the real user directories. Its daemons'
    built-in agents wait on gates (``wait-for NAME``) in a directory of the test's own too.

    The home is a short directory of its own (``roost-XXXXXXXX/home`` in the system's temporary
    directory), not under ``tmp_path``:
    the daemon's sockets and ssh's control sockets live in its ``run/``, and a Unix socket's path
    holds at most 107 bytes, which pytest-xdist's ``.../popen-gwN/test_name0/`` pushes past. roost
    itself says so clearly (tests/test_review_host_errors.py); the long paths were the tests' own.
    ``tmp_path/home`` links to it; a passed test's home is removed, a failed one's kept to read."""
    short = Path(tempfile.mkdtemp(prefix=SHORT_PREFIX))
    (tmp_path / "home").symlink_to(short)
    home = short / "home"
    monkeypatch.setenv("ROOST_HOME", str(home))
    monkeypatch.setenv("ROOST_GATES", str(tmp_path / "gates"))
    for name in LEAKY_ENV:
        monkeypatch.delenv(name, raising=False)
    yield home
    # What a daemon stopped without --all, or killed, left running under its shims (by its records).
    kill_stale_workers(paths_mod.resolve({"ROOST_HOME": str(home)}).state_dir)
    if not request.node.stash.get(FAILED, False):
        shutil.rmtree(short, ignore_errors=True)


class DaemonHarness:
    """A real `python -m roost.daemon` on a private home, and ways to wait on what it reports."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.paths = paths_mod.resolve({"ROOST_HOME": str(home)})
        self.config_path = home / "roost.toml"
        self.proc: subprocess.Popen[bytes] | None = None
        self.env = {k: v for k, v in os.environ.items() if k not in LEAKY_ENV}
        self.env.update(ROOST_HOME=str(home), ROOST_CONFIG=str(self.config_path))

    def write_config(self, text: str) -> None:
        """The test's config, with its gates directory readable inside the jobs' sandboxes (it is
        under /tmp, which each sandbox has a private one of), unless the config says otherwise."""
        self.home.mkdir(parents=True, exist_ok=True)
        gates = self.env.get("ROOST_GATES")
        if gates and "sandbox_read" not in text:
            Path(gates).mkdir(parents=True, exist_ok=True)
            text = f"sandbox_read = [{json.dumps(gates)}]\n" + text
        self.config_path.write_text(text)

    def start(self, timeout: float = 15.0) -> None:
        if not self.config_path.exists():
            self.write_config("")
        self.paths.ensure()
        log = open(self.paths.daemon_log, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "roost.daemon"], env=self.env, stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.wait_for(lambda: daemon_running(self.paths.socket), timeout=timeout, what="the daemon to answer")

    def stop(self, keep_workers: bool = False) -> None:
        """Stop the daemon: with every worker closed (``roost daemon stop --all``), or, with
        ``keep_workers``, by SIGTERM, which leaves the turns running under their shims."""
        if self.proc is None:
            return
        if self.proc.poll() is None and not keep_workers:
            try:
                self.call("shutdown", all=True)
                self.proc.wait(15)
            except (ClientError, OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the daemon, as a crash would."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(5)
        self.proc = None

    def log_text(self) -> str:
        return self.paths.daemon_log.read_text() if self.paths.daemon_log.exists() else ""

    # -- talking to it --------------------------------------------------------------------------------
    def client(self, **kw: Any) -> Client:
        return Client.connect(self.paths.socket, client="test", **kw)

    def call(self, op: str, **args: Any) -> Any:
        with self.client() as client:
            return client.call(op, **args)

    def spawn(self, prompt: str, **args: Any) -> str:
        args.setdefault("cwd", str(self.home))
        return self.call("spawn", prompt=prompt, **args)["id"]

    def show(self, job_id: str) -> dict[str, Any]:
        return self.call("show", job=job_id)

    def rows(self, **list_args: Any) -> list[dict[str, Any]]:
        """Every row ``list`` gives with these arguments, paged with its cursor."""
        out: list[dict[str, Any]] = []
        cursor = None
        with self.client() as client:
            while True:
                page = client.call("list", cursor=cursor, **list_args)
                out.extend(page["rows"])
                cursor = page["next"]
                if cursor is None:
                    return out

    def timeline(self, job_id: str) -> list[dict[str, Any]]:
        """Every timeline entry of a job, oldest first, paged forward with ``after``."""
        out: list[dict[str, Any]] = []
        with self.client() as client:
            while True:
                page = client.call("logs", job=job_id, after=out[-1]["seq"] if out else 0, limit=2000)
                out.extend(page["entries"])
                if not page["more"]:
                    return out

    def texts(self, job_id: str) -> list[str]:
        return [e["data"]["text"] for e in self.timeline(job_id) if e["kind"] == "text"]

    # -- waiting on state, not on the clock ---------------------------------------------------------------
    def release(self, gate: str) -> None:
        """Release the gate ``wait-for GATE`` of this daemon's built-in agents waits on."""
        release_gate(gate, Path(self.env["ROOST_GATES"]))

    def at_gate(self, job_id: str, gate: str, timeout: float = WAIT) -> None:
        """Wait until the job's agent has reached ``wait-for GATE`` (the tool entry it writes there)."""
        self.wait_for(lambda: any(e["kind"] == "tool" and e["data"].get("args") == {"gate": gate}
                                  for e in self.timeline(job_id)), timeout, f"job {job_id} to wait on gate {gate}")

    def close_after_turn(self, job_id: str, timeout: float = WAIT) -> None:
        """Close the job once its aborted turn has come back (until then close is refused: in a turn)."""

        def closed() -> bool:
            try:
                self.call("close", job=job_id)
            except ClientError as exc:
                assert "in a turn" in exc.message
                return False
            return True

        self.wait_for(closed, timeout=timeout, what="the aborted turn to end and close to be taken")

    def wait_for(self, predicate: Callable[[], Any], timeout: float = WAIT, what: str = "a condition") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.03)

    def wait_row(self, job_id: str, predicate: Callable[[dict[str, Any]], bool], timeout: float = WAIT,
                 what: str = "") -> dict[str, Any]:
        last: dict[str, Any] = {}

        def check() -> dict[str, Any] | None:
            nonlocal last
            last = self.show(job_id)
            return last if predicate(last) else None

        try:
            return self.wait_for(check, timeout, what or f"job {job_id}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last row: state={last.get('state')} pid={last.get('pid')} "
                                 f"reaped={last.get('reaped')}") from None

    def wait_state(self, job_id: str, *states: str, timeout: float = WAIT) -> dict[str, Any]:
        return self.wait_row(job_id, lambda r: r["state"] in states, timeout, f"job {job_id} to be {'/'.join(states)}")

    def children(self, job_id: str) -> list[dict[str, Any]]:
        with self.client() as client:
            return list(client.children(job_id))

    def raw(self, hello: bool = True, timeout: float = 10.0) -> RawClient:
        return RawClient(self.paths.socket, hello=hello, timeout=timeout)


class RawClient:
    """A bare socket to the daemon for tests of framing and back-pressure: bytes in, frames out,
    every read under a deadline; ``sizes`` keeps the length of each frame read."""

    def __init__(self, path: Path, hello: bool = True, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))  # blocking: a full backlog waits instead of failing (EAGAIN)
        self.sock.settimeout(timeout)
        self.buf = b""
        self.sizes: list[int] = []
        if hello:
            assert self.call("hello", version=PROTOCOL_VERSION, client="raw")["version"] == PROTOCOL_VERSION

    def send(self, frame: dict[str, Any] | bytes) -> None:
        self.sock.sendall(frame if isinstance(frame, bytes) else json.dumps(frame).encode() + b"\n")

    def frame(self) -> dict[str, Any]:
        """The next frame; EOFError when the daemon closed the connection."""
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("the daemon closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        self.sizes.append(len(line) + 1)
        return json.loads(line)

    def reply(self, req_id: Any, events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The reply to ``req_id``; events read on the way are kept in ``events``."""
        while True:
            frame = self.frame()
            if "event" not in frame and frame.get("id") == req_id:
                return frame
            if events is not None:
                events.append(frame)

    def call(self, op: str, req_id: int = 1, **args: Any) -> Any:
        self.send({"id": req_id, "op": op, "args": args})
        reply = self.reply(req_id)
        assert reply["ok"], reply
        return reply["result"]

    def until_closed(self) -> list[dict[str, Any]]:
        """Every frame up to the end of the connection."""
        frames = []
        while True:
            try:
                frames.append(self.frame())
            except (EOFError, ConnectionResetError):
                return frames

    def close(self) -> None:
        self.sock.close()


def seed_store(harness: DaemonHarness, jobs: list[Any]) -> None:
    """Records written through the store's own API before the daemon starts (no agent runs:
    thousands cost a second), as an older roost (or a store written around the door) might have
    left them."""
    from roost.daemon.storage.store import Store

    harness.paths.ensure()
    store = Store(harness.paths.store)
    with store.transaction():
        for job in jobs:
            store.save_job(job)
    store.close()


def seeded_daemon(home: Path, records: list[Any]) -> DaemonHarness:
    """A daemon with the default settings started on a store that already holds ``records``;
    the caller stops it."""
    harness = DaemonHarness(home)
    harness.write_config("")
    seed_store(harness, records)
    harness.start()
    return harness


@pytest.fixture
def daemon_factory(roost_home: Path) -> Iterator[Callable[[str], DaemonHarness]]:
    """Start a daemon with a given config text (started daemons are stopped at the end)."""
    started: list[DaemonHarness] = []

    def make(config: str = "") -> DaemonHarness:
        harness = DaemonHarness(roost_home)
        harness.write_config(config)
        harness.start()
        started.append(harness)
        return harness

    yield make
    for harness in started:
        harness.stop()
        kill_stale_workers(harness.paths.state_dir)  # what a daemon killed or stopped with SIGTERM left running


@pytest.fixture
def daemon(daemon_factory: Callable[[str], DaemonHarness]) -> DaemonHarness:
    """A running daemon with the default settings."""
    return daemon_factory("")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def procs_where(match: Callable[[list[bytes]], bool]) -> list[int]:
    """The pids of live processes whose command line (its arguments, as bytes) ``match`` takes."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if match(argv) and pid_alive(int(entry.name)):
            out.append(int(entry.name))
    return out


def shims_of(state_dir: Path) -> list[int]:
    """The live shims whose sockets are in ``state_dir`` (by the ``--socket`` of their command
    lines, so that other tests' shims on this machine are not counted)."""
    where = (str(state_dir / "workers") + "/").encode()

    def of_home(argv: list[bytes]) -> bool:
        return (b"--socket" in argv and any(a.endswith(b"shim.py") for a in argv)
                and argv[argv.index(b"--socket") + 1].startswith(where))

    return procs_where(of_home)


def require_agent(what: str, missing: str | None) -> None:
    """Skip a test of a real agent that is not installed here (``missing`` says why), but fail it
    under CI, where `.ci/run` installs every agent the tests drive: those tests never skip there."""
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{missing} (CI is set, so the {what} tests must run)")
    pytest.skip(missing)


def environ_of(pid: int) -> dict[str, str]:
    """A process's environment as /proc shows it; {} when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def processes_with(needle: str, where: str = "cmdline") -> list[int]:
    """The pids of every process on this machine whose ``cmdline`` (or ``environ``) holds ``needle``."""
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if needle.encode() in Path(entry.path, where).read_bytes():
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


def assert_token_in_no_argv(job_id: str, token: str, tools: str | None = None) -> None:
    """The job's token is in its processes' environments — of the process whose command line holds
    ``tools`` (its tool server), when given — and in no process's command line (``ps`` shows those)."""
    assert len(token) >= 32
    if tools is not None:
        holders = processes_with(token, "environ")
        assert any(tools.encode() in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in holders
                   if os.path.exists(f"/proc/{pid}")), f"no {tools} of job {job_id} holds its token"
    leaks = {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:300] for pid in processes_with(token)}
    assert leaks == {}, f"job {job_id}'s token is on a command line: {leaks}"
