"""Small helpers shared by tests."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

#: Every process a test run starts inherits this variable, set to the run's own id by the
#: conftest; tests find their processes by it, never by looking at the whole machine. Under
#: pytest-xdist each worker has a mark of its own (the run's id, ``-``, the worker's id), so that
#: workers never take each other's processes for their own.
RUN_MARK = "TASKLOOM_TEST_RUN"

#: Elapsed-time bounds in tests are multiplied by this: a slow or loaded machine sets
#: ``TASKLOOM_TEST_TIME_FACTOR`` above 1.
TIME_FACTOR = float(os.environ.get("TASKLOOM_TEST_TIME_FACTOR") or 1)


class LazyModule:
    """A module imported when a test first uses it, that test skipped if it is not installed.

    For the SDK and Ray: importing them costs a second on each worker's collection, also
    when ``-m "not e2e"`` then deselects every test that uses them.
    """

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_"):  # pytest's collection asks (``__test__``, ...): not a use
            raise AttributeError(attr)
        return getattr(pytest.importorskip(self._name), attr)


def needs(name: str) -> pytest.MarkDecorator:
    """Skip a module's tests when ``name`` is not installed, found without importing it."""
    return pytest.mark.skipif(
        importlib.util.find_spec(name) is None, reason=f"{name} is not installed"
    )


def run_processes(
    where: Callable[[psutil.Process], bool] | None = None, *, workers: bool = False
) -> list[psutil.Process]:
    """Live processes (not zombies) of this test process, other than us, where ``where`` holds.

    ``where`` sees processes with ``info`` filled for ``environ``, ``status`` and ``cmdline``.
    ``workers``: those of the pytest-xdist workers this process started count too (the end of
    a whole run, in the process that ran the workers).
    """
    mark = os.environ.get(RUN_MARK)
    if mark is None:
        return []
    found = []
    for pid in pids_with_env(RUN_MARK, mark, or_prefixed=workers):
        try:
            proc = psutil.Process(pid)
            proc.info = proc.as_dict(["pid", "environ", "status", "cmdline"])
        except psutil.Error:
            continue
        if proc.info.get("status") != psutil.STATUS_ZOMBIE and (where is None or where(proc)):
            found.append(proc)
    return found


def pids_with_env(name: str, value: str, *, or_prefixed: bool = False) -> list[int]:
    """Processes other than us whose environment says ``name=value`` (or ``name=value-...``,
    with ``or_prefixed``), zombies included.

    /proc's raw environments are read (the conftest asks after every test): psutil parses every
    process's on the machine, at tens of milliseconds a call, and misreads those of processes
    that set their title over it, as Ray's agents do.
    """
    me = os.getpid()
    if not os.path.isdir("/proc/self"):  # not Linux: psutil reads what the system has
        found = []
        for proc in psutil.process_iter(["environ"]):
            theirs = (proc.info.get("environ") or {}).get(name) or ""
            if proc.pid != me and (
                theirs == value or (or_prefixed and theirs.startswith(value + "-"))
            ):
                found.append(proc.pid)
        return found
    needle = f"\0{name}={value}".encode()
    ends = (b"\0", b"-") if or_prefixed else (b"\0",)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as file:
                environ = b"\0" + file.read() + b"\0"
        except OSError:  # gone, or another user's
            continue
        at = environ.find(needle)
        if at >= 0 and environ[at + len(needle) : at + len(needle) + 1] in ends:
            found.append(int(entry))
    return found


#: Programs whose start makes a test end-to-end (``pytest.mark.e2e``), by executable name.
_E2E_EXECUTABLES = {
    "taskloom": "taskloom",
    "tmux": "tmux",
    "ray": "Ray",
    "raylet": "Ray",
    "gcs_server": "Ray",
    "node": "an SDK's program (node)",
    "npm": "an SDK's program (npm)",
    "npx": "an SDK's program (npx)",
}


#: The repository's benchmarks: programs of taskloom's, run as a user would run them.
_BENCH = Path(__file__).resolve().parent.parent / "bench"


def e2e_program(argv: Any) -> str | None:
    """What end-to-end program the command line ``argv`` starts (taskloom, tmux, Ray, an SDK's
    node), or None; ``argv`` as ``subprocess.Popen`` hands it to the audit hook."""
    if isinstance(argv, str | bytes | os.PathLike):
        argv = [argv]
    words = [os.fsdecode(a) for a in argv or ()]
    if not words:
        return None
    if words[1:3] == ["-m", "taskloom"]:
        return "taskloom"
    if len(words) > 1 and Path(words[1]).parent == _BENCH:
        return f"a bench program ({Path(words[1]).name})"
    if "/ray/" in words[0] or any(
        w.endswith(("/ray/_private/workers/default_worker.py", "/ray/dashboard/agent.py"))
        for w in words[1:3]
    ):
        return "Ray"
    if os.path.dirname(words[0]).startswith(tempfile.gettempdir() + os.sep):
        return None  # a test's own stand-in (a script named tmux in its tmp_path), not the program
    return _E2E_EXECUTABLES.get(os.path.basename(words[0]))


