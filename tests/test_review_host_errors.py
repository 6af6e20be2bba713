"""A job on a host whose link cannot even be tried fails its start with why, instead of sitting at
``starting`` for good. In process (tests/engine_fakes.py): the real placement code, no ssh on PATH."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from roost.config import Config, HostSettings
from roost.hosts import placement
from tests.engine_fakes import Rig

CFG = Config(idle_timeout=100, subagent_auto_close_delay=4, report_hold_max=60, max_running_jobs=0,
             hosts={"box": HostSettings(name="box", ssh="me@box", max_running_jobs=1)})


async def test_a_host_job_fails_at_once_with_why_when_ssh_cannot_be_run(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no ssh here
    monkeypatch.setenv("ROOST_HOME", str(tmp_path))
    monkeypatch.setattr(placement, "_links", {})
    rig = Rig(tmp_path, CFG)
    rig.sup.engine.host_socket = lambda name: tmp_path / f"{name}.sock"  # the daemon's server opens it; none here
    job = await rig.spawn("work", host="box")
    for _ in range(500):  # until the start attempt settles (the exec of ssh fails in a real subprocess call)
        if rig.state(job) != "starting" and rig.state(job) != "queued":
            break
        await asyncio.sleep(0.01)
    assert rig.state(job) == "failed"
    assert "ssh" in rig.job(job).reason and "box" in rig.job(job).reason
    assert job not in rig.sup.engine.slots


def test_hosts_check_and_list_say_ssh_cannot_be_run_instead_of_a_traceback(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from roost.hosts import commands

    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("ROOST_HOME", str(tmp_path))
    host = CFG.hosts["box"]
    ok, lines = commands.check(host)
    assert not ok and len(lines) == 1 and "host box" in lines[0] and "cannot run ssh" in lines[0]
    control = commands._link(host).control
    control.parent.mkdir(parents=True, exist_ok=True)
    control.touch()  # a master's socket left behind: asking it needs ssh
    assert commands.host_lines(CFG, []) == ["box  me@box  not connected  no jobs"]


@pytest.mark.parametrize("extra, opens", [(0, True), (1, False)])
async def test_a_hosts_socket_opens_up_to_the_unix_path_limit_and_past_it_says_why(tmp_path: Path, extra: int,
                                                                                  opens: bool) -> None:
    from roost.daemon.server.listener import Daemon
    from roost.hosts.link import HostDown, host_socket_path
    from roost.paths import resolve

    probe = len(str(host_socket_path(resolve({"ROOST_HOME": str(tmp_path / "h")}).runtime_dir, "box")))
    home = tmp_path / ("h" + "x" * (107 - probe + extra))  # 107 bytes: the most a Unix socket's path holds
    daemon = Daemon(resolve({"ROOST_HOME": str(home)}), None)
    if opens:
        path = daemon._host_socket("box")
        assert len(str(path)) == 107 and path.is_socket() and daemon._host_socket("box") == path
        await daemon.cleanup()
        assert not path.exists()
    else:
        with pytest.raises(HostDown) as info:
            daemon._host_socket("box")
        assert "host box: cannot listen on" in str(info.value) and "somewhere shorter" in str(info.value)
