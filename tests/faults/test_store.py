"""A damaged store or record loses no more than itself (issue 9, item 3): the daemon starts,
moves the damaged file aside, salvages what it can and says so until someone acknowledges it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from roost import paths as paths_mod
from roost.daemon.storage.repair import closed_cleanly, open_store
from roost.daemon.storage.store import Store
from roost.models import Job, State

from conftest import DaemonHarness


def seed(home: Path, count: int) -> Path:
    """Records written through the store's own API before the daemon starts."""
    p = paths_mod.resolve({"ROOST_HOME": str(home)})
    p.ensure()
    store = Store(p.store)
    with store.transaction():
        for i in range(count):
            job = Job(id=f"j{i:04d}", title=f"job {i}", driver="builtin", cwd="/", state=State.DONE,
                      created_at=1000.0 + i, state_since=1000.0 + i, last_text="y" * 300)
            store.save_job(job)
            store.add_timeline(job.id, "text", {"text": "z" * 300}, 1000.0 + i)
    store.close()
    return p.store


def asides(path: Path, why: str) -> list[Path]:
    return [p for p in path.parent.glob(f"{path.name}.{why}-*") if not p.name.endswith(("-wal", "-shm"))]


def status(daemon: DaemonHarness, *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "roost.cli", "daemon", "status", *args], env=daemon.env,
                          capture_output=True, text=True, check=True).stdout


def test_a_garbage_store_is_moved_aside_and_the_daemon_starts_on_a_new_one(roost_home: Path) -> None:
    path = seed(roost_home, 5)
    garbage = os.urandom(8192)
    path.write_bytes(garbage)
    daemon = DaemonHarness(roost_home)
    daemon.write_config("")
    daemon.start()
    try:
        [aside] = asides(path, "damaged")
        assert aside.read_bytes() == garbage, "the damaged file is kept as it was"
        notice = daemon.call("status")["store_notice"]
        assert str(aside) in notice and "damaged" in notice
        assert "STORE REPAIRED" in daemon.log_text()
        out = status(daemon)
        assert "THE STORE WAS REPAIRED" in out and str(aside) in out
        job = daemon.spawn("say fresh")
        assert daemon.wait_state(job, "idle")["last_text"] == "fresh"
        status(daemon, "--acknowledge")
        assert daemon.call("status")["store_notice"] is None
        assert "REPAIRED" not in status(daemon)
    finally:
        daemon.stop()


def test_a_truncated_store_gives_back_what_can_be_read(roost_home: Path) -> None:
    path = seed(roost_home, 3000)
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(int(size * 0.9))
    daemon = DaemonHarness(roost_home)
    daemon.write_config("")
    daemon.start()
    try:
        rows = daemon.rows()
        assert 1000 < len(rows) < 3000, "most records salvaged, the lost pages' records gone"
        assert all(r["title"] == f"job {int(r['id'][1:])}" for r in rows), "each salvaged record is whole"
        assert "salvaged" in daemon.call("status")["store_notice"]
        assert asides(path, "damaged")
    finally:
        daemon.stop()


def test_one_bad_record_is_set_aside_and_the_rest_load(roost_home: Path) -> None:
    path = seed(roost_home, 10)
    store = Store(path)
    with store.transaction():
        store._db.execute("UPDATE jobs SET record='{not json' WHERE id='j0003'")
    store.close()
    daemon = DaemonHarness(roost_home)
    daemon.write_config("")
    daemon.start()
    try:
        ids = {r["id"] for r in daemon.rows()}
        assert ids == {f"j{i:04d}" for i in range(10)} - {"j0003"}
        assert "j0003" in daemon.call("status")["store_notice"]
    finally:
        daemon.stop()
    store = Store(path)
    kept = store._db.execute("SELECT record, error FROM damaged_records WHERE id='j0003'").fetchone()
    assert kept["record"] == "{not json" and "JSONDecodeError" in kept["error"]
    store.close()


def roost_cli(daemon: DaemonHarness, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "roost.cli", *args], env=daemon.env, capture_output=True,
                          text=True, timeout=60, check=True)


def replaced_store(roost_home: Path) -> tuple[Path, DaemonHarness]:
    """A store found empty where roost ran before (every record gone), and a daemon on its new one."""
    path = seed(roost_home, 3)
    (path.parent / "sessions" / "j0001.jsonl").write_text('{"prompt": "say hi"}\n')
    for extra in path.parent.glob("roost.db-*"):
        extra.unlink()
    path.write_bytes(b"")
    daemon = DaemonHarness(roost_home)
    daemon.write_config("")
    daemon.start()
    return path, daemon


def test_an_empty_store_where_roost_ran_before_is_not_taken_as_new_in_silence(roost_home: Path) -> None:
    path, daemon = replaced_store(roost_home)
    try:
        notice = daemon.call("status")["store_notice"]
        assert "empty (0 bytes)" in notice and asides(path, "empty")
        assert daemon.rows() == []
    finally:
        daemon.stop()


