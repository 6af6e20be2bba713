"""The `roost` command as a person runs it: it starts the daemon on demand, prints what it did, and
says what went wrong on stderr with a non-zero exit. Also: the headless core never loads textual."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roost import paths as paths_mod
from roost.cli.logs import TAIL_BYTES
from roost.client import Client

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run(roost_home):
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["ROOST_HOME"] = str(roost_home)

    def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "roost.cli", *args], env=env, capture_output=True,
                              text=True, timeout=60, cwd=str(roost_home.parent))
        if check and proc.returncode != 0:
            raise AssertionError(f"roost {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
        return proc

    yield run_cli
    run_cli("daemon", "stop", "--all", check=False)


def wait_json_state(run, job: str, state: str) -> dict:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        row = json.loads(run("show", job, "--json").stdout)
        if row["state"] == state:
            return row
        time.sleep(0.05)
    raise AssertionError(f"{job} never reached {state}")


def test_commands_start_the_daemon_and_ls_json_has_the_record_fields(run):
    assert run("daemon", "status", check=False).returncode == 1
    job = run("spawn", "--title", "greeter", "say hello").stdout.strip()
    assert re.fullmatch(r"[a-z2-9]{4,8}", job)
    assert run("daemon", "status").returncode == 0
    wait_json_state(run, job, "idle")
    rows = json.loads(run("ls", "--json").stdout)
    assert len(rows) == 1
    row = rows[0]
    for key in ("id", "parent", "title", "driver", "cwd", "session", "state", "state_since", "created_at",
                "reaped", "pinned", "labels", "pid", "usage"):
        assert key in row, key
    assert row["title"] == "greeter" and row["driver"] == "builtin"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", row["created_at"])
    text = run("ls").stdout
    assert job in text and "greeter" in text and "idle" in text


def test_ls_indents_children_under_their_parent(run):
    parent = run("spawn", "spawn say kid; report done k\nsay parent").stdout.strip()
    wait_json_state(run, parent, "idle")
    lines = run("ls").stdout.splitlines()
    parent_line = next(i for i, line in enumerate(lines) if parent in line)
    assert lines[parent_line + 1].startswith("  "), lines


def test_ls_lists_newest_first_with_the_apps_marks(run):
    """`roost ls` listed oldest first (the app newest first), and its ○ meant idle where the
    app's ○ means a closed worker."""
    older = run("spawn", "say one").stdout.strip()
    newer = run("spawn", "spawn say kid; report done k\nspawn say kid2; report done k\nsay two").stdout.strip()
    wait_json_state(run, older, "idle")
    wait_json_state(run, newer, "idle")
    run("close", older)
    wait_json_state(run, older, "idle")
    lines = [line for line in run("ls").stdout.splitlines() if not line.startswith("…")]
    roots = [line.split()[2] for line in lines if not line.startswith(" ")]
    assert roots == [newer, older], lines
    kids = [line.split()[2] for line in lines if line.startswith("  ")]
    created = {row["id"]: row["created_at"] for row in json.loads(run("ls", "--json").stdout)}
    assert len(kids) == 2 and created[kids[0]] <= created[kids[1]], "children in the order they were spawned"
    by_id = {line.split()[2]: line for line in lines}
    assert by_id[newer].startswith("● – ") and by_id[older].startswith("○ – "), lines


def test_ls_shows_what_a_waiting_job_asks_and_why_a_failed_one_failed(run):
    asker = run("spawn", "say I looked around\nask deploy to staging or prod?").stdout.strip()
    wait_json_state(run, asker, "waiting")
    failer = run("spawn", "say step one is done\nfail the build broke").stdout.strip()
    wait_json_state(run, failer, "failed")
    lines = {line.split()[2]: line for line in run("ls").stdout.splitlines() if line.split()[2:3]}
    assert lines[asker].endswith("— deploy to staging or prod?"), lines[asker]
    assert "the build broke" in lines[failer], lines[failer]


