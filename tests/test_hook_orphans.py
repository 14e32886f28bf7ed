"""Hooks are recorded for the orphan sweep before they start: a SIGKILL of taskloom leaves none."""

from __future__ import annotations

import asyncio
import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from helpers import TIME_FACTOR, alive, clean_env, run_processes, scripted_argv, wait_until
from taskloom.hooks import HookConfig, run_hooks
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import run_shell
from taskloom.worktrees import create_worktree, finish

HOOK_CHILD = "sh -c 'sleep 3411; :'"


async def _wait_for_file(path: Path, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> str:
    """The content of ``path`` once it exists (it is renamed into place whole)."""

    def there() -> bool:
        assert proc.poll() is None, f"taskloom ended (exit {proc.returncode}) before the hook ran"
        return path.exists()

    await wait_until(there, timeout, what=f"the hook to write {path}")
    return path.read_text()


async def _hook_tree(pid: int, timeout: float = 10.0) -> list[int]:
    """The hook shell and its descendants, once the ``sleep 3411`` is among them."""
    kids: list[psutil.Process] = []

    def sleeping() -> bool:
        kids[:] = psutil.Process(pid).children(recursive=True)
        return any(k.name() == "sleep" for k in kids)

    await wait_until(sleeping, timeout, what=f"a sleep under the hook {pid}")
    return [pid, *(k.pid for k in kids)]


@pytest.mark.e2e
async def test_a_hook_running_when_taskloom_is_sigkilled_is_reaped_by_the_next_session(
    tmp_path: Path, home: Path
) -> None:
    marker = tmp_path / "hook.pid"
    # The hook says it runs (its pid, renamed into place whole), then waits in a child shell.
    command = f"echo $$ > {marker}.tmp && mv {marker}.tmp {marker}; {HOOK_CHILD}"
    settings = {
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "Glob",
                    "hooks": [{"type": "command", "command": command, "timeout": 3600}],
                }
            ]
        }
    }
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    script = {
        "turns": [{"tool_calls": [{"name": "Glob", "input": {"pattern": "*"}}]}, {"text": "ok"}]
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(script))
    proc = subprocess.Popen(
        scripted_argv(tmp_path / "s.yaml", "--settings", str(tmp_path / "settings.json")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
        env=clean_env(),
    )
    try:
        hook_pid = int(await _wait_for_file(marker, proc))
        tree = await _hook_tree(hook_pid)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    # SIGKILL gives taskloom no chance to clean up: the hook and its children live on.
    assert all(alive(p) for p in tree), tree
    started = time.monotonic()
    async with TaskRuntime() as rt:  # a new session in the same TASKLOOM_HOME sweeps at start
        assert [p for p in tree if alive(p)] == []
        assert time.monotonic() - started < 10 * TIME_FACTOR
        # Its record is gone with it: nothing is left for a later sweep to try again.
        assert [r for r in rt.store.list_processes() if r.task_id.startswith("hook-")] == []
        assert [t for t in rt.store.list_tags() if t.tag.startswith("hook-")] == []


# Run by each process under test: does the store already hold a record of its own tag? (A tag
# record, or for a shell the process record that replaces it once its pid is known.)
CHECK = (
    "import os, sqlite3, sys; "
    "db = os.path.join(os.environ['TASKLOOM_HOME'], 'taskloom.db'); "
    "tag = os.environ['TASKLOOM_TASK_ID']; "
    "n = sqlite3.connect(db).execute("
    "'SELECT (SELECT count(*) FROM tags WHERE tag = ?) "
    "+ (SELECT count(*) FROM processes WHERE task_id = ?)', (tag, tag)).fetchone()[0]; "
    "open(sys.argv[1], 'a').write(('recorded ' if n else 'missing ') + tag + chr(10))"
)


def check_command(report: Path) -> str:
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(CHECK)} {shlex.quote(str(report))}"


def git(cwd: Path, *args: str) -> None:
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", *identity, *args], cwd=cwd, check=True, capture_output=True, timeout=30)


