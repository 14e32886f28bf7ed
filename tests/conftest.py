"""Test-wide guards: every test runs in its own TASKLOOM_HOME and must leave nothing behind.

Each check runs after every test, so that what is left is blamed on the test that left it, and
again at the end of the run (of each pytest-xdist worker, and of the whole run):

- Processes: every child we start inherits ``TASKLOOM_TEST_RUN`` (per worker under xdist: see
  ``helpers.RUN_MARK``); after a test no process carrying it may be alive (zombies excepted).
  One still alive gets the TERM grace to end (it may be inside its own TERM cleanup); what is
  still alive then is killed and the test fails.
- Temp dirs: the run (each worker) has a temporary directory of its own (``TMPDIR`` for us and
  every child); a test may leave nothing in it but pytest's base of tmp_path. Other
  programs' files in the system temp directory, or another run's or worker's, are not ours.
- Worktrees: a test may add no git worktree to the repository the tests run in.
- tmux: no tmux server started on a socket in the run's temporary directories (see
  ``tmux_driver``) may be running after the test that started it, nor its socket be left; other
  users', runs' or workers' servers are not ours.
- End-to-end: a test that starts taskloom, tmux, Ray or an SDK's program as a process must be
  marked ``e2e`` (``pytest -m "not e2e"`` is the fast inner loop); each process the test
  process starts is seen through Python's audit hook.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest

import tmux_driver
from helpers import RUN_MARK, TIME_FACTOR, e2e_program, run_processes
from taskloom.process.kill import DEFAULT_GRACE_S
from taskloom.settings import db_path
from taskloom.store import Store

if TYPE_CHECKING:
    from taskloom.tools.base import ToolContext

#: The pytest-xdist worker this process is ("gw0", ...), or None: not a worker.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
# A worker inherits the run's mark from the process that started it and makes it its own.
_RUN = os.environ.get(RUN_MARK) or uuid.uuid4().hex
os.environ[RUN_MARK] = f"{_RUN}-{WORKER}" if WORKER else _RUN
# The system's temporary directory, before a run (or the run that started this worker) set
# TMPDIR to its own: each worker's directory sits beside the run's, not inside it, so that
# paths stay as short as they were (Ray's and tmux's socket paths must fit in 107 bytes).
_TMP_ROOT = os.environ.setdefault("TASKLOOM_TEST_TMP_ROOT", tempfile.gettempdir())
RUN_TMP = tempfile.mkdtemp(prefix="taskloom-tests-", dir=_TMP_ROOT)
os.environ["TMPDIR"] = RUN_TMP
tempfile.tempdir = RUN_TMP

#: How long a process left running after its test gets to end by itself: the TERM grace of
#: taskloom's verified kill, plus a second for the interpreter's own exit.
LEAK_GRACE_S = (DEFAULT_GRACE_S + 1.0) * TIME_FACTOR

#: pytest's base temporary directory (of tmp_path), in RUN_TMP: one per process, so that a
#: test's paths are as short under xdist as without it (a tmux pane shows them whole, Ray's
#: socket paths must fit), and shorter than pytest's own ``pytest-of-USER/pytest-N``.
_BASETEMP = "tmp"
_OWN_BASETEMP_ENV = "TASKLOOM_TEST_OWN_BASETEMP"

#: Under PYTHONDONTWRITEBYTECODE, the bytecode cache of the run's Python processes (see
#: ``_use_bytecode_cache``), and the variable that hands its path on to workers: in the virtual
#: environment the tests run in, or else the run's own in RUN_TMP (``_PYCACHE``, made by the
#: process that started the run).
_PYCACHE = "pycache"
_PYCACHE_ENV = "TASKLOOM_TEST_PYCACHE"
_VENV_PYCACHE = os.path.join(sys.prefix, "taskloom-tests-pycache")
_IN_VENV = sys.prefix != sys.base_prefix and os.access(sys.prefix, os.W_OK)
if _PYCACHE_ENV not in os.environ:
    os.environ[_PYCACHE_ENV] = _VENV_PYCACHE if _IN_VENV else os.path.join(RUN_TMP, _PYCACHE)
    os.makedirs(os.environ[_PYCACHE_ENV], exist_ok=True)

#: The command lines of the processes this process started since the current test began.
_started: list[Any] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Called for every audited event in this process: the comparison is all most of them cost.
    if event == "subprocess.Popen":
        _started.append(args[1])


sys.addaudithook(_audit)


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    # Mark coroutine tests for anyio before their items (and parametrizations) are made.
    if name.startswith("test") and inspect.iscoroutinefunction(obj):
        pytest.mark.anyio(obj)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before any fixture of the test: what its fixtures start counts as its own.
    _started.clear()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _git_common_dir() -> Path | None:
    """The git directory of the repository the tests run in (None outside git)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=Path(__file__).parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