def test_errors_go_to_stderr_with_a_non_zero_exit(run):
    proc = run("send", "zzzz", "hello", check=False)
    assert proc.returncode == 2 and "no job with id 'zzzz'" in proc.stderr and proc.stdout == ""
    job = run("spawn", "wait-for never").stdout.strip()
    wait_json_state(run, job, "working")
    assert "stopped 1 job" in run("stop", job).stdout
    assert "already stopped" in run("stop", job).stdout
    proc = run("close", "zzzz", check=False)
    assert proc.returncode == 2 and "no job with id 'zzzz'" in proc.stderr


def test_send_resumes_and_logs_show_the_transcript(run):
    job = run("spawn", "say one\nreport done r").stdout.strip()
    wait_json_state(run, job, "done")
    assert "closed" in run("close", job).stdout
    assert run("send", job, "say two").stdout.startswith("resumed")
    wait_json_state(run, job, "idle")
    logs = run("logs", job).stdout
    assert logs.index("one") < logs.index("two") and "resumed=True" in logs


def test_an_empty_prompt_is_refused_and_starts_nothing(run):
    """`roost spawn ''` ran an empty turn."""
    for prompt in ("", "  \n "):
        proc = run("spawn", prompt, check=False)
        assert proc.returncode == 1 and "the prompt is empty" in proc.stderr, proc.stderr
    assert json.loads(run("ls", "--json").stdout) == []