async def test_every_process_started_is_recorded_before_it_runs_and_forgotten_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    report = tmp_path / "report"
    check = check_command(report)
    repo = (tmp_path / "repo").resolve()
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-q", "-m", "initial")
    post_checkout = repo / ".git" / "hooks" / "post-checkout"
    post_checkout.write_text(f"#!/bin/sh\n{check}\n")
    post_checkout.chmod(0o755)
    plain = tmp_path / "plain"
    plain.mkdir()
    target = tmp_path / "hooked"
    hooks = HookConfig.parse(
        {
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": check}]}],
            "WorktreeCreate": [
                {
                    "hooks": [
                        {"type": "command", "command": f"{check}; mkdir -p {target}; echo {target}"}
                    ]
                }
            ],
        }
    )
    async with TaskRuntime() as rt:
        outcome = await run_hooks(
            hooks,
            "PreToolUse",
            {},
            target="Bash",
            cwd=tmp_path,
            session_id=rt.session_id,
            transcript_path=None,
        )
        assert outcome.errors == []
        wt = await create_worktree(plain, "h", hooks=hooks)  # outside git: the hook makes it
        assert wt.path == target.resolve()
        wt = await create_worktree(repo, "g")  # git runs post-checkout
        assert not (await finish(wt)).kept
        shell = await run_shell(rt, check, timeout=30)
        assert shell.exit_code == 0
        lines = report.read_text().splitlines()
        assert len(lines) == 4 and all(ln.startswith("recorded ") for ln in lines), lines
        tags = [ln.split()[1] for ln in lines]
        assert [t.split("-")[0] for t in tags[:3]] == ["hook", "hook", "git"]
        assert tags[3] == shell.task_id
        rows = rt.store.list_processes()
        # Reaped processes are forgotten; the shell's tag record gave way to its pid record.
        assert {r.task_id for r in rows} == {shell.task_id}
        assert all(r.pid != 0 for r in rows)
        assert rt.store.list_tags() == []


# Starts a daemon the way a careless hook would: its own session, its pipes closed, so neither
# the hook's process group nor its pipes lead to it. Prints the daemon's pid.
DAEMONISE = "setsid sleep {seconds} </dev/null >/dev/null 2>&1 & echo $!"


def _sleeps(seconds: int) -> list[psutil.Process]:
    """This test run's live ``sleep SECONDS`` processes, whatever their pid."""
    return run_processes(lambda p: p.info.get("cmdline") == ["sleep", str(seconds)])


async def test_a_hook_that_daemonises_a_child_leaves_nothing_running_after_a_normal_exit(
    tmp_path: Path,
) -> None:
    hooks = HookConfig.parse(
        {
            "PreToolUse": [
                {
                    "matcher": "Bash",
                    "hooks": [{"type": "command", "command": DAEMONISE.format(seconds=777)}],
                }
            ]
        }
    )
    async with TaskRuntime() as rt:
        outcome = await run_hooks(
            hooks,
            "PreToolUse",
            {},
            target="Bash",
            cwd=tmp_path,
            session_id=rt.session_id,
            transcript_path=None,
        )
        [result] = outcome.results
        assert (result.exit_code, outcome.errors) == (0, []), result.stderr
        daemon = int(result.stdout)
        assert not alive(daemon)
        assert _sleeps(777) == []
        # Killed and verified: the record is removed, nothing is left for a sweep to retry.
        assert [r for r in rt.store.list_processes() if r.task_id.startswith("hook-")] == []
        assert [t for t in rt.store.list_tags() if t.tag.startswith("hook-")] == []


def _new_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one commit, under ``tmp_path`` (git looks no higher)."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    repo = (tmp_path / "repo").resolve()
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-q", "-m", "initial")
    return repo


async def test_a_git_hook_that_daemonises_a_child_leaves_nothing_running_after_git_exits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _new_repo(tmp_path, monkeypatch)
    pid_file = tmp_path / "daemon.pid"
    post_checkout = repo / ".git" / "hooks" / "post-checkout"
    post_checkout.write_text(f"#!/bin/sh\n{DAEMONISE.format(seconds=778)} > {pid_file}\n")
    post_checkout.chmod(0o755)
    async with TaskRuntime() as rt:
        wt = await create_worktree(repo, "d")  # git exits normally, its hook's daemon lives on
        try:
            daemon = int(pid_file.read_text())
            assert not alive(daemon)
            assert _sleeps(778) == []
            assert [r for r in rt.store.list_processes() if r.task_id.startswith("git-")] == []
            assert [t for t in rt.store.list_tags() if t.tag.startswith("git-")] == []
        finally:
            assert not (await finish(wt)).kept


async def test_a_git_hook_child_holding_git_s_output_neither_stalls_nor_outlives_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _new_repo(tmp_path, monkeypatch)
    post_checkout = repo / ".git" / "hooks" / "post-checkout"
    # The sleep keeps git's stdout and stderr open long after git has exited.
    post_checkout.write_text("#!/bin/sh\nsleep 779 &\n")
    post_checkout.chmod(0o755)
    async with TaskRuntime():
        started = time.monotonic()
        wt = await asyncio.wait_for(create_worktree(repo, "held"), 30 * TIME_FACTOR)
        try:
            assert time.monotonic() - started < 5.0 * TIME_FACTOR
            assert _sleeps(779) == []
        finally:
            assert not (await finish(wt)).kept
