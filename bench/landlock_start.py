"""Start-up cost of a Landlock-sandboxed shell: three ways to apply the ruleset, one baseline.

Each way starts ``bash -c true`` and reaps it, interleaved round by round so that load from
other processes falls on all alike; the figures are medians and ratios to the baseline (an
unsandboxed start) measured in the same run:

- ``thread``: a fresh thread restricts itself, then forks (:mod:`taskloom.process.landlock`);
- ``preexec``: ``preexec_fn`` restricts the forked child before ``exec``;
- ``launcher``: ``python -I -S -c`` restricts itself, then ``exec``\\ s the shell.

Then the cost as the Bash tool pays it: ``true`` run as a shell task
(:func:`taskloom.tasks.shell.run_shell`, tracking its directory as Bash does) by a read-only
agent (``sandboxed``) and by the main thread, interleaved, ``--tasks`` of each.

Run: ``python bench/landlock_start.py [--rounds 200] [--tasks 20]``. Needs a kernel with
Landlock.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from taskloom.process import landlock
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import run_shell

#: The least a launcher can be: ctypes, two calls, exec (no taskloom import).
_LAUNCHER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(38, 1, 0, 0, 0) or libc.syscall(446, int(sys.argv[1]), 0):
    sys.exit(f"landlock: {os.strerror(ctypes.get_errno())}")
os.execv(sys.argv[2], sys.argv[2:])
"""


def main() -> None:
    """Measure and print the medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=20)
    args = parser.parse_args()
    if landlock.abi_version() == 0:
        sys.exit("this kernel has no Landlock")
    bash = shutil.which("bash") or "/bin/sh"
    argv = [bash, "-c", "true"]
    scratch = Path(tempfile.mkdtemp(prefix="landlock-bench-"))
    sandbox = landlock.Sandbox(directories=(scratch,))

    def plain() -> None:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL).wait()

    def thread() -> None:
        landlock.spawn_sandboxed(
            sandbox, lambda: subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        ).wait()

    def preexec() -> None:
        ruleset = landlock.build_ruleset(sandbox)
        try:
            subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                preexec_fn=lambda: landlock.restrict_thread(ruleset),
            ).wait()
        finally:
            os.close(ruleset)

    def launcher() -> None:
        ruleset = landlock.build_ruleset(sandbox)
        try:
            cmd = [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(ruleset), *argv]
            subprocess.Popen(cmd, stdin=subprocess.DEVNULL, pass_fds=(ruleset,)).wait()
        finally:
            os.close(ruleset)

    ways: dict[str, Callable[[], None]] = {
        "baseline": plain,
        "thread": thread,
        "preexec": preexec,
        "launcher": launcher,
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, way in ways.items():
            began = time.perf_counter()
            way()
            times[name].append(time.perf_counter() - began)
    shutil.rmtree(scratch)
    print(f"start and reap `bash -c true`, {args.rounds} rounds:")
    _report(times)
    print(f"`true` as a shell task (the Bash tool's path), {args.tasks} of each:")
    _report(asyncio.run(_tasks(args.tasks)))


async def _tasks(count: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"main thread": [], "read-only": []}
    with tempfile.TemporaryDirectory() as home:
        os.environ["TASKLOOM_HOME"] = home
        async with TaskRuntime() as rt:
            for _ in range(count):
                for name, sandboxed in (("main thread", False), ("read-only", True)):
                    began = time.perf_counter()
                    await run_shell(
                        rt, "true", owner="agent-1", track_cwd=True, sandboxed=sandboxed
                    )
                    times[name].append(time.perf_counter() - began)
    return times


def _report(times: dict[str, list[float]]) -> None:
    """Each way's median, its ratio to the first way's and the difference."""
    base = statistics.median(next(iter(times.values())))
    for name, samples in times.items():
        median = statistics.median(samples)
        print(
            f"  {name:11} median {median * 1000:7.2f} ms  x{median / base:5.2f}  "
            f"(+{(median - base) * 1000:6.2f} ms)"
        )


if __name__ == "__main__":
    main()
