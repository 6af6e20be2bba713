"""The app's diff view (``d``): a real daemon, a real git repository made here, built-in agents that
write files in their own worktrees (docs/worktrees.md, docs/keys.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from roost.tui.agent_view import AgentViewScreen
from roost.tui.diff_view import DiffScreen, FileDiff, split_diff

from gitrepo import make_repo
from tui_helpers import SIZE, burst, make_app, notice, open_job, press_alone, select_row, type_text, until

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {"README": "first line\n"})


def labels(screen: DiffScreen) -> list[str]:
    return [str(screen.file_list.get_option_at_index(i).prompt) for i in range(screen.file_list.option_count)]


async def open_diff_of(pilot, app, job: str) -> DiffScreen:
    await select_row(pilot, app, job)
    await pilot.press("d")
    screen = await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen, "the diff view")
    await until(pilot, lambda: screen.loaded, "the diff to be read")
    return screen


async def test_d_shows_a_worktree_jobs_files_and_the_selected_files_diff(daemon, repo):
    job = daemon.spawn("write f.txt hello\nrun git commit -qam 'a readme' --allow-empty", cwd=str(repo), worktree=True)
    daemon.wait_state(job, "idle", "done")
    worktree = Path(daemon.show(job)["worktree"])
    (worktree / "README").write_text("first line\nsecond line\n")  # uncommitted, tracked
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_diff_of(pilot, app, job)
        assert sorted(labels(screen)) == ["  +1   -0  README", "  +1   -0  f.txt"]
        assert app.focused is screen.file_list
        first = screen.selected
        assert first in ("README", "f.txt")
        await pilot.press("down" if first == "README" else "up")
        await until(pilot, lambda: screen.selected == "f.txt", "f.txt selected")
        assert "+hello" in screen.shown and "new file" in screen.shown
        await pilot.press("j" if screen.file_list.highlighted == 0 else "k")
        await until(pilot, lambda: screen.selected == "README", "README selected")
        assert "+second line" in screen.shown and "hello" not in screen.shown
        await pilot.press("pagedown")  # scrolls the diff, never moves the file list
        assert screen.selected == "README"
        await pilot.press("escape")
        assert isinstance(app.screen, AgentViewScreen)


async def test_a_job_without_a_worktree_says_so_and_opens_nothing(daemon, repo):
    job = daemon.spawn("say nothing to see", cwd=str(repo))
    daemon.wait_state(job, "idle", "done")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, job)
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, AgentViewScreen)
        assert "has no worktree of its own" in notice(app)


async def test_the_diff_of_a_working_job_is_read_again_as_it_changes(daemon, repo):
    job = daemon.spawn("write early.txt one\nwait-for late\nwrite late.txt two\nwait-for never", cwd=str(repo),
                       worktree=True)
    daemon.wait_for(lambda: (Path(daemon.show(job)["worktree"] or "/nonexistent") / "early.txt").exists(),
                    what="the first file")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_diff_of(pilot, app, job)
        assert [f.path for f in screen.files] == ["early.txt"]
        daemon.release("late")
        await until(pilot, lambda: [f.path for f in screen.files] == ["early.txt", "late.txt"],
                    "the second file, read again by the screen's timer", timeout=15)
        assert screen.selected == "early.txt"  # the selection stays where it was


async def test_d_in_the_subagent_panel_and_slash_diff_on_the_job_screen(daemon, repo):
    parent = daemon.spawn("write p.txt parent\nwait-for never", cwd=str(repo), worktree=True, title="parent")
    home = daemon.wait_row(parent, lambda r: r["worktree"] is not None)["worktree"]
    child = daemon.spawn("write c.txt child\nwait-for never", parent=parent, cwd=home, worktree=True, title="child")
    daemon.wait_for(lambda: (Path(daemon.show(child)["worktree"] or "/nonexistent") / "c.txt").exists(),
                    what="the child's file")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_job(pilot, app, parent)
        await until(pilot, lambda: screen.panel.lines, "the subagent in the panel")
        await pilot.press("down")
        assert app.focused is screen.panel
        await press_alone(pilot, "d")
        diff = await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen, "the child's diff")
        await until(pilot, lambda: diff.loaded, "the diff to be read")
        assert diff.job_id == child and [f.path for f in diff.files] == ["c.txt"]
        await pilot.press("escape")
        assert app.screen is screen
        await pilot.press("escape")  # leave the panel for the composer
        await type_text(pilot, "/diff")
        await pilot.press("enter")
        diff = await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen, "the parent's diff")
        await until(pilot, lambda: diff.loaded, "the diff to be read")
        assert diff.job_id == parent and [f.path for f in diff.files] == ["p.txt"]
        assert "+parent" in diff.shown


async def test_keys_typed_behind_d_reach_the_diff_view(daemon, repo):
    job = daemon.spawn("write a.txt one\nwrite b.txt two", cwd=str(repo), worktree=True)
    daemon.wait_state(job, "idle", "done")
    app = make_app(daemon)
    async with app.run_test(size=SIZE) as pilot:
        await select_row(pilot, app, job)
        await burst(pilot, app, "d", "escape")
        await until(pilot, lambda: isinstance(app.screen, AgentViewScreen), "back on the agent view")
        assert not app.screen.filter_text


def test_split_diff_pairs_files_with_their_parts() -> None:
    text = "diff --git a/x b/x\n+1\ndiff --git a/y b/y\n+2\n"
    files = [{"path": "x", "added": 1, "deleted": 0}, {"path": "y", "added": 1, "deleted": 0}]
    assert split_diff(files, text) == (FileDiff("x", 1, 0, "diff --git a/x b/x\n+1\n"),
                                       FileDiff("y", 1, 0, "diff --git a/y b/y\n+2\n"))
    more = files + [{"path": "z", "added": None, "deleted": None}]
    assert [f.text for f in split_diff(more, text)] == ["diff --git a/x b/x\n+1\n", "diff --git a/y b/y\n+2\n", ""]
