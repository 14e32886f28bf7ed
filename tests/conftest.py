"""Test-wide guards: every test runs in its own TASKLOOM_HOME and must leave nothing behind.

- Processes: every child we start inherits ``TASKLOOM_TEST_RUN``; after each test no process
  carrying it may be alive (zombies excepted). Leftovers are killed and the test fails.
- Temp dirs: the run has a temporary directory of its own (``TMPDIR`` for us and every child);
  nothing may remain in it at the end of the session but pytest's own ``pytest-of-*`` base.
  Other programs' files in the system temp directory, or another test run's, are not ours.
- Worktrees: the repository the tests run in has no git worktree but its own at the end.
- tmux: no tmux server started on a socket in the run's temporary directory (see
  ``tmux_driver``) may be running at the end, nor its socket be left; other users' or runs'
  servers are not ours.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest

import tmux_driver
from helpers import RUN_MARK, run_processes
from taskloom.settings import db_path
from taskloom.store import Store

if TYPE_CHECKING:
    from taskloom.tools.base import ToolContext

os.environ.setdefault(RUN_MARK, uuid.uuid4().hex)
# Set before pytest picks its base temp directory (lazily, at the first tmp_path), so that it
# too lives in the run's own directory.
RUN_TMP = tempfile.mkdtemp(prefix="taskloom-tests-")
os.environ["TMPDIR"] = RUN_TMP
tempfile.tempdir = RUN_TMP


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    # Mark coroutine tests for anyio before their items (and parametrizations) are made.
    if name.startswith("test") and inspect.iscoroutinefunction(obj):
        pytest.mark.anyio(obj)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def leftover_processes() -> list[psutil.Process]:
    """Live processes (not zombies) that carry this test run's mark, other than us."""
    return run_processes()


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private TASKLOOM_HOME per test; fails the test if it leaves processes behind."""
    path = tmp_path / "home"
    monkeypatch.setenv("TASKLOOM_HOME", str(path))
    yield path
    left = leftover_processes()
    if left:
        desc = [(p.pid, " ".join(p.cmdline()) if p.is_running() else "?") for p in left]
        for proc in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(left, timeout=5)
        pytest.fail(f"test left processes behind: {desc}")


@pytest.fixture
def store(home: Path) -> Iterator[Store]:
    """An open store in the test's TASKLOOM_HOME, closed afterwards."""
    s = Store(db_path())
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[ToolContext]:
    """A tool call's context on a live runtime, working in an empty ``tmp_path/work``."""
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tools.base import ToolContext

    work = tmp_path / "work"
    work.mkdir()
    async with TaskRuntime() as rt:
        yield ToolContext(runtime=rt, owner="main", cwd=work)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[tmux_driver.TmuxServer]:
    """A started private tmux server for the test (skips without tmux); closed afterwards."""
    if tmux_driver.TMUX is None:
        pytest.skip("tmux is not installed")
    with tmux_driver.TmuxServer(tmp_path) as server:
        yield server


def _leftover_tmux() -> list[str]:
    """tmux servers of this run still running (killed here) and their sockets left."""
    found = []
    servers = tmux_driver.leftover_servers(RUN_TMP)
    for proc in servers:
        with contextlib.suppress(psutil.Error):
            found.append(f"tmux server {proc.pid}: {' '.join(proc.cmdline())}")
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    tmux_driver.wait_processes(servers, timeout=5)
    found += [f"tmux socket {path}" for path in tmux_driver.leftover_sockets(RUN_TMP)]
    return found


def _project_worktrees() -> list[str]:
    """``git worktree list`` of the repository the tests run in (empty outside git)."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "worktree", "list", "--porcelain"],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=Path(__file__).parent,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    new = {name for name in os.listdir(RUN_TMP) if not name.startswith("pytest-of-")}
    problems = []
    if new:
        problems.append(f"temp entries left behind in {RUN_TMP}: {sorted(new)}")
    left = leftover_processes()
    if left:
        problems.append(f"processes left behind: {[p.pid for p in left]}")
    tmux_left = _leftover_tmux()
    if tmux_left:
        problems.append(f"tmux left behind: {tmux_left}")
    worktrees = _project_worktrees()
    if len(worktrees) > 1:
        problems.append(f"git worktrees left behind: {worktrees[1:]}")
    if problems:
        print("\nLEAK CHECK FAILED: " + "; ".join(problems))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif session.exitstatus == pytest.ExitCode.OK:
        shutil.rmtree(RUN_TMP, ignore_errors=True)
    else:
        print(f"\nthe run's temporary files are kept in {RUN_TMP}")
