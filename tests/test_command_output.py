"""A command-line agent's output, end to end: a real daemon, the real command worker, the real
`roost logs -f`, and tests/command_output_agent.py printing as a build does.

Tens of MB stream to the transcript while the command runs and are in the timeline whole afterwards,
byte for byte, in entries of about ENTRY_MAX; a trickle goes out line by line; a character cut by a
pause stays whole; a turn keeps at most its profile's ``max_output``, and says so.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

import pytest

from roost.daemon.storage.recovery import kill_stale_workers
from roost.programs.turn_output import NEAR
from roost.protocol import ENTRY_MAX

from command_output_agent import flood_lines
from conftest import LEAKY_ENV, DaemonHarness, pid_alive, shims_of
from faults.test_disk_full import small_disk  # noqa: F401  (a fixture: a 3 MB tmpfs)

AGENT = Path(__file__).resolve().parent / "command_output_agent.py"
MB = 1024 * 1024
BOUND = MB
CONFIG = f"""
[drivers.build]
kind = "command"
command = [{json.dumps(sys.executable)}, {json.dumps(str(AGENT))}, "{{prompt}}"]

[drivers.small]
kind = "command"
command = [{json.dumps(sys.executable)}, {json.dumps(str(AGENT))}, "{{prompt}}"]
max_output = {BOUND}

