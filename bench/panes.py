"""Benchmark: teammate panes through the tmux command line (what taskloom uses) or libtmux.

Both sides make and kill the same panes on a private tmux server, one after another, and
time it; libtmux's import is timed in a fresh interpreter. libtmux is not a dependency of
taskloom: install it in the environment first to measure it (``pip install libtmux``), else
only the command line is measured.

Prints ``cli_pane_ms_median``, ``libtmux_pane_ms_median`` (create and kill one pane),
``libtmux_import_ms_median`` and ``python_floor_ms_median`` (``python -c pass``), all from
the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from taskloom.teams.panes import TmuxPanes

WAIT = [sys.executable, "-c", "input()"]


def _interpreter_ms(code: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def _cli(tmux: str, socket: str, lead: str, runs: int, cwd: str) -> list[float]:
    panes = TmuxPanes(tmux, socket=socket, lead_pane=lead)
    times = []
    for n in range(runs):
        started = time.perf_counter()
        pane = await panes.create(
            team="bench", session_id="bench", title=f"p{n}", argv=WAIT, cwd=cwd, env={}
        )
        await panes.kill(pane.id)
        times.append((time.perf_counter() - started) * 1000)
    return times


def _libtmux(socket: str, lead: str, runs: int, cwd: str) -> list[float]:
    import libtmux

    server = libtmux.Server(socket_path=socket)
    window = server.panes.get(pane_id=lead).window
    times = []
    for n in range(runs):
        started = time.perf_counter()
        pane = window.split(
            shell=f"{sys.executable} -c 'input()'", start_directory=cwd, attach=False
        )
        pane.cmd("set-option", "-p", "remain-on-exit", "on")
        pane.cmd("select-pane", "-T", f"p{n}")
        window.select_layout("main-vertical")
        pane.kill()
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    tmux = shutil.which("tmux")
    if tmux is None:
        print("tmux is not installed")
        return 1
    with tempfile.TemporaryDirectory() as scratch:
        socket = str(Path(scratch) / "bench.sock")
        base = [tmux, "-S", socket, "-f", "/dev/null"]
        subprocess.run([*base, "new-session", "-d", "-x", "200", "-y", "50", *WAIT], check=True)
        try:
            lead = subprocess.run(
                [*base, "display-message", "-p", "#{pane_id}"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            cli = asyncio.run(_cli(tmux, socket, lead, args.runs, scratch))
            print(f"python_floor_ms_median: {_interpreter_ms('pass', 5):.1f}")
            print(f"cli_pane_ms_median: {statistics.median(cli):.1f}")
            if importlib.util.find_spec("libtmux") is None:
                print("libtmux: not installed (pip install libtmux to measure it)")
                return 0
            lib = _libtmux(socket, lead, args.runs, scratch)
            print(f"libtmux_pane_ms_median: {statistics.median(lib):.1f}")
            print(f"libtmux_import_ms_median: {_interpreter_ms('import libtmux', 5):.1f}")
        finally:
            subprocess.run([*base, "kill-server"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
