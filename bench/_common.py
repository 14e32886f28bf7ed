"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import os
import resource
import subprocess
import time


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