_GIT_DIR = _git_common_dir()


def _project_worktrees() -> set[str]:
    """The linked worktrees of the repository the tests run in (their admin directories)."""
    if _GIT_DIR is None:
        return set()
    try:
        return set(os.listdir(_GIT_DIR / "worktrees"))
    except FileNotFoundError:
        return set()


def _temp_entries() -> set[str]:
    return {n for n in os.listdir(RUN_TMP) if n not in (_BASETEMP, _PYCACHE)}


def _process_leaks() -> list[str]:
    """This process's leftover children (and theirs), killed if the grace did not end them."""
    left = run_processes()
    if not left:
        return []
    # One may be inside its TERM cleanup (its parent or the test signalled it as the test
    # ended): killing it now would cut the cleanup short and blame what it had yet to remove.
    still = tmux_driver.wait_processes(left, LEAK_GRACE_S)
    if not still:
        return []
    desc = []
    for proc in still:
        with contextlib.suppress(psutil.Error):
            desc.append(f"{proc.pid} {' '.join(proc.cmdline())}")
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    tmux_driver.wait_processes(still, timeout=5)
    return [f"processes left running {LEAK_GRACE_S:g} s after the test: {desc}"]


def _tmux_leaks(roots: list[str], socket_dirs: list[str]) -> list[str]:
    """tmux servers on a socket under ``roots`` still running (killed here), and sockets under
    ``socket_dirs`` left."""
    found = []
    servers = [s for root in roots for s in tmux_driver.leftover_servers(root)]
    for proc in servers:
        with contextlib.suppress(psutil.Error):
            found.append(f"tmux server {proc.pid}: {' '.join(proc.cmdline())}")
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    tmux_driver.wait_processes(servers, timeout=5)
    for root in socket_dirs:
        found += [f"tmux socket {path}" for path in tmux_driver.leftover_sockets(root)]
    return found


def _e2e_starts(item: pytest.Item) -> list[str]:
    """What the test started that only an end-to-end test may, unless it is marked ``e2e``."""
    if item.get_closest_marker("e2e") is not None:
        return []
    programs = {}
    for argv in list(_started):
        what = e2e_program(argv)
        if what is not None:
            programs.setdefault(what, argv)
    return [
        f"the test starts {what} ({' '.join(map(os.fsdecode, argv))[:200]}) but is not marked"
        " e2e: add @pytest.mark.e2e"
        for what, argv in programs.items()
    ]