#: The npm programs the tests drive taskloom with (``tests/npm/package.json``).
NPM_DIR = Path(__file__).resolve().parent / "npm"


def node_modules() -> Path:
    """``tests/npm/node_modules``, installed from its lock file on first use.

    ``npm ci`` runs (at most once at a time: xdist workers wait on a file lock) when the
    installed tree is missing or was installed from another lock file. ``--omit=optional``
    leaves out the SDK's bundled native CLI: the tests point the SDK at taskloom.
    """
    target = NPM_DIR / "node_modules"
    lock_file = NPM_DIR / "package-lock.json"
    stamp = target / ".taskloom-lock-sha256"
    want = hashlib.sha256(lock_file.read_bytes()).hexdigest()
    with open(NPM_DIR / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists() or stamp.read_text() != want:
            argv = ["npm", "ci", "--omit=optional", "--no-audit", "--no-fund", "--loglevel=error"]
            done = subprocess.run(
                argv, cwd=NPM_DIR, capture_output=True, text=True, timeout=600 * TIME_FACTOR
            )
            if done.returncode != 0:
                raise RuntimeError(f"npm ci in {NPM_DIR} failed: {done.stderr[-2000:]}")
            stamp.write_text(want)
    return target


async def wait_until(cond: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    """Wait (bounded) for a condition that has no event to wait on, e.g. file content.

    The bound is ``timeout`` seconds times :data:`TIME_FACTOR`.
    """
    timeout *= TIME_FACTOR
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or cond}")
        await asyncio.sleep(0.01)


def file_contains(path: str | Path, text: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return text in Path(path).read_text(errors="replace")
        except FileNotFoundError:
            return False

    return check


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def clean_env(**extra: str) -> dict[str, str]:
    """Our environment without any model provider's settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update(extra)
    return env


def run_python(
    code: str,
    *args: str,
    cwd: Path | str | None = None,
    env: dict[str, str] | None = None,
    input: bytes | str | None = None,
    text: bool = True,
    check: bool = False,
    timeout: float = 60,
) -> subprocess.CompletedProcess[Any]:
    """Run ``python -c code ARGS`` in a fresh interpreter of the suite's, output captured.

    The environment is :func:`clean_env` unless ``env`` is given; the wait is ``timeout``
    seconds scaled by ``TASKLOOM_TEST_TIME_FACTOR``. ``text=False`` for bytes in and out.
    """
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=clean_env() if env is None else env,
        input=input, text=text, capture_output=True, check=check, timeout=timeout * TIME_FACTOR,
    )  # fmt: skip


def harness(cwd: Path, model: Any, **options: Any) -> Any:
    """A ``taskloom.Harness`` on ``cwd`` and ``model`` allowing every call; ``options`` added."""
    import taskloom

    return taskloom.Harness(model=model, cwd=cwd, skip_permissions=True, **options)


def main_context(h: Any, cwd: Path | None = None) -> Any:
    """A ``ToolContext`` of the harness's main thread (the owner of the agents it spawns)."""
    from taskloom.tools.base import ToolContext

    return ToolContext(runtime=h.runtime, owner=h.session_id, cwd=cwd or h.cwd)


def scripted_argv(script: Path, *args: str) -> list[str]:
    """``taskloom -p go --output-format stream-json --model scripted:<script> ARGS``."""
    import sys

    return [
        sys.executable,
        "-m",
        "taskloom",
        "-p",
        "go",
        "--output-format",
        "stream-json",
        "--model",
        f"scripted:{script}",
        *args,
    ]


def write_turns(path: Path, turns: list[Any]) -> str:
    """Write a scripted-turn file and return the ``--model`` value that names it."""
    import yaml

    path.write_text(yaml.safe_dump({"turns": turns}))
    return f"scripted:{path}"


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60, stdin: str = ""
) -> Any:
    """``taskloom ARGS`` in ``cwd``, to its end; a ``subprocess.CompletedProcess[str]``."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "taskloom", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        input=stdin,
        env=env if env is not None else clean_env(),
    )


def json_lines(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of a stream-json output, one a line."""
    import json

    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


#: What the model gets for a tool result too long to show inline (taskloom.tools.overflow).
PERSISTED = re.compile(
    r"<persisted-output>\nOutput too large \((?P<size>[^)]+)\)\. Full output saved to: "
    r"(?P<path>\S+)\n\nPreview \(first 2KB\):\n(?P<preview>.*?)(?P<more>\n\.\.\.)?\n"
    r"Read the rest with Read \(offset and limit\) or search it with Grep on that file\.\n"
    r"</persisted-output>",
    re.S,
)
