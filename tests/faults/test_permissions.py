"""Owner-only, whatever the umask; nothing another user owns or may write is used (issue 9, item 7)."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from roost import paths as paths_mod
from roost.config import ConfigError, load_config
from roost.daemon.config_reload import ConfigFile

OTHER = "roost-other"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(scope="module")
def other_uid() -> int:
    """A second local user (created when the tests run as root, as CI does)."""
    if os.getuid() != 0:
        pytest.skip("needs root to create a second user")
    try:
        return pwd.getpwnam(OTHER).pw_uid
    except KeyError:  # another test process may make it at the same moment (pytest -n): exit 9, it exists
        done = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER],
                              capture_output=True, text=True)
        assert done.returncode in (0, 9), done.stderr
        return pwd.getpwnam(OTHER).pw_uid


def test_under_umask_000_every_directory_is_0700_and_every_file_0600(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "ROOST_HOME": str(home)}
    script = ("import os; os.umask(0)\n"
              "from roost import paths\n"
              "from roost.daemon.storage.store import Store\n"
              "p = paths.resolve(); p.ensure(); Store(p.store).close()\n")
    subprocess.run([sys.executable, "-c", script], env=env, check=True)
    p = paths_mod.resolve({"ROOST_HOME": str(home)})
    for d in (home, p.config_dir, p.state_dir, p.sessions_dir, p.logs_dir, p.runtime_dir):
        assert mode(d) == 0o700, d
    for f in p.state_dir.glob("roost.db*"):
        assert mode(f) == 0o600, f


def test_a_group_writable_config_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    config = tmp_path / "roost.toml"
    config.write_text("idle_timeout = 5\n")
    config.chmod(0o664)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert str(config) in str(info.value) and "writable by group" in str(info.value)
    assert f"chmod go-w {config}" in str(info.value)


def test_a_config_made_writable_after_start_is_not_reloaded(tmp_path: Path) -> None:
    config = tmp_path / "roost.toml"
    config.write_text("idle_timeout = 5\n")
    config.chmod(0o600)
    watcher = ConfigFile(config)
    config.write_text("idle_timeout = 99\n")
    config.chmod(0o666)
    assert not watcher.reload().to_dict()["reloaded"]
    assert watcher.config.idle_timeout == 5
    assert watcher.last_error is not None and "writable by group and others" in str(watcher.last_error)


def test_a_config_directory_owned_by_another_user_is_refused(tmp_path: Path, other_uid: int) -> None:
    home = tmp_path / "home"
    p = paths_mod.resolve({"ROOST_HOME": str(home)})
    p.ensure()
    os.chown(p.config_dir, other_uid, -1)
    with pytest.raises(paths_mod.UnsafePath) as info:
        p.ensure()
    assert str(p.config_dir) in str(info.value) and f"uid {other_uid}" in str(info.value)


def test_a_config_file_another_user_wrote_is_never_read(tmp_path: Path, other_uid: int) -> None:
    config = tmp_path / "roost.toml"
    config.write_text('default_driver = "evil"\n[drivers.evil]\nkind = "command"\ncommand = ["sh", "-c", "id"]\n')
    config.chmod(0o644)
    os.chown(config, other_uid, -1)
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert "belongs to uid" in str(info.value)


def test_a_runtime_directory_that_links_to_another_users_directory_is_refused(tmp_path: Path,
                                                                               other_uid: int) -> None:
    home = tmp_path / "home"
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, other_uid, -1)
    home.mkdir(mode=0o700)
    (home / "run").symlink_to(theirs)
    p = paths_mod.resolve({"ROOST_HOME": str(home)})
    with pytest.raises(paths_mod.UnsafePath) as info:
        p.ensure()
    assert "a link to" in str(info.value) and str(theirs) in str(info.value)
    assert mode(theirs) == 0o700 and os.stat(theirs).st_uid == other_uid, "nothing was changed on their side"


# -- the store file (issue 18) ---------------------------------------------------------------------------
NOBODY = 65534


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm"])
def test_a_store_file_another_user_owns_is_refused_and_left_as_it_is(tmp_path: Path, suffix: str) -> None:
    from roost.daemon.storage.store import Store
    from roost.daemon.storage.repair import open_store

    p = paths_mod.resolve({"ROOST_HOME": str(tmp_path / "home")})
    p.ensure()
    Store(p.store).close()
    target = p.store.with_name(p.store.name + suffix)
    target.touch()
    os.chown(target, NOBODY, -1)
    before = sorted(f.name for f in p.state_dir.iterdir())
    with pytest.raises(paths_mod.UnsafePath) as info:
        open_store(p.store, p.state_dir)
    assert str(target) in str(info.value) and f"belongs to uid {NOBODY}" in str(info.value)
    assert sorted(f.name for f in p.state_dir.iterdir()) == before, "not moved aside, not repaired"


def test_a_store_writable_by_others_is_refused_with_the_fix_and_the_daemon_does_not_start(tmp_path: Path) -> None:
    from roost.daemon.storage.store import Store

    home = tmp_path / "home"
    p = paths_mod.resolve({"ROOST_HOME": str(home)})
    p.ensure()
    Store(p.store).close()
    p.store.chmod(0o666)
    env = {**os.environ, "ROOST_HOME": str(home)}
    env.pop("ROOST_CONFIG", None)
    done = subprocess.run([sys.executable, "-m", "roost.daemon"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"{p.store} is writable by group and others" in done.stdout and f"chmod go-w {p.store}" in done.stdout


def test_a_store_others_may_read_is_made_owner_only_and_so_is_every_file_sqlite_makes(roost_home: Path) -> None:
    from conftest import DaemonHarness
    from roost.daemon.storage.store import Store

    daemon = DaemonHarness(roost_home)
    daemon.write_config("")
    daemon.paths.ensure()
    Store(daemon.paths.store).close()
    daemon.paths.store.chmod(0o644)
    old = os.umask(0)
    try:
        daemon.start()
    finally:
        os.umask(old)
    try:
        daemon.wait_state(daemon.spawn("say hi"), "idle")
        files = sorted(daemon.paths.state_dir.glob("roost.db*"))
        assert {f.name for f in files} >= {"roost.db", "roost.db-wal", "roost.db-shm"}
        assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
    finally:
        daemon.stop()


# -- ownership all the way up (issue 18) -------------------------------------------------------------------
def test_a_parent_of_roost_home_that_others_may_write_is_refused_with_the_fix(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    p = paths_mod.resolve({"ROOST_HOME": str(shared / "me" / "roost")})
    with pytest.raises(paths_mod.UnsafePath) as info:
        p.ensure()
    text = str(info.value)
    assert f"the directory {shared} above it is writable by group and others (mode 777)" in text
    assert f"chmod go-w {shared}" in text
    assert not (shared / "me").exists(), "nothing was made under it"


def test_the_daemon_refuses_to_start_under_a_parent_others_may_write(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o775)
    env = {**os.environ, "ROOST_HOME": str(shared / "roost")}
    env.pop("ROOST_CONFIG", None)
    done = subprocess.run([sys.executable, "-m", "roost.cli", "ls"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and f"{shared} above it is writable by group (mode 775)" in done.stderr
    assert not (shared / "roost" / "run" / "roost.sock").exists()


def shared_sticky(tmp_path: Path) -> Path:
    """A directory like /tmp: everyone may write it, nobody may rename what is someone else's."""
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    return sticky


