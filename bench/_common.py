"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import resource
import shutil
import subprocess
import tempfile
import time


@functools.cache
def scratch_config_dir() -> str:
    """A Claude configuration directory of this run's own, removed when the run ends.

    Given to every measured child as ``CLAUDE_CONFIG_DIR``: their transcripts go there, not
    into the user's ``~/.claude/projects``, and no setting of the user's changes a figure.
    """
    path = tempfile.mkdtemp(prefix="taskloom-bench-config-")
    atexit.register(shutil.rmtree, path, True)
    return path


def child_env(pycache: str | None, **extra: str) -> dict[str, str]:
    """Our environment for a measured child: no model provider's settings, plus ``extra``.

    With ``pycache``, bytecode is cached there (``PYTHONPYCACHEPREFIX``), as an installed
    taskloom has its .pyc files: without them every run would pay for compiling the package.
    ``CLAUDE_CONFIG_DIR`` is :func:`scratch_config_dir` unless ``extra`` names another.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env["CLAUDE_CONFIG_DIR"] = scratch_config_dir()
    env.update(extra)
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def add_bytecode_flag(parser: argparse.ArgumentParser) -> None:
    """``--no-bytecode-cache``: measure without the private bytecode cache of :func:`child_env`."""
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="Leave PYTHONDONTWRITEBYTECODE/PYTHONPYCACHEPREFIX as the environment has them.",
    )


def child_max_rss_mib(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """Run ``cmd`` in a fresh process; return (wall seconds, its peak RSS in MiB)."""
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: fork a dedicated helper
    # per measurement so earlier children do not mask it.
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(read_fd)
        start = time.monotonic()
        subprocess.run(
            cmd,
            env=env,
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
        wall = time.monotonic() - start
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        os.write(write_fd, f"{wall} {rss}".encode())
        os._exit(0)
    os.close(write_fd)
    wall_s, rss_s = child_report(read_fd, pid)
    return float(wall_s), float(rss_s)


def child_report(read_fd: int, pid: int) -> list[str]:
    """The words a forked measuring helper wrote to ``read_fd`` before exiting; reaps it."""
    data = b""
    while chunk := os.read(read_fd, 1024):
        data += chunk
    os.close(read_fd)
    os.waitpid(pid, 0)
    return data.decode().split()