[drivers.yes]
kind = "command"
command = ["yes", "{{prompt}}"]
max_output = {BOUND}
"""
#: A `roost logs` line that starts an entry: its time, its kind padded to 9, its text.
ENTRY_LINE = re.compile(r"^\d\d:\d\d:\d\d (.{9}) (.*)$")
NUMBERED = re.compile(r"line (\d{7}) ")


@pytest.fixture
def daemon(daemon_factory: Callable[[str], DaemonHarness]) -> DaemonHarness:
    return daemon_factory(CONFIG)


class Follower:
    """`roost logs -f JOB` as a person runs it, read as it prints: the text of its text entries with
    the newlines taken out (what `logs` prints cannot tell an entry's last newline from its own),
    the highest build line number it showed, and what it said on stderr."""

    def __init__(self, daemon: DaemonHarness, job: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "roost.cli", "logs", "--all", "-f", job],
                                     env=daemon.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, encoding="utf-8")
        self.flat: list[str] = []
        self.size = 0
        self.texts = 0
        self.highest = -1
        self.stderr = ""
        self._readers = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        in_text = False
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            start = ENTRY_LINE.match(line)
            if start:
                in_text = start.group(1).strip() == "text"
                self.texts += in_text
                line = start.group(2)
            if in_text:
                self.flat.append(line)
                self.size += len(line)
                for number in NUMBERED.findall(line):
                    self.highest = max(self.highest, int(number))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def text(self) -> str:
        return "".join(self.flat)

    def stop(self) -> None:
        self.proc.kill()  # also when stopped (SIGSTOP)
        self.proc.wait(10)
        for reader in self._readers:
            reader.join(10)


@pytest.fixture
def follow(daemon: DaemonHarness):
    started: list[Follower] = []

    def start(job: str) -> Follower:
        started.append(Follower(daemon, job))
        return started[-1]

    yield start
    for follower in started:
        if follower.proc.poll() is None:
            follower.stop()


def memory(pid: int, field: str) -> int:
    """A process's VmRSS or VmHWM (its peak), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for pid {pid}")


def flat(data: bytes) -> str:
    return data.decode().replace("\n", "")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def texts(daemon: DaemonHarness, job: str) -> list[str]:
    return daemon.texts(job)


def notes(daemon: DaemonHarness, job: str) -> list[str]:
    return [e["data"]["message"] for e in daemon.timeline(job) if e["kind"] == "note"]


def kept(daemon: DaemonHarness, job: str) -> bytes:
    """The output of the job's turns as its timeline holds it: its text entries joined."""
    return "".join(texts(daemon, job)).encode()


# -- tens of MB, as they come ----------------------------------------------------------------------------
def test_forty_megabytes_stream_to_logs_f_while_the_command_runs_and_land_whole(daemon, follow, tmp_path):
    size = 40_000_000
    lines = flood_lines(size)
    output = b"".join(lines)
    half = len(lines) // 2
    go_on = tmp_path / "go-on"
    assert daemon.proc is not None
    daemon_rss = memory(daemon.proc.pid, "VmRSS")
    job = daemon.spawn(f"flood {size} 4 {half} {go_on}", driver="build")
    follower = follow(job)
    daemon.wait_for(lambda: follower.highest >= half - 1, timeout=120, what=f"`roost logs -f` to show line {half}")
    row = daemon.show(job)
    assert row["state"] == "working", "the command waits for the file: it is still running"
    assert pid_alive(row["pid"])
    go_on.write_text("")  # the command prints the rest

    daemon.wait_state(job, "idle", timeout=180)
    assert memory(row["pid"], "VmHWM") < 64 * MB, "the worker holds no more than a few pieces"
    assert memory(daemon.proc.pid, "VmHWM") - daemon_rss < 32 * MB, "nor does the daemon"
    got = kept(daemon, job)
    assert len(got) == len(output) and sha(got) == sha(output), "the timeline holds the output byte for byte"
    entries = texts(daemon, job)
    assert all(len(t.encode()) <= ENTRY_MAX for t in entries)
    assert size // ENTRY_MAX <= len(entries) <= size // NEAR, f"{len(entries)} entries: not coalesced"
    assert not notes(daemon, job)
    assert output.decode().endswith(daemon.show(job)["last_text"]), "the peek holds the end of the output"

    want = flat(output)
    daemon.wait_for(lambda: follower.size >= len(want), timeout=120, what="`roost logs -f` to show all of it")
    follower.stop()
    shown = follower.text()
    assert len(shown) == len(want) and sha(shown.encode()) == sha(want.encode()), \
        f"`logs -f` lost or repeated output (it said: {follower.stderr!r})"
    assert follower.texts == len(entries)


def test_a_follower_that_stops_reading_is_dropped_and_follows_again_without_losing_a_byte(daemon, follow, tmp_path):
    """`logs -f` paused (as a pager does) while 20 MB go by: the daemon drops it past its 4 MiB
    queue; when it reads again it connects again and pages on from the last entry it printed."""
    size = 20_000_000
    go_on = tmp_path / "go-on"
    job = daemon.spawn(f"flood {size} 0 100 {go_on}", driver="build")
    follower = follow(job)
    daemon.wait_for(lambda: follower.highest >= 99, timeout=60, what="`roost logs -f` to show line 100")
    follower.proc.send_signal(signal.SIGSTOP)
    go_on.write_text("")
    daemon.wait_state(job, "idle", timeout=120)
    daemon.wait_for(lambda: "lagged" in daemon.log_text(), timeout=30, what="the daemon to drop the follower")
    follower.proc.send_signal(signal.SIGCONT)
    want = flat(b"".join(flood_lines(size)))
    daemon.wait_for(lambda: follower.size >= len(want), timeout=120, what="`roost logs -f` to catch up")
    follower.stop()
    assert "following again" in follower.stderr
    assert sha(follower.text().encode()) == sha(want.encode()), "each entry once, in order"
    assert follower.texts == len(texts(daemon, job))


def test_a_trickle_goes_out_line_by_line(daemon, follow, tmp_path):
    job = daemon.spawn(f"trickle 8 {tmp_path}", driver="build")
    follower = follow(job)
    for i in range(8):  # the command prints line i, then waits until the test saw it
        daemon.wait_for(lambda: f"tick {i}" in follower.text(), timeout=30, what=f"`logs -f` to show tick {i}")
        (tmp_path / str(i)).write_text("")
    daemon.wait_state(job, "idle", timeout=30)
    assert texts(daemon, job) == [f"tick {i}\n" for i in range(8)]
    assert daemon.show(job)["last_text"] == "".join(f"tick {i}\n" for i in range(8)), \
        "the pieces of one turn's output add up in the peek"


def test_a_character_cut_by_a_pause_stays_whole(daemon, tmp_path):
    ack = tmp_path / "ack"
    job = daemon.spawn(f"split {ack}", driver="build")
    daemon.wait_for(lambda: texts(daemon, job), timeout=30, what="what came before the pause")
    assert texts(daemon, job) == ["before "], "the first half of the character waits for the rest"
    ack.write_text("")
    daemon.wait_state(job, "idle", timeout=30)
    assert texts(daemon, job) == ["before ", "😀 after\n"]


def test_the_session_file_holds_the_output_in_pieces_and_a_new_worker_resumes_it(daemon):
    size = 3_000_000
    job = daemon.spawn(f"flood {size} 0", driver="build")
    row = daemon.wait_state(job, "idle", timeout=60)
    lines = Path(row["session"]).read_bytes().splitlines()
    entries = [json.loads(line) for line in lines]
    said = [e["text"] for e in entries if e.get("role") == "assistant"]
    assert "".join(said).encode() == b"".join(flood_lines(size))
    assert max(len(line) for line in lines) < 3 * ENTRY_MAX + 100, "no line holds more than a piece (as JSON)"
    assert entries[-1] == {"type": "exit", "code": 0, "printed": len(b"".join(flood_lines(size)))}
    daemon.call("close", job=job)
    daemon.wait_row(job, lambda r: r["reaped"] and not r["worker_up"])
    daemon.call("send", job=job, text="trickle 0 /")
    daemon.wait_row(job, lambda r: r["state"] == "idle" and r["worker_up"], timeout=30)
    assert [e for e in map(json.loads, Path(row["session"]).read_bytes().splitlines())
            if e.get("type") == "session"] == [entries[0]], "the resumed worker kept the session"


# -- the bound -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("over", [0, 1, 5001])  # at the bound, past it by a byte, past it inside a character
def test_past_max_output_the_first_bytes_are_kept_and_two_notes_say_what_was_left_out(daemon_factory, over):
    lines = flood_lines(200_000)
    output = b"".join(lines)
    bound = len(output) - over
    daemon = daemon_factory(CONFIG.replace(f"max_output = {BOUND}", f"max_output = {bound}"))
    job = daemon.spawn("flood 200000 0", driver="small")
    daemon.wait_state(job, "idle", timeout=30)
    got = kept(daemon, job)
    said = notes(daemon, job)
    if not over:
        assert got == output and said == []
        return
    keep = output[:bound]
    keep = keep[:len(keep.decode(errors="ignore").encode())]  # to a whole character
    assert got == keep
    assert said == [f"the command's output reached this turn's bound of {bound} bytes (max_output): the command "
                    f"runs on, and what it prints from here is read but not kept",
                    f"left out the last {len(output) - len(keep)} bytes of the command's output: it printed "
                    f"{len(output)} bytes this turn, and a turn keeps {bound} (max_output)"]


def test_a_runaway_command_fills_the_timeline_up_to_the_bound_and_runs_on_until_stopped(daemon):
    job = daemon.spawn("y", driver="yes")
    daemon.wait_for(lambda: notes(daemon, job), timeout=30, what="the note that the bound was reached")
    row = daemon.show(job)
    assert row["state"] == "working", "the command runs on past the bound"
    assert kept(daemon, job) == b"y\n" * (BOUND // 2)
    daemon.call("stop", job=job)
    daemon.wait_state(job, "stopped", timeout=30)
    assert kept(daemon, job) == b"y\n" * (BOUND // 2), "nothing past the bound was kept"
    assert len(texts(daemon, job)) <= BOUND // NEAR



# -- a full disk -----------------------------------------------------------------------------------------------
def test_a_turn_that_fills_the_disk_waits_and_lands_whole_once_it_frees(small_disk, monkeypatch):
    """The daemon's home on a 3 MB tmpfs, 2 MB of it a filler: a 400 KB turn fills the rest (its
    timeline, its search index, the worker's session file). The store refuses the turn's words;
    nothing acknowledges them, so the worker's shim stops reading the command, which waits on its
    full pipe instead of its output being lost (docs/reliability.md). Once the filler goes, what
    waited is applied, the command goes on, and its output lands whole, the turn ended."""
    home = small_disk / "home"
    monkeypatch.setenv("ROOST_HOME", str(home))
    for name in LEAKY_ENV:
        monkeypatch.delenv(name, raising=False)
    daemon = DaemonHarness(home)
    daemon.write_config(CONFIG)
    daemon.start()
    try:
        filler = small_disk / "filler"
        filler.write_bytes(b"\0" * 2048 * 1024)
        job = daemon.spawn("flood 400000 0", driver="build")
        daemon.wait_for(lambda: "applied again once the store takes writes" in daemon.log_text(), timeout=60,
                        what="the store refusing the turn's words")
        assert "the state directory is full" in daemon.log_text()
        assert daemon.show(job)["state"] == "working"
        filler.unlink()
        daemon.wait_state(job, "idle", timeout=90)  # what waited is applied: the turn ended
        assert kept(daemon, job) == b"".join(flood_lines(400_000)), "every byte, once, in order"
    finally:
        daemon.stop()
        kill_stale_workers(daemon.paths.state_dir)  # what a stop that fell back to SIGTERM left running
    daemon.wait_for(lambda: not shims_of(daemon.paths.state_dir), what="no shim of this home left")