@pytest.fixture(autouse=True)
def home(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A private TASKLOOM_HOME per test; fails the test if it leaves anything behind (see the
    module docstring), or starts an end-to-end program without the ``e2e`` mark."""
    path = tmp_path / "home"
    monkeypatch.setenv("TASKLOOM_HOME", str(path))
    # Transcripts go where Claude Code keeps them: the test's own, never the user's ~/.claude.
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.delenv("TASKLOOM_TRANSCRIPTS", raising=False)
    temp_before = _temp_entries()
    worktrees_before = _project_worktrees()
    yield path
    problems = _process_leaks()  # a tmux server of the test's carries our mark too
    sockets = [
        *tmp_path.glob(tmux_driver.SOCKET_NAME),
        *tmp_path.glob(f"*/{tmux_driver.SOCKET_NAME}"),
    ]
    problems += [f"tmux socket {path}" for path in sockets if path.is_socket()]
    new_temp = sorted(_temp_entries() - temp_before)
    if new_temp:
        problems.append(f"temp entries left behind in {RUN_TMP}: {new_temp}")
        for name in new_temp:  # gone, so that the next test is not blamed for them
            target = os.path.join(RUN_TMP, name)
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(target)
    new_worktrees = sorted(_project_worktrees() - worktrees_before)
    if new_worktrees:
        problems.append(f"git worktrees added to the project: {new_worktrees}")
    problems += _e2e_starts(request.node)
    if problems:
        pytest.fail("; ".join(problems))


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


class _WorkerLeaks:
    """In the process running pytest-xdist workers: what each worker's end-of-run check found.

    A worker's own exit status does not reach the run's; its findings travel in its
    ``workeroutput`` instead, and fail the run here.
    """

    def __init__(self) -> None:
        self.problems: list[str] = []

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", None) or {}
        name = getattr(getattr(node, "gateway", None), "id", "a worker")
        self.problems += [f"{name}: {problem}" for problem in output.get(_LEAKS, [])]


_LEAKS = "taskloom_leaks"


def _runs_workers(config: pytest.Config) -> bool:
    """Whether this process runs pytest-xdist workers rather than tests."""
    return WORKER is None and getattr(config.option, "dist", "no") != "no"


def _use_bytecode_cache(config: pytest.Config) -> None:
    """Under PYTHONDONTWRITEBYTECODE, compiled modules go to a cache away from the sources.

    The tests start hundreds of Python processes of taskloom's (the CLI, the SDK's, sessions
    and servers of the tests'), and each test process (an xdist worker) imports taskloom and
    has pytest rewrite the asserts of every test module and of its plugins' (hypothesis's,
    anyio's): under PYTHONDONTWRITEBYTECODE each process would compile all of it anew, some
    ten seconds of every worker's collection. The user's wish is that nothing be written
    beside the sources, so it is honoured with a bytecode prefix (as bench/ does), where
    CPython and pytest keep what they compile. In a virtual environment the prefix is the
    environment's own (it already holds the bytecode of every package installed in it, and
    goes with it), kept from run to run and shared by the workers and every process they
    start. Elsewhere it is the run's, for the processes the tests start only: a process that
    runs xdist workers would hand it on to them, who would each compile all they import into
    an empty cache, slower than without one.
    """
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return  # Python writes bytecode where the user wants it
    cache = os.environ[_PYCACHE_ENV]
    persistent = cache == _VENV_PYCACHE
    if persistent or not _runs_workers(config):
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = cache
    if persistent:  # this process too, for what it imports from now on (the test modules)
        sys.dont_write_bytecode = False
        sys.pycache_prefix = cache


@pytest.hookimpl(tryfirst=True)  # before pytest's tmp_path plugin reads the base
def pytest_configure(config: pytest.Config) -> None:
    # pytest's base of tmp_path goes in RUN_TMP, unless the run was given one with --basetemp
    # (xdist gives each worker one: the run's, plus popen-gwN).
    if WORKER is None and config.option.basetemp is None:
        os.environ[_OWN_BASETEMP_ENV] = "1"
    if os.environ.get(_OWN_BASETEMP_ENV):
        config.option.basetemp = os.path.join(RUN_TMP, _BASETEMP)
    if WORKER is None and config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_WorkerLeaks(), "taskloom-worker-leaks")
    _use_bytecode_cache(config)
    # pytest-timeout's bound is an elapsed-time bound too: scaled, unless --timeout gave one
    # (this runs before pytest-timeout reads it).
    if getattr(config.option, "timeout", None) is None and config.getini("timeout"):
        config.option.timeout = float(config.getini("timeout")) * TIME_FACTOR


@pytest.hookimpl(wrapper=True)
def pytest_xdist_auto_num_workers() -> Iterator[int]:
    """``-n auto``: two workers a core, unless PYTEST_XDIST_AUTO_NUM_WORKERS says how many.

    Most of a test's time goes in waiting on the processes, servers and timers it starts: with
    a worker a core, the cores stayed about half busy (fast tier on 2 cores: 107 s of CPU in
    99 s; whole suite: 356 s of CPU in 303 s). Two a core overlap those waits: the fast tier
    took 85 s instead of 108 s, the whole suite 183-191 s instead of 303 s on the same machine,
    with every time bound held.
    """
    count = yield
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return count
    return 2 * count


@pytest.hookimpl(trylast=True)  # after xdist has stopped its workers: they carry our mark
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    problems = []
    new = _temp_entries()
    if new:
        problems.append(f"temp entries left behind in {RUN_TMP}: {sorted(new)}")
    # In the process that ran xdist workers, their processes are checked too (after their own
    # check: one that outlived its worker).
    left = run_processes(workers=WORKER is None)
    if left:
        problems.append(f"processes left behind: {[p.pid for p in left]}")
    tmux_left = _tmux_leaks([RUN_TMP], [RUN_TMP])
    if tmux_left:
        problems.append(f"tmux left behind: {tmux_left}")
    worktrees = _project_worktrees()
    if worktrees:
        problems.append(f"git worktrees left behind: {sorted(worktrees)}")
    workers = config.pluginmanager.get_plugin("taskloom-worker-leaks")
    if isinstance(workers, _WorkerLeaks):
        problems += workers.problems
    if WORKER is not None and hasattr(config, "workeroutput"):
        config.workeroutput[_LEAKS] = problems
    if problems:
        print("\nLEAK CHECK FAILED: " + "; ".join(problems))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shutil.rmtree(os.path.join(RUN_TMP, _PYCACHE), ignore_errors=True)
    if os.environ[_PYCACHE_ENV] == _VENV_PYCACHE:
        # What was compiled from the run's temporary files (a test's own modules), which no
        # later run will import: the kept cache would otherwise grow with every run.
        shutil.rmtree(os.path.join(_VENV_PYCACHE, RUN_TMP.lstrip(os.sep)), ignore_errors=True)
    if session.exitstatus == pytest.ExitCode.OK or not os.listdir(RUN_TMP):
        shutil.rmtree(RUN_TMP, ignore_errors=True)
    else:
        print(f"\nthe run's temporary files are kept in {RUN_TMP}")