def test_config_commands_name_the_file_and_the_key(run, roost_home, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('default_driver = "builtin"\nnotify = "loud"\n')
    assert run("--config", str(cfg), "config", "path").stdout.strip() == str(cfg)
    proc = run("--config", str(cfg), "config", "check", check=False)
    assert proc.returncode == 1 and str(cfg) in proc.stderr and "notify" in proc.stderr
    cfg.write_text("idle_timeout = 60\n")
    assert "ok" in run("--config", str(cfg), "config", "check").stdout
    assert json.loads(run("--config", str(cfg), "config", "show").stdout)["idle_timeout"] == 60


def test_config_check_refuses_what_the_app_would_refuse(run, tmp_path):
    """A theme the app has not (it then refused to start) and a port past 65535 were "ok"."""
    cfg = tmp_path / "roost.toml"
    cfg.write_text('theme = "nope"\n')
    proc = run("--config", str(cfg), "config", "check", check=False)
    assert proc.returncode == 1 and "key 'theme'" in proc.stderr and "textual-dark" in proc.stderr, proc.stderr
    cfg.write_text('[hosts.box]\nssh = "box"\nport = 70000\n')
    proc = run("--config", str(cfg), "config", "check", check=False)
    assert proc.returncode == 1 and "key 'hosts.box.port'" in proc.stderr, proc.stderr
    assert "from 1 to 65535, got integer 70000" in proc.stderr
    cfg.write_text('theme = "nord"\n[hosts.box]\nssh = "box"\nport = 65535\n')
    assert "ok" in run("--config", str(cfg), "config", "check").stdout


def test_report_outside_a_job_is_a_clear_error(run):
    proc = run("report", "done", "x", check=False)
    assert proc.returncode == 1 and "ROOST_JOB_ID" in proc.stderr


def test_no_module_outside_the_tui_imports_textual():
    offenders = []
    for path in (ROOT / "roost").rglob("*.py"):
        if "tui" in path.relative_to(ROOT / "roost").parts:
            continue
        if re.search(r"^\s*(from|import)\s+textual", path.read_text(), re.M):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_the_cli_and_the_daemon_load_without_textual(roost_home):
    code = ("import sys; sys.argv = ['roost', 'config', 'path']\n"
            "import roost.cli, roost.daemon.server.listener, roost.programs.builtin_agent, roost.rules.views\n"
            "try:\n    roost.cli.main()\nexcept SystemExit:\n    pass\n"
            "print('textual' in sys.modules, 'rich' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "ROOST_HOME": str(roost_home)}).stdout.split()
    assert out[-2:] == ["False", "False"]


def test_a_command_imports_its_own_module_only(run, roost_home):
    """roost/cli/ imports the module of the command named and nothing of the others; `ls --json`
    loads no rules (the human `ls`'s marks) and not the asyncio client; `daemon status` no asyncio."""
    run("spawn", "say lazy")
    code = ("import json, sys; sys.argv = ['roost', *sys.argv[1:]]\n"
            "import roost.cli\n"
            "try:\n    roost.cli.main()\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules"
            " if m.startswith(('roost.cli.', 'roost.rules', 'roost.client.aio')) or m == 'asyncio')), file=sys.stderr)")
    env = {**os.environ, "ROOST_HOME": str(roost_home)}

    def loaded(*args: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, env=env)
        return json.loads(done.stderr.strip().splitlines()[-1])

    assert loaded("ls", "--json") == ["roost.cli.common", "roost.cli.listing"]
    assert "roost.cli.tree" in loaded("ls") and "roost.cli.jobs" not in loaded("ls")
    assert loaded("config", "path") == ["roost.cli.common", "roost.cli.config"]
    assert "asyncio" not in loaded("daemon", "status")  # 19 ms of a command that asks one question
    assert set(loaded("--help")) >= {"roost.cli.jobs", "roost.cli.logs", "roost.cli.hosts"}  # it lists them all


def test_ls_into_a_reader_that_left_ends_quietly(run, roost_home):
    """`roost ls --json | head`: the reader is gone before the first byte (its end of the pipe is
    closed); ls ends with exit 0 and nothing on stderr (it ended in UnboundLocalError)."""
    run("spawn", "say piped")
    env = {**os.environ, "ROOST_HOME": str(roost_home)}
    for args in (("ls", "--json"), ("ls",)):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            done = subprocess.run([sys.executable, "-m", "roost.cli", *args], stdout=write_end, stderr=subprocess.PIPE,
                                  text=True, env=env, timeout=60)
        finally:
            os.close(write_end)
        assert (done.returncode, done.stderr) == (0, ""), args


def test_a_daemon_that_cannot_start_is_reported_with_the_reason(run, roost_home, tmp_path):
    cfg = tmp_path / "broken.toml"
    cfg.write_text("max_running_jobs = -1\n")
    proc = run("--config", str(cfg), "ls", check=False)
    assert proc.returncode == 1
    assert "daemon exited with code 1" in proc.stderr and "max_running_jobs" in proc.stderr


def test_pin_and_unpin_from_the_cli(run):
    job = run("spawn", "say pin me").stdout.strip()
    assert run("pin", job).stdout.strip() == f"pinned {job}"
    assert json.loads(run("show", job, "--json").stdout)["pinned"] is True
    assert run("unpin", job).stdout.strip() == f"unpinned {job}"
    assert json.loads(run("show", job, "--json").stdout)["pinned"] is False


def cli_proc(roost_home, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["ROOST_HOME"] = str(roost_home)
    return subprocess.Popen([sys.executable, "-m", "roost.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_daemon_start_in_the_foreground_serves_until_sigterm(run, roost_home):
    import signal as signals
    import time

    proc = cli_proc(roost_home, "daemon", "start", "--foreground")
    deadline = time.monotonic() + 15
    while run("daemon", "status", check=False).returncode != 0:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    proc.send_signal(signals.SIGTERM)
    assert proc.wait(15) == 0
    assert "serving on" in proc.stderr.read()
    assert run("daemon", "status", check=False).returncode == 1


def test_logs_follow_prints_entries_as_they_happen(run, roost_home):
    job = run("spawn", "say first\nwork 0.5\nsay second").stdout.strip()
    follower = cli_proc(roost_home, "logs", "-f", job)
    try:
        seen = []
        assert follower.stdout is not None
        for line in follower.stdout:
            seen.append(line)
            if "second" in line:
                break
        text = "".join(seen)
        assert text.index("first") < text.index("second")
    finally:
        follower.kill()
        follower.wait(5)


# -- at real scale ---------------------------------------------------------------------------------------
T0 = 1_700_000_000.0


def seed(home: Path, roots: int, text: str = "", children_of_newest: int = 0, blocked_oldest: bool = False,
         entries: int = 0, pad: int = 0) -> list[str]:
    """Write finished records (and a timeline) through the store before the daemon starts: spawning
    thousands of real jobs would take minutes. Returns the root ids, oldest first."""
    from roost.daemon.storage.store import Store
    from roost.models import Job, State

    paths = paths_mod.resolve({"ROOST_HOME": str(home)})
    paths.ensure()
    store = Store(paths.store)
    ids = [f"r{n:05d}" for n in range(roots)]

    def record(job_id: str, n: int, state: State = State.DONE, parent: str | None = None) -> Job:
        return Job(id=job_id, title=f"seeded {job_id}", driver="builtin", cwd=str(home), state=state,
                   state_since=T0 + n, created_at=T0 + n, updated_at=T0 + n, reaped=True, last_text=text,
                   parent=parent, depth=1 if parent else 0)

    with store.transaction():
        for n, job_id in enumerate(ids):
            state = State.BLOCKED if blocked_oldest and n == 0 else State.DONE
            store.save_job(record(job_id, n, state))
        for n in range(children_of_newest):
            store.save_job(record(f"c{n:04d}", roots + n, parent=ids[-1]))
        for n in range(entries):
            store.add_timeline(ids[-1], "text", {"text": f"entry {n}" + "x" * pad}, ts=T0 + n)
    store.close()
    return ids


def test_ls_json_prints_every_job_as_one_array_at_thousands_of_long_records(run, roost_home):
    ids = seed(roost_home, 3200, text="a long answer. " * 267)  # 4,005 characters each
    proc = run("ls", "--json")
    rows = json.loads(proc.stdout)
    assert [r["id"] for r in rows] == ids, "every job once, oldest first"
    assert len(proc.stdout) > 3200 * 4000, "more than any one frame could carry"
    row = rows[-1]
    assert len(row["last_text"]) == 4005, "the full record, not the row's peek line"
    for key in ("driver_opts", "session", "labels", "usage", "descendants", "worker_up"):
        assert key in row, key
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", row["created_at"])


def test_ls_lists_live_work_and_the_newest_jobs_and_counts_the_rest(run, roost_home):
    ids = seed(roost_home, 2000, text="done.", children_of_newest=3, blocked_oldest=True)
    lines = run("ls").stdout.splitlines()
    shown = {line.split()[2] for line in lines if not line.startswith("…")}
    assert set(ids[-50:]) <= shown, "the 50 newest roots"
    assert ids[0] in shown, "an old job that needs someone is listed whatever its age"
    assert ids[1] not in shown and ids[-51] not in shown
    newest = next(i for i, line in enumerate(lines) if ids[-1] in line)
    assert all(lines[newest + k].startswith("  ") for k in (1, 2, 3)), "children indented under their parent"
    assert lines[-1] == f"… {2003 - len(shown):,} more; roost ls --all"
    everything = run("ls", "--all").stdout.splitlines()
    assert len(everything) == 2003 and not everything[-1].startswith("…")


def test_logs_reads_the_tail_first_and_pages_back_or_from_the_start(run, roost_home):
    job = seed(roost_home, 1, entries=5000)[0]
    proc = run("logs", job)
    texts = [line.split("text", 1)[1].strip() for line in proc.stdout.splitlines()]
    assert texts == [f"entry {n}" for n in range(4800, 5000)], "the newest 200, oldest of them first"
    assert f"roost logs --all {job}" in proc.stderr
    texts = [line.split("text", 1)[1].strip() for line in run("logs", job, "-n", "3500").stdout.splitlines()]
    assert texts == [f"entry {n}" for n in range(1500, 5000)], "more than one page, paged back"
    texts = [line.split("text", 1)[1].strip() for line in run("logs", job, "--all").stdout.splitlines()]
    assert texts == [f"entry {n}" for n in range(5000)]


@pytest.mark.parametrize("past", [0, 1])
def test_logs_prints_the_newest_entries_in_at_most_tail_bytes_unless_asked_for_more(run, roost_home, past):
    """Ten entries of a build's size: four print in TAIL_BYTES exactly, one byte more and three do;
    -n and --all print what they ask for, whatever the size."""
    line = TAIL_BYTES // 4 + past  # one entry's printed line, its newline included
    job = seed(roost_home, 1, entries=10, pad=line - len("00:00:00 text      entry 0\n"))[0]
    proc = run("logs", job)
    fits = 4 - past
    assert [text[19:26] for text in proc.stdout.splitlines()] == [f"entry {n}" for n in range(10 - fits, 10)]
    assert len(proc.stdout.encode()) == fits * line <= TAIL_BYTES
    assert f"the newest {fits} entries, up to {TAIL_BYTES // 1024} KiB" in proc.stderr
    assert f"roost logs -n N {job}" in proc.stderr and f"roost logs --all {job}" in proc.stderr
    assert len(run("logs", job, "-n", "10").stdout.splitlines()) == 10
    assert len(run("logs", job, "--all").stdout.splitlines()) == 10


def test_logs_prints_the_newest_entry_whole_even_past_tail_bytes(run, roost_home):
    job = seed(roost_home, 1, entries=3, pad=2 * TAIL_BYTES)[0]
    proc = run("logs", job)
    assert proc.stdout.splitlines() and len(proc.stdout.splitlines()) == 1
    assert proc.stdout.rstrip("\n").endswith("entry 2" + "x" * (2 * TAIL_BYTES))
    assert "the newest 1 entries" in proc.stderr


def test_logs_follow_gets_every_entry_when_the_daemon_drops_it_and_it_subscribes_again(run, roost_home):
    """A follower that stops reading (SIGSTOP, as a pager would) while a job prints ~8 MB is dropped
    by the daemon; when it reads again it follows again from its last entry, and nothing is lost."""
    import signal as signals

    job = run("spawn", "say ready").stdout.strip()
    wait_json_state(run, job, "idle")
    follower = cli_proc(roost_home, "logs", "-f", job)
    assert follower.stdout is not None and follower.stderr is not None
    try:
        def read_until(tag: str) -> list[str]:
            seen = []
            for line in follower.stdout:
                seen.append(line)
                if tag in line:
                    return seen
            raise AssertionError(f"the follower ended before {tag!r}: {follower.stderr.read()}")

        read_until("ready")
        for marker in ("marker-0", "marker-1"):  # the second one comes through the subscription
            run("send", job, f"say {marker}")
            read_until(marker)
        follower.send_signal(signals.SIGSTOP)
        filler = "x" * 60_000
        with Client.connect(paths_mod.resolve().socket) as client:  # a prompt too big for argv
            for turn in range(8):
                client.call("send", job=job, text="\n".join(f"say big-{turn}-{n} {filler}" for n in range(15)))
                wait_json_state(run, job, "idle")
        run("send", job, "say marker-end")
        wait_json_state(run, job, "idle")
        follower.send_signal(signals.SIGCONT)
        tags = [m.group(1) for line in read_until("marker-end")
                if (m := re.match(r"\d\d:\d\d:\d\d text\s+(big-\d+-\d+) ", line))]
        assert tags == [f"big-{turn}-{n}" for turn in range(8) for n in range(15)], "each entry once, in order"
        follower.kill()
        assert "following again" in follower.stderr.read()
    finally:
        follower.kill()
        follower.wait(5)


def test_daemon_status_says_how_many_spare_workers_are_ready(run):
    run("spawn", "say hi")  # starts the daemon, which starts its spare behind the spawn
    deadline = time.monotonic() + 20
    while "spare workers: 1 of 1 ready" not in (out := run("daemon", "status").stdout):
        assert time.monotonic() < deadline, out
        time.sleep(0.05)
    assert "roost daemon running" in out
