"""Worktree isolation over real git: create, inspect, finish, remove, list, prune, tools, CLI.

Every test ends by proving that ``git worktree list`` shows the main tree only.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskloom.hooks import HookConfig
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tools.base import ToolContext, ToolResult
from taskloom.tools.worktree_tools import EnterWorktreeTool, ExitWorktreeTool, WorktreeSession
from taskloom.worktrees import (
    Worktree,
    WorktreeError,
    create_worktree,
    finish,
    inspect,
    list_worktrees,
    prune,
    remove,
)

_IDENTITY = ("-c", "user.name=Test", "-c", "user.email=test@example.com")


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", *_IDENTITY, "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, f"git {args}: {proc.stderr}"
    return proc.stdout


def worktree_paths(repo: Path) -> list[str]:
    return [
        line.removeprefix("worktree ")
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


def assert_only_main_tree(repo: Path) -> None:
    assert worktree_paths(repo) == [str(repo)]
    assert git(repo, "branch", "--list", "taskloom/*") == ""


@pytest.fixture
def no_git_above(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever surrounds the test's directory, git must not find a repository above it."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))


@pytest.fixture
def repo(tmp_path: Path, no_git_above: None) -> Iterator[Path]:
    """A repository with one commit; a test that leaves worktrees behind fails."""
    path = (tmp_path / "repo").resolve()
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("hello\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial")
    yield path
    left = worktree_paths(path)[1:]
    for extra in left:  # clean up first so one failure does not cascade
        subprocess.run(["git", "worktree", "remove", "--force", extra], cwd=path, timeout=30)
    assert not left, f"test left worktrees behind: {left}"


def head(cwd: Path) -> str:
    return git(cwd, "rev-parse", "HEAD").strip()


async def test_clean_finish_removes_the_worktree_and_its_branch(repo: Path) -> None:
    wt = await create_worktree(repo, "clean")
    assert wt.path == repo / ".taskloom" / "worktrees" / "clean"
    assert wt.branch == "taskloom/clean" and wt.base_commit == head(repo)
    assert (wt.path / "README.md").read_text() == "hello\n"
    assert str(wt.path) in worktree_paths(repo)
    assert "taskloom/clean" in git(repo, "branch", "--list", "taskloom/*")
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""  # excluded
    assert "/.taskloom/worktrees/" in (repo / ".git" / "info" / "exclude").read_text()
    assert (await inspect(wt)).clean

    result = await finish(wt)
    assert not result.kept
    assert not wt.path.exists()
    assert not (repo / ".taskloom" / "worktrees" / ".meta" / "clean.json").exists()
    assert_only_main_tree(repo)


async def test_a_commit_in_the_worktree_keeps_it_and_reports_the_diff(repo: Path) -> None:
    wt = await create_worktree(repo, "feature")
    (wt.path / "feature.py").write_text("print('new')\n")
    git(wt.path, "add", "feature.py")
    git(wt.path, "commit", "-q", "-m", "add feature")

    result = await finish(wt)
    assert result.kept
    assert result.path == wt.path and result.branch == "taskloom/feature"
    assert "feature.py" in result.diffstat and "1 commit" in result.reason
    assert wt.path.is_dir() and head(wt.path) != wt.base_commit
    assert not (repo / "feature.py").exists()  # the main tree never saw it

    with pytest.raises(WorktreeError, match="1 commit"):
        await remove(wt, discard_changes=False)
    assert wt.path.is_dir()
    await remove(wt, discard_changes=True)
    assert_only_main_tree(repo)


async def test_an_untracked_file_keeps_the_worktree(repo: Path) -> None:
    wt = await create_worktree(repo, "scratch")
    (wt.path / "notes").mkdir()
    (wt.path / "notes" / "todo.txt").write_text("remember\n")

    state = await inspect(wt)
    assert not state.moved and state.changes == (("??", "notes/todo.txt"),)
    result = await finish(wt)
    assert result.kept and "notes/todo.txt" in result.diffstat
    assert "untracked" in result.diffstat
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""

    with pytest.raises(WorktreeError, match=r"notes/todo\.txt"):
        await remove(wt, discard_changes=False)
    await remove(wt, discard_changes=True)
    assert_only_main_tree(repo)


async def test_an_uncommitted_edit_shows_in_the_diffstat(repo: Path) -> None:
    wt = await create_worktree(repo, "edit")
    (wt.path / "README.md").write_text("hello\nworld\n")
    result = await finish(wt)
    assert result.kept and "README.md" in result.diffstat and "1 +" in result.diffstat
    await remove(wt, discard_changes=True)
    assert_only_main_tree(repo)


async def test_two_worktrees_do_not_see_each_others_changes(repo: Path) -> None:
    one = await create_worktree(repo, "one")
    two = await create_worktree(repo, "two")
    (one.path / "README.md").write_text("from one\n")
    (two.path / "README.md").write_text("from two\n")
    git(one.path, "commit", "-q", "-am", "one's change")

    assert (one.path / "README.md").read_text() == "from one\n"
    assert (two.path / "README.md").read_text() == "from two\n"
    assert (repo / "README.md").read_text() == "hello\n"
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert (await inspect(two)).changed_files == ["README.md"]
    assert not (await inspect(two)).moved

    for wt in (one, two):
        assert (await finish(wt)).kept
        await remove(wt, discard_changes=True)
    assert_only_main_tree(repo)


async def test_a_worktree_starts_from_the_given_base(repo: Path) -> None:
    first = head(repo)
    (repo / "README.md").write_text("second\n")
    git(repo, "commit", "-q", "-am", "second")
    wt = await create_worktree(repo, "old", base=first)
    assert wt.base_commit == first
    assert (wt.path / "README.md").read_text() == "hello\n"
    assert not (await finish(wt)).kept
    assert_only_main_tree(repo)


async def test_a_taken_branch_name_fails_loudly_and_changes_nothing(repo: Path) -> None:
    first = head(repo)
    (repo / "README.md").write_text("second\n")
    git(repo, "commit", "-q", "-am", "second")
    git(repo, "branch", "taskloom/taken", first)

    with pytest.raises(WorktreeError, match="already exists"):
        await create_worktree(repo, "taken")
    assert git(repo, "rev-parse", "taskloom/taken").strip() == first  # untouched
    assert not (repo / ".taskloom" / "worktrees" / "taken").exists()
    assert worktree_paths(repo) == [str(repo)]
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert (repo / "README.md").read_text() == "second\n"
    git(repo, "branch", "-D", "taskloom/taken")
    assert_only_main_tree(repo)


async def test_a_taken_path_or_a_bad_name_fails_without_creating_a_branch(repo: Path) -> None:
    (repo / ".taskloom" / "worktrees" / "busy").mkdir(parents=True)
    with pytest.raises(WorktreeError, match="already exists"):
        await create_worktree(repo, "busy")
    for bad in ("../escape", ".meta", "-rf", "a b", "x" * 65, ""):
        with pytest.raises(WorktreeError, match="invalid worktree name"):
            await create_worktree(repo, bad)
    with pytest.raises(WorktreeError, match="cannot resolve no-such-ref"):
        await create_worktree(repo, "nobase", base="no-such-ref")
    assert_only_main_tree(repo)


async def test_an_unborn_head_is_an_error(tmp_path: Path, no_git_above: None) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(WorktreeError, match="cannot resolve HEAD"):
        await create_worktree(empty, "x")
    assert git(empty, "branch", "--list", "--all") == ""
    assert worktree_paths(empty) == [str(empty.resolve())]


async def test_outside_git_without_hooks_is_a_clear_error(
    tmp_path: Path, no_git_above: None
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    other_hooks = HookConfig.parse(
        {"PreToolUse": [{"hooks": [{"type": "command", "command": "x"}]}]}
    )
    for hooks in (None, other_hooks):
        with pytest.raises(WorktreeError, match="needs a git repository or WorktreeCreate hooks"):
            await create_worktree(plain, "x", hooks=hooks)
    assert list(plain.iterdir()) == []
    with pytest.raises(WorktreeError, match="not inside a git repository"):
        await list_worktrees(plain)


async def test_worktree_create_hook_names_the_directory_and_remove_hook_gets_it(
    tmp_path: Path, no_git_above: None
) -> None:
    plain, target, record = tmp_path / "plain", tmp_path / "hooked", tmp_path / "removed.json"
    plain.mkdir()
    quoted = shlex.quote(str(target))
    hooks = HookConfig.parse(
        {
            "WorktreeCreate": [
                {"hooks": [{"type": "command", "command": f"mkdir -p {quoted} && echo {quoted}"}]}
            ],
            "WorktreeRemove": [
                {"hooks": [{"type": "command", "command": f"cat > {shlex.quote(str(record))}"}]}
            ],
        }
    )
    wt = await create_worktree(plain, "h", hooks=hooks)
    assert wt.path == target.resolve() and wt.hook_based and target.is_dir()
    result = await finish(wt, hooks=hooks)
    assert not result.kept
    assert json.loads(record.read_text())["worktree_path"] == str(target.resolve())

    failing = HookConfig.parse(
        {"WorktreeCreate": [{"hooks": [{"type": "command", "command": "echo no >&2; exit 1"}]}]}
    )
    with pytest.raises(WorktreeError, match="no"):
        await create_worktree(plain, "h2", hooks=failing)


# --- EnterWorktree / ExitWorktree --------------------------------------------------------------


async def call(tool: Any, rt: TaskRuntime, **raw: Any) -> ToolResult:
    params = tool.validate(raw)
    if isinstance(params, ToolResult):
        return params
    ctx = ToolContext(runtime=rt, owner=rt.session_id, cwd=tool.session.cwd)
    result: ToolResult = await tool.call(params, ctx)
    return result


async def test_enter_and_exit_keep(repo: Path) -> None:
    session = WorktreeSession(cwd=repo)
    enter, leave = EnterWorktreeTool(session), ExitWorktreeTool(session)
    async with TaskRuntime() as rt:
        entered = await call(enter, rt, name="mine")
        assert not entered.is_error, entered.content
        wt = session.active
        assert wt is not None and session.cwd == wt.path == repo / ".taskloom/worktrees/mine"
        again = await call(enter, rt, name="other")
        assert again.is_error and "Already in worktree" in again.content
        assert session.cwd == wt.path

        (wt.path / "draft.txt").write_text("wip\n")
        kept = await call(leave, rt, action="keep")
        assert not kept.is_error and "draft.txt" in kept.content
        assert session.cwd == repo and session.active is None
        assert wt.path.is_dir() and "taskloom/mine" in git(repo, "branch", "--list")
        not_in = await call(leave, rt, action="keep")
        assert not_in.is_error and "Not in a worktree" in not_in.content
    await remove(wt, discard_changes=True)
    assert_only_main_tree(repo)


async def test_exit_remove_needs_discard_changes_when_there_are_changes(repo: Path) -> None:
    session = WorktreeSession(cwd=repo)
    enter, leave = EnterWorktreeTool(session), ExitWorktreeTool(session)
    async with TaskRuntime() as rt:
        assert not (await call(enter, rt)).is_error  # a random name
        wt = session.active
        assert wt is not None and wt.path.name.startswith("wt-")
        (wt.path / "README.md").write_text("changed\n")
        (wt.path / "new.txt").write_text("new\n")

        refused = await call(leave, rt, action="remove")
        assert refused.is_error
        assert "README.md" in refused.content and "new.txt" in refused.content
        assert "discard_changes" in refused.content
        assert session.active is wt and session.cwd == wt.path and wt.path.is_dir()

        removed = await call(leave, rt, action="remove", discard_changes=True)
        assert not removed.is_error, removed.content
        assert session.cwd == repo and session.active is None and not wt.path.exists()
    assert_only_main_tree(repo)


async def test_exit_remove_of_a_clean_worktree(repo: Path) -> None:
    session = WorktreeSession(cwd=repo)
    async with TaskRuntime() as rt:
        assert not (await call(EnterWorktreeTool(session), rt, name="tidy")).is_error
        removed = await call(ExitWorktreeTool(session), rt, action="remove")
        assert not removed.is_error and "Removed worktree" in removed.content
        assert session.cwd == repo
    assert_only_main_tree(repo)


async def test_enter_outside_git_fails_and_stays_put(tmp_path: Path, no_git_above: None) -> None:
    session = WorktreeSession(cwd=tmp_path)
    async with TaskRuntime() as rt:
        result = await call(EnterWorktreeTool(session), rt)
        assert result.is_error and "needs a git repository" in result.content
        bad = await call(EnterWorktreeTool(session), rt, name="../up")
        assert bad.is_error and "name" in bad.content
        bad_action = await call(ExitWorktreeTool(session), rt, action="delete")
        assert bad_action.is_error and "action" in bad_action.content
    assert session.cwd == tmp_path and session.active is None


# --- list / prune / CLI ------------------------------------------------------------------------


def create_in_child(repo: Path, name: str) -> None:
    """Create a worktree from a process that then exits, like a session that crashed."""
    code = (
        "import asyncio, sys; from pathlib import Path; "
        "from taskloom.worktrees import create_worktree; "
        "asyncio.run(create_worktree(Path(sys.argv[1]), sys.argv[2]))"
    )
    subprocess.run([sys.executable, "-c", code, str(repo), name], check=True, timeout=60)


def taskloom(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskloom", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.e2e
async def test_list_and_prune_keep_anything_with_work_or_an_owner(repo: Path) -> None:
    for name in ("stale", "dirty", "ahead"):
        create_in_child(repo, name)
    live = await create_worktree(repo, "live")  # this process is alive: in use
    home = repo / ".taskloom" / "worktrees"
    (home / "dirty" / "scratch.txt").write_text("x\n")
    (home / "ahead" / "a.txt").write_text("a\n")
    git(home / "ahead", "add", "a.txt")
    git(home / "ahead", "commit", "-q", "-m", "ahead")

    infos = {i.name: i for i in await list_worktrees(repo)}
    assert set(infos) == {"stale", "dirty", "ahead", "live"}
    assert infos["stale"].clean and not infos["stale"].in_use
    assert infos["dirty"].changes == ("scratch.txt",) and not infos["dirty"].clean
    assert not infos["ahead"].clean and infos["ahead"].changes == ()
    assert infos["live"].in_use and infos["live"].branch == "taskloom/live"
    assert all(i.age_s is not None and 0 <= i.age_s < 120 for i in infos.values())

    listed = taskloom(repo, "worktrees")
    assert listed.returncode == 0, listed.stderr
    assert "taskloom/dirty" in listed.stdout and "dirty" in listed.stdout

    proc = taskloom(repo, "worktrees", "--prune", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    fate = {Path(r["path"]).name: r for r in report["pruned"]}
    assert not fate["stale"]["kept"]
    assert fate["dirty"]["kept"] and "scratch.txt" in fate["dirty"]["reason"]
    assert fate["ahead"]["kept"] and "commits would be lost" in fate["ahead"]["reason"]
    assert fate["live"]["kept"] and "in use" in fate["live"]["reason"]
    left = {Path(w["path"]).name for w in report["worktrees"]}
    assert left == {"dirty", "ahead", "live"}
    assert not (home / "stale").exists()
    assert "taskloom/stale" not in git(repo, "branch", "--list")

    again = await prune(repo)  # pruning twice removes nothing more
    assert all(r.kept for r in again) and len(again) == 3
    for name in ("dirty", "ahead"):
        info = infos[name]
        await remove(Worktree(info.path, info.branch, info.base_commit, repo), discard_changes=True)
    assert not (await finish(live)).kept
    assert_only_main_tree(repo)


@pytest.mark.e2e
def test_worktrees_command_outside_git(tmp_path: Path, no_git_above: None) -> None:
    proc = taskloom(tmp_path, "worktrees", "--json")
    assert proc.returncode == 1
    assert "not inside a git repository" in proc.stderr


@pytest.mark.e2e
def test_worktrees_command_with_none(repo: Path) -> None:
    proc = taskloom(repo, "worktrees")
    assert proc.returncode == 0, proc.stderr
    assert "No taskloom worktrees." in proc.stdout
    assert json.loads(taskloom(repo, "worktrees", "--prune", "--json").stdout) == {
        "worktrees": [],
        "pruned": [],
    }
    assert_only_main_tree(repo)