def test_a_replaced_store_is_said_on_stderr_of_every_command_until_acknowledged(roost_home: Path) -> None:
    path, daemon = replaced_store(roost_home)
    try:
        [aside] = asides(path, "empty")
        for args in (("ls",), ("ls", "--json"), ("spawn", "--cwd", "/", "say hi")):
            done = roost_cli(daemon, *args)
            [line] = done.stderr.splitlines()
            assert line.startswith("roost: the store was found empty (0 bytes) and replaced on "), args
            assert str(aside) in line and line.endswith("run `roost daemon status --acknowledge` once you have "
                                                        "read this"), line
        assert "no jobs yet" not in roost_cli(daemon, "ls").stdout, "the new job is listed"
        roost_cli(daemon, "daemon", "status", "--acknowledge")
        for args in (("ls",), ("ls", "--json"), ("daemon", "status")):
            assert roost_cli(daemon, *args).stderr == "", args
    finally:
        daemon.stop()


async def test_the_app_shows_a_banner_until_the_notice_is_acknowledged(roost_home: Path) -> None:
    from roost.tui.store_banner import StoreBanner
    from tui_helpers import SIZE, make_app, open_job, table_ids, until

    _path, daemon = replaced_store(roost_home)
    try:
        app = make_app(daemon)
        async with app.run_test(size=SIZE) as pilot:
            banner = await until(pilot, lambda: next(iter(app.screen.query(StoreBanner).filter(".-shown")), None),
                                 "the banner")
            # The class is set before the next layout pass gives it room: wait for that, not for a time.
            await until(pilot, lambda: banner.region.height >= 1, "the banner to take room on the screen")
            text = str(banner.render())
            assert "the store was found empty" in text and "roost daemon status --acknowledge" in text
            job_screen = await open_job(pilot, app, daemon.spawn("say here"))
            assert job_screen.query_one(StoreBanner).has_class("-shown"), "on the job's screen too"
            roost_cli(daemon, "daemon", "status", "--acknowledge")
            await until(pilot, lambda: not job_screen.query_one(StoreBanner).has_class("-shown"),
                        "the banner to go when acknowledged elsewhere")
        job = daemon.spawn("say after")
        app = make_app(daemon)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: job in table_ids(app), "the app to list the new job")
            assert app.link.store_notice is None
            assert not app.screen.query(StoreBanner).filter(".-shown"), "acknowledged: no banner"
    finally:
        daemon.stop()


def test_the_notice_stays_within_its_bound_keeping_the_newest(tmp_path: Path) -> None:
    """It rides in every person's hello: a store repaired again and again cannot grow it."""
    from roost.daemon.storage.store import NOTICE_CHARS

    store = Store(tmp_path / "roost.db")
    try:
        store.set_notice("x" * (NOTICE_CHARS - 1))
        assert len(store.notice()) == NOTICE_CHARS - 1, "at the bound: kept whole"
        store.set_notice("y" * (NOTICE_CHARS * 3))
        assert store.notice() == "y" * NOTICE_CHARS, "past it: the newest, cut to the bound"
        for i in range(100):
            store.set_notice(f"repair {i:03d}: " + "z" * 300)
        notice = store.notice()
        assert len(notice) <= NOTICE_CHARS and notice.splitlines()[-1].startswith("repair 099")
        assert not notice.startswith("repair 000"), "the oldest gave way"
    finally:
        store.close()


def test_a_start_checks_the_store_whole_unless_it_is_as_a_clean_close_left_it(roost_home: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`PRAGMA quick_check` reads every page (half of a start at 150 MB): a daemon's clean close
    notes the file as it left it, and the next open skips the check only for that very file."""
    path = seed(roost_home, 20)
    checks: list[Path] = []
    real = Store.check
    monkeypatch.setattr(Store, "check", lambda self: (checks.append(self.path), real(self))[1])
    state = path.parent
    open_store(path, state).close()
    assert len(checks) == 1, "no clean close noted (the seed's, a killed daemon's): checked"
    closed_cleanly(path)
    open_store(path, state).close()
    assert len(checks) == 1, "as the clean close left it: not checked"
    open_store(path, state).close()
    assert len(checks) == 2, "the mark is used up by the open it served"
    closed_cleanly(path)
    with open(path, "r+b") as fh:  # damaged after the clean close
        fh.truncate(path.stat().st_size - 4096)
    store = open_store(path, state)
    try:
        assert len(checks) >= 3 and "damaged" in (store.notice() or ""), "a file changed since is checked and repaired"
    finally:
        store.close()


def test_a_daemon_stopped_cleanly_notes_its_store_and_a_killed_one_does_not(roost_home: Path) -> None:
    path = seed(roost_home, 3)
    daemon = DaemonHarness(roost_home)
    daemon.write_config("")
    daemon.start()
    assert not path.with_name("roost.db.clean").exists(), "the open used up any mark"
    daemon.stop()
    assert path.with_name("roost.db.clean").exists()
    daemon.start()
    assert daemon.proc is not None
    daemon.proc.kill()
    daemon.proc.wait()
    assert not path.with_name("roost.db.clean").exists()
    daemon.stop()
