"""A job's walls (docs/isolation.md), tried from inside a sandboxed job's own shell: a command driver
whose agent is ``sh -c PROMPT``, on a real daemon. Each attack must fail and leave its target as it
was; the same shell unsandboxed (isolation = "none") shows that each attack would have worked."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from conftest import DaemonHarness, environ_of, pid_alive

pytestmark = pytest.mark.skipif(subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True).returncode != 0,
                                reason="bubblewrap is not installed")

SECRET = "sk-live-do-not-leak-4242"
KEY = "-----BEGIN OPENSSH PRIVATE KEY----- fake"


def config(extra: str = "") -> str:
    return f"""{extra}
[drivers.sh]
kind = "command"
command = ["sh", "-c", "{{prompt}}"]
"""


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A person's home with secrets, a project (a git repository), a directory outside it."""
    home = tmp_path / "person"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(KEY)
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text(f"aws_secret_access_key = {SECRET}")
    (home / "notes.txt").write_text("readable")
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file").write_text("original")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SECRET_API_KEY", SECRET)
    return {"home": home, "project": project, "outside": outside}


def run(daemon: DaemonHarness, script: str, cwd: Path, **args: object) -> str:
    """What the job's shell printed for ``script`` (stderr with it), once its turn ended."""
    job = daemon.spawn(f"( {script} ) 2>&1; true", driver="sh", cwd=str(cwd), **args)
    daemon.wait_state(job, "idle")
    return "\n".join(daemon.texts(job))


ATTACKS = """
echo pwned > {outside}/file; echo pwned > {project}/.git/hooks/pre-commit; echo '[core] hooksPath=/x' >> {project}/.git/config;
echo pwned >> {config}; cat {home}/.ssh/id_ed25519; cat {home}/.aws/credentials; env; printenv SECRET_API_KEY;
ln -s {home}/.ssh/id_ed25519 leak; cat leak; ln -s {outside}/file swapped; echo pwned > swapped; cat {home}/notes.txt
"""


def attack(daemon: DaemonHarness, world: dict[str, Path], **args: object) -> str:
    return run(daemon, ATTACKS.format(config=daemon.config_path, **world).replace("\n", " "), world["project"], **args)


def test_files_secrets_and_roost_stay_out_of_reach(daemon_factory: Callable[[str], DaemonHarness], world):
    # The fake home and the outside directory are shown read-only, as a real home is: only the walls hide secrets.
    daemon = daemon_factory(config(f"sandbox_read = {json.dumps([str(world['home']), str(world['outside'])])}"))
    config_before = daemon.config_path.read_text()
    out = attack(daemon, world)
    assert "readable" in out, "the rest of the person's files stays readable"
    assert KEY not in out and SECRET not in out
    assert (world["outside"] / "file").read_text() == "original"
    assert not (world["project"] / ".git" / "hooks" / "pre-commit").exists()
    assert "hooksPath" not in (world["project"] / ".git" / "config").read_text()
    assert daemon.config_path.read_text() == config_before
    assert (world["project"] / "leak").is_symlink(), "the tree itself is writable"


def test_the_same_attacks_work_without_walls(daemon_factory: Callable[[str], DaemonHarness], world):
    """What the walls stop: the same shell with isolation = "none" reaches every target."""
    daemon = daemon_factory(config())
    out = attack(daemon, world, isolation="none")
    assert KEY in out and SECRET in out
    assert (world["outside"] / "file").read_text() == "pwned\n"
    assert (world["project"] / ".git" / "hooks" / "pre-commit").exists()


def test_another_jobs_processes_and_sockets_are_out_of_reach(daemon_factory: Callable[[str], DaemonHarness], world,
                                                              tmp_path):
    daemon = daemon_factory(config())
    victim = daemon.spawn("sleep 300", driver="sh", cwd=str(world["project"]))
    row = daemon.wait_for(lambda: (r := daemon.show(victim)).get("pid") and r, what="the victim's worker")
    pid, token = row["pid"], environ_of(row["pid"])["ROOST_TOKEN"]
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "other.sock"))
    listener.listen()
    shim_sockets = sorted(str(p) for p in (daemon.paths.state_dir / "workers").glob("*.sock"))
    assert shim_sockets
    probe = (f"cat /proc/{pid}/environ; kill -9 {pid}; ps ax; "
             f"python3 -c 'import socket,sys\nfor p in sys.argv[1:]:\n  s=socket.socket(socket.AF_UNIX)\n"
             f"  try: s.connect(p); print(\"CONN\" + \"ECTED\", p)\n  except OSError as e: print(\"refused\", e)' "
             f"{tmp_path / 'other.sock'} {' '.join(shim_sockets)}; "
             f"python3 -m roost.cli list")
    out = run(daemon, probe, world["project"])
    assert token not in out and "CONNECTED" not in out
    assert "refused" in out
    assert victim in out, "roost's own control socket stays reachable: the job's tools work"
    assert pid_alive(pid)
    listener.close()


def test_fork_bomb_and_memory_hog_meet_the_limits(daemon_factory: Callable[[str], DaemonHarness], world):
    daemon = daemon_factory(config("sandbox_processes = 40\nsandbox_memory_mb = 200"))
    bomb = ("import os, signal, time\nkids = []\ntry:\n  for i in range(120):\n    pid = os.fork()\n"
            "    if pid == 0:\n      os.close(1); os.close(2); time.sleep(60); os._exit(0)\n    kids.append(pid)\n"
            "except OSError as exc:\n  print('STOPPED', exc)\nprint('FORKED', len(kids))\n"
            "[os.kill(k, signal.SIGKILL) for k in kids]")
    out = run(daemon, f"python3 -c \"{bomb}\"; python3 -c 'x = bytearray(400 << 20); print(1 + 1)'", world["project"])
    forked = int(out.split("FORKED ", 1)[1].split()[0])
    assert "STOPPED" in out and forked < 40, out
    assert "\n2\n" not in out and "MemoryError" in out


def test_a_machine_without_bubblewrap_refuses_a_required_sandbox_and_says_so(
        daemon_factory: Callable[[str], DaemonHarness], world):
    from roost.client import ClientError

    daemon = daemon_factory(config('sandbox_bwrap = "/nonexistent/bwrap"'))
    with pytest.raises(ClientError, match="requires a sandbox .* not installed"):
        daemon.spawn("echo hi", driver="sh", cwd=str(world["project"]), isolation="sandbox!")
    job = daemon.spawn("echo hi", driver="sh", cwd=str(world["project"]))
    daemon.wait_state(job, "idle")
    assert daemon.show(job)["driver_opts"]["walls"].startswith("none: not sandboxed, bubblewrap")
    status = daemon.call("status")["sandbox"]
    assert not status["ok"] and "NOT sandboxed" in status["words"]
