"""The rule for a dropped SSH link (roost/rules/host_loss.py) and the retry loop that follows it
(roost/daemon/processes/remote_worker.py ``Connector.again``), on a fake clock: the waits double up
to the cap and never pass the deadline; at ``host_lost_after`` the reason names the host and how
long it was lost; a host back without its shim is said so at once."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from roost.config import ConfigError, parse_config
from roost.daemon.processes.remote_worker import Connector, ShimGone
from roost.daemon.processes.shim_link import ShimError
from roost.hosts.link import HostDown
from roost.rules.host_loss import RETRY_MAX, after_failed_try, retry_delay, shim_alone_after


def test_the_waits_double_up_to_the_cap_and_stop_at_the_deadline():
    assert [retry_delay(i) for i in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert retry_delay(10_000) == RETRY_MAX
    assert after_failed_try("h", 100.0, 100.0, 300.0, 0).wait == 1
    assert after_failed_try("h", 100.0, 398.5, 300.0, 9).wait == pytest.approx(1.5)  # not past the deadline
    verdict = after_failed_try("h", 100.0, 400.0, 300.0, 9, "host h unreachable: Connection refused")
    assert verdict.reason == ("host h was lost for 5m (over host_lost_after = 300s): host h unreachable: "
                              "Connection refused")
    assert after_failed_try("box", 0.0, 2.5, 2.0, 1).reason.startswith("host box was lost for 2s")
    assert (shim_alone_after(300), shim_alone_after(2)) == (330, 4)  # the shim there waits past the daemon's try


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


def _connector(clock: FakeClock, ensure, open_=None, lost_after: float = 20.0) -> Connector:
    async def verify() -> None:
        pass

    link = SimpleNamespace(host=SimpleNamespace(name="h"), ensure=ensure, verify=verify)
    connector = Connector(link, ("python3", "w.pyz"), "/x/run/j.sock", lambda: lost_after,  # type: ignore[arg-type]
                          clock=clock, sleep=clock.sleep)
    if open_ is not None:
        connector.open = open_  # type: ignore[method-assign]
    return connector


def test_a_link_down_past_host_lost_after_gives_up_with_the_reason():
    clock = FakeClock()

    async def down() -> None:
        clock.now += 0.5  # each try takes a while (ssh's refusal)
        raise HostDown("host h unreachable: Connection refused")

    with pytest.raises(ShimError) as info:
        asyncio.run(_connector(clock, down).again())
    assert clock.waits == [1, 2, 4, 8, pytest.approx(2.5)]
    assert str(info.value) == ("host h was lost for 20s (over host_lost_after = 20s): host h unreachable: "
                               "Connection refused")


def test_a_link_back_before_the_deadline_is_connected_again():
    clock, tries = FakeClock(), []

    async def flaky() -> None:
        tries.append(clock.now)
        if len(tries) < 3:
            raise HostDown("host h unreachable: Connection timed out")

    async def opened():
        return "reader", "writer", {"shim_pid": 1}

    assert asyncio.run(_connector(clock, flaky, opened).again()) == ("reader", "writer", {"shim_pid": 1})
    assert clock.waits == [1, 2]


def test_a_host_back_without_its_shim_fails_at_once():
    clock = FakeClock()

    async def up() -> None:
        pass

    async def gone():
        raise ShimGone("its worker on h is gone (no shim listens at /x/run/j.sock)")

    with pytest.raises(ShimError) as info:
        asyncio.run(_connector(clock, up, gone).again())
    assert clock.waits == [] and "its worker on h is gone" in str(info.value)
    assert "a message resumes the job from its session" in str(info.value)


def test_host_lost_after_is_a_positive_duration_and_a_typo_is_refused():
    assert parse_config("host_lost_after = 45\n", "t").host_lost_after == 45.0
    assert parse_config("", "t").host_lost_after == 300.0
    for bad in ("host_lost_after = 0\n", 'host_lost_after = "soon"\n', "host_lost_afer = 5\n"):
        with pytest.raises(ConfigError) as info:
            parse_config(bad, "t")
        assert info.value.key in ("host_lost_after", "host_lost_afer")
    with pytest.raises(ConfigError) as info:
        parse_config("host_lost_afer = 5\n", "t")
    assert "did you mean 'host_lost_after'" in str(info.value)


def test_a_shim_link_opened_again_skips_what_it_had_and_loses_nothing(tmp_path):
    """A real shim on this machine, its connection cut while the worker streams: the link's reconnect
    (here a plain connect to the same socket, as the relay over a new master is) gets the rest once,
    and what was written for the worker while it was cut is held and goes."""
    from roost.daemon.processes.shim_process import open_process
    from roost.daemon.processes.shim_link import SHIM_HELLO_TIMEOUT, address_of, handshake
    from roost.drivers.base import Launch
    from test_shim import AGENT

    lines, half, gate = 2000, 700, tmp_path / "gate"
    reconnects: list[int] = []

    async def run() -> list[bytes]:
        process = await open_process("j1", Launch(argv=[sys.executable, str(AGENT), f"{lines} {half} {gate}"],
                                                  env=dict(os.environ), cwd=str(tmp_path)))
        link, path = process.link, Path(process.record.socket)
        link.keep()  # as a worker written down is: it outlives a dropped connection

        async def again():
            reconnects.append(link.seen)
            with address_of(path) as address:
                reader, writer = await asyncio.open_unix_connection(address)
            return reader, writer, await handshake(reader, writer, SHIM_HELLO_TIMEOUT)

        link._reconnect = again
        got: list[bytes] = []
        while len(got) < half:
            seq, line = await link.next_line()
            got.append(line)
            if len(got) == half // 2:
                link.ack(seq)  # committed up to here: the shim forgets it
        link._writer.transport.abort()  # the link drops
        gate.touch()
        while (item := await link.next_line()) is not None:
            got.append(item[1])
        assert await link.exited == 0
        link.release()
        return got

    got = asyncio.run(run())
    assert got == [b"line-%05d" % i for i in range(1, lines + 1)]
    assert len(reconnects) == 1 and reconnects[0] >= 700


ECHO = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n"


def test_bytes_for_the_worker_while_its_link_is_down_are_held_up_to_the_bound(tmp_path, caplog):
    """Written while the link is being opened again: held and sent once it is back, in order; a write
    that would pass HELD_MAX is dropped, and the daemon's log says so."""
    from roost.daemon.processes.shim_process import open_process
    from roost.daemon.processes.shim_link import HELD_MAX, SHIM_HELLO_TIMEOUT, address_of, handshake
    from roost.drivers.base import Launch

    async def run() -> list[bytes]:
        process = await open_process("j2", Launch(argv=[sys.executable, "-c", ECHO], env=dict(os.environ),
                                                  cwd=str(tmp_path)))
        link, path, back = process.link, Path(process.record.socket), asyncio.Event()
        link.keep()

        async def again():
            await back.wait()
            with address_of(path) as address:
                reader, writer = await asyncio.open_unix_connection(address)
            return reader, writer, await handshake(reader, writer, SHIM_HELLO_TIMEOUT)

        link._reconnect = again
        link.write(b"one\n")
        got = [(await link.next_line())[1]]
        link._writer.transport.abort()  # the link drops
        assert not link.is_closing()  # a worker's link being opened again takes writes
        link.write(b"two\n")
        link.write(b"x" * HELD_MAX + b"\n")
        link.write(b"three\n")
        back.set()
        got += [(await link.next_line())[1] for _ in range(2)]
        link.close_stdin()
        assert await link.exited == 0
        link.release()
        return got

    assert asyncio.run(run()) == [b"one", b"two", b"three"]
    assert any("dropped while its link is down" in r.getMessage() for r in caplog.records)


