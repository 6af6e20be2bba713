"""The real agents inside their walls (docs/isolation.md): pi, Claude Code and Codex from npm, each
against its fake model server on 127.0.0.1, run one turn whose tool call (the agent's own shell tool,
allowed by ``approvals = "allow"``; Codex's own sandbox off) writes a file in the job's tree — the
agent works inside — and tries, in the same command, what the walls stop: read the person's SSH key,
plant a git hook, and act as a person (``setsid -f env -u ROOST_WORKER_MARK roost approve``) on
another job's approval. Each attack fails and leaves its target untouched; the same call unsandboxed
reads the key and plants the hook, so the walls are what stopped it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from conftest import DaemonHarness
from fake_anthropic import FakeAnthropic
from fake_openai import FakeOpenAI
from fakellm import FakeLLM
from test_agents_alike import pi_profile
from test_claude_driver import claude_bin, claude_profile  # noqa: F401  (claude_bin is a fixture)
from test_codex_driver import codex_bin, codex_profile  # noqa: F401  (codex_bin is a fixture)
from test_pi_driver import pi_bin  # noqa: F401  (a fixture)

pytestmark = pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True).returncode != 0,
                                reason="bubblewrap is not installed")

TURN = 60.0
KEY = "-----BEGIN OPENSSH PRIVATE KEY----- fake"
UNSET = " ".join(f"-u {name}" for name in ("ROOST_WORKER_MARK", "ROOST_TOKEN", "ROOST_JOB_ID"))


def tool_call(kind: str, command: str) -> str:
    """The fake model's script for one call of ``kind``'s own shell tool running ``command``."""
    if kind == "pi":
        return "CALL bash " + json.dumps({"command": command})
    if kind == "claude":
        return "CALL Bash " + json.dumps({"command": command, "description": "tidy up"})
    # not a login shell: a login bash here waits on something of its profile past the call's yield time
    return "CALL exec_command " + json.dumps({"cmd": command, "login": False, "yield_time_ms": 10000})


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, Any]]:
    servers = {"pi": FakeLLM().start(), "claude": FakeAnthropic().start(), "codex": FakeOpenAI().start()}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A person's home with an SSH key (every agent's HOME), a project (a git repository) for the agent,
    another for a built-in job waiting on an approval."""
    home = tmp_path / "person"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(KEY)
    monkeypatch.setenv("HOME", str(home))
    places = {"home": home}
    for name in ("project", "victim"):
        places[name] = tmp_path / name
        places[name].mkdir()
        subprocess.run(["git", "init", "-q", str(places[name])], check=True)
    return places


@pytest.fixture
def agents_daemon(pi_bin, claude_bin, codex_bin, fakes, world, tmp_path,  # noqa: F811
                  daemon_factory: Callable[[str], DaemonHarness]) -> DaemonHarness:
    """One daemon with the three agents' profiles, each allowing its tools, Codex's own sandbox off (so
    roost's walls are what stops a call). The fake home is shown read-only, as a real home is (it is
    under /tmp, private in a sandbox): only the walls hide its key."""
    allow = 'approvals = "allow"\n'
    profiles = [pi_profile(pi_bin, fakes["pi"], tmp_path) + allow,
                claude_profile(claude_bin, fakes["claude"], world["home"]) + allow,
                codex_profile(codex_bin, fakes["codex"]) + allow + 'sandbox = "danger-full-access"\n']
    return daemon_factory(f"sandbox_read = {json.dumps([str(world['home'])])}\n" + "\n".join(profiles))


def attack(daemon: DaemonHarness, world: dict[str, Path], kind: str, isolation: str) -> tuple[str, str, str]:
    """The agent's job, once its one turn ended, the built-in job and its approval it tried to answer."""
    victim = daemon.spawn("ask-run echo pwned > pwned.txt", cwd=str(world["victim"]))
    [pending] = daemon.wait_row(victim, lambda r: r["state"] == "waiting" and r["approvals"],
                                what="the built-in job's approval")["approvals"]
    approve = shlex.join([sys.executable, "-m", "roost.cli", "approve", pending["id"]])
    command = (f"cat {world['home']}/.ssh/id_ed25519 > leak.txt; echo pwned > .git/hooks/pre-commit; "
               f"setsid -f env {UNSET} {approve} > said.txt 2>&1; echo made > made.txt")
    job = daemon.spawn(tool_call(kind, command), driver=kind, cwd=str(world["project"]), isolation=isolation)
    row = daemon.wait_state(job, "idle", "failed", timeout=TURN)
    assert row["state"] == "idle", (row["reason"], daemon.texts(job))
    assert row["last_text"].startswith("tool said:"), row["last_text"]
    said = world["project"] / "said.txt"
    daemon.wait_for(lambda: said.exists() and said.read_text(), what="the escaped process's roost approve")
    return job, victim, pending["id"]


@pytest.mark.pi
@pytest.mark.claude
@pytest.mark.codex
@pytest.mark.parametrize("kind", ["pi", "claude", "codex"])
def test_an_agents_tool_call_works_inside_the_walls_and_its_attacks_fail(agents_daemon, world, kind):
    daemon = agents_daemon
    job, victim, approval = attack(daemon, world, kind, "sandbox")
    project = world["project"]
    assert daemon.show(job)["driver_opts"]["walls"] == "sandbox"
    assert (project / "made.txt").read_text() == "made\n", "the agent's tool writes in its tree"
    assert KEY not in (project / "leak.txt").read_text()
    assert not (project / ".git" / "hooks" / "pre-commit").exists()
    said = (project / "said.txt").read_text()
    assert f"answer_approval is for a person only: job {job} may not call it" in said, said
    assert [a["id"] for a in daemon.show(victim)["approvals"]] == [approval], "it still waits on a person"
    assert not (world["victim"] / "pwned.txt").exists()


@pytest.mark.pi
@pytest.mark.claude
@pytest.mark.codex
def test_the_same_call_without_walls_reads_the_key_and_plants_the_hook(agents_daemon, world):
    """What the walls stop: the same call from an unsandboxed pi job reaches both targets (acting as a
    person stays refused without walls too: the escaped process still descends from the daemon)."""
    daemon = agents_daemon
    job, victim, approval = attack(daemon, world, "pi", "none")
    assert daemon.show(job)["driver_opts"]["walls"] == "none"
    assert (world["project"] / "leak.txt").read_text() == KEY
    assert (world["project"] / ".git" / "hooks" / "pre-commit").read_text() == "pwned\n"
    assert f"is for a person only: job {job} may not" in (world["project"] / "said.txt").read_text()
    assert [a["id"] for a in daemon.show(victim)["approvals"]] == [approval]
    assert not (world["victim"] / "pwned.txt").exists()