def test_a_directory_of_ones_own_in_a_sticky_shared_directory_is_fine(tmp_path: Path) -> None:
    sticky = shared_sticky(tmp_path)
    p = paths_mod.resolve({"ROOST_HOME": str(sticky / "mine" / "roost")})
    p.ensure()
    assert mode(sticky / "mine") == 0o700 and p.socket.parent.is_dir()
    p.ensure()  # and again, once it is all there


def test_a_directory_another_user_owns_above_roost_home_is_refused(tmp_path: Path) -> None:
    sticky = shared_sticky(tmp_path)
    theirs = sticky / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, -1)
    p = paths_mod.resolve({"ROOST_HOME": str(theirs / "roost")})
    with pytest.raises(paths_mod.UnsafePath) as info:
        p.ensure()
    assert f"{theirs} above it belongs to uid {NOBODY}" in str(info.value)


def test_a_link_another_user_owns_in_a_sticky_directory_is_refused(tmp_path: Path) -> None:
    """The link itself could be replaced by its owner, whatever it points at."""
    sticky = shared_sticky(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = sticky / "link"
    link.symlink_to(mine)
    os.lchown(link, NOBODY, -1)
    with pytest.raises(paths_mod.UnsafePath) as info:
        paths_mod.check_ancestors(link / "roost" / "state", "state directory")
    assert f"{link} is in the shared directory {sticky}" in str(info.value)