def test_a_host_the_shim_cannot_run_on_is_refused_saying_why(monkeypatch, tmp_path, capsys):
    import select

    from roost.hosts import remote_shim

    assert remote_shim.shim_runs_here() == ""  # this machine: Linux
    monkeypatch.delattr(select, "epoll")
    setup = tmp_path / "j.json"
    setup.write_text('{"job": "j", "argv": ["true"], "env": {}, "cwd": "/"}')
    assert remote_shim.launch(str(setup), "shim.py", str(tmp_path / "j.sock"), "1", "1", "1") == remote_shim.NOT_STARTED
    assert "roost's shim needs Linux (epoll and pidfds" in capsys.readouterr().err
    assert not setup.exists() and not (tmp_path / "j.sock").exists()  # the setup (its token) read and removed


def test_the_python_that_runs_roosts_tools_is_the_hosts_inside_a_json_argument_too(monkeypatch):
    """Claude Code's ``--mcp-config`` names the Python that starts roost's tools: on a host it is the
    host's Python (found missing by a 20-job test on a host: every Claude job there had no roost tool
    where the two Pythons differ). A prompt that mentions a Python in plain words is left as it is."""
    from roost.drivers.mcp import mcp_config
    from roost.hosts.placement import for_host
    from roost.hosts.remote_shim import PYTHON, here_argv

    config, words = json.dumps(mcp_config()), f"run {sys.executable} -V for me"
    setup = [for_host(arg, lambda a: a) for arg in [sys.executable, "-m", "x", "--mcp-config", config, words]]
    assert setup[0] == PYTHON and sys.executable not in setup[4] and setup[5] == words
    monkeypatch.setattr(sys, "executable", "/opt/the host's python/bin/python3")
    here = here_argv(setup)
    assert here[0] == "/opt/the host's python/bin/python3"
    assert json.loads(here[4])["mcpServers"]["roost"]["command"] == "/opt/the host's python/bin/python3"
    assert here[5] == words
