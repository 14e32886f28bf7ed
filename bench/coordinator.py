"""Benchmark: the coordinator acceptance scenario through ``taskloom -p --coordinator``.

A local fake Anthropic server (tests/fake_servers.py, the real SSE wire format) plays the
model with ``CoordinatorScript`` (tests/coordinator_scenario.py): the coordinator starts a
fast worker and a slow one (a foreground ``sleep 30``), continues the fast one with
SendMessage, stops the slow one with TaskStop and answers once its ``killed`` notification
arrives. Here the fast worker's first answer is made to stream for ``--fast-step`` seconds
(0.3 by default): that is the slowest scripted step, since the slow worker's sleep is stopped,
never waited for. Everything else the run spends is taskloom's: start-up, requests, spawning,
the resume, the stop and its verification, exit.

Measured per run: the wall time of the whole ``taskloom -p`` process, its peak RSS and the
model requests the run made; ``overhead = wall - slowest scripted step``. Measured in the
same run, against the same server: a one-request ``taskloom -p hi --output-format
stream-json --verbose`` (its wall time and RSS), what any run costs before coordination.
The first run of each command only warms caches and is left out.

Targets: overhead <= 0.5 s, peak RSS <= 60 MiB.
Quick run: ``.venv/bin/python bench/coordinator.py --runs 3``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import add_bytecode_flag, child_env, child_max_rss_mib

from coordinator_scenario import (
    FAST_RESULT,
    FINAL,
    SLOW_COMMAND,
    CoordinatorScript,
    coordinator_argv,
)
from fake_servers import FakeAnthropicServer, Turn

T = TypeVar("T")
A = TypeVar("A")

OVERHEAD_TARGET_S = 0.5
RSS_TARGET_MIB = 60.0
#: Carried by this bench's children (and their commands): what it left running is told apart
#: from the same command of another program on the machine (another test's ``sleep 30``).
RUN_MARK = f"coordinator-bench-{os.getpid()}-{os.urandom(4).hex()}"


@dataclass
class TimedScript(CoordinatorScript):
    """The acceptance scenario, with the fast worker's first answer taking ``fast_step`` s."""

    server: FakeAnthropicServer | None = None
    fast_step: float = 0.3
    #: Whether the coordinator gave its final answer (the run went through every step).
    finished: bool = False

    def __call__(self, body: dict[str, Any]) -> Turn | Awaitable[Turn]:
        """The scenario's answer to ``body``, the fast worker's first one slowed down."""
        turn = super().__call__(body)
        if not isinstance(turn, Turn):
            return turn  # the stop, once the slow command runs
        if turn.text == FINAL:
            self.finished = True
        if turn.text == FAST_RESULT and self.server is not None:
            # Turn.delay is slept between streamed events: spread the step over the gaps of
            # exactly the events this answer streams, so that the whole answer takes it.
            gaps = len(self.server._stream(turn, body, 0)) - 1
            turn = dataclasses.replace(turn, delay=self.fast_step / gaps)
        return turn


def _env(server: FakeAnthropicServer, home: str, pycache: str | None) -> dict[str, str]:
    return child_env(
        pycache,
        ANTHROPIC_BASE_URL=server.url,
        ANTHROPIC_API_KEY="bench",
        TASKLOOM_HOME=home,
        TASKLOOM_BENCH_RUN=RUN_MARK,
    )


def _exe() -> str:
    return str(Path(sys.executable).with_name("taskloom"))


def coordinator_run(
    server: FakeAnthropicServer, fast_step: float, env: dict[str, str], workdir: str
) -> tuple[float, float, int, bool]:
    """One scenario run: (wall s, peak RSS MiB, model requests, whether it finished)."""
    script = TimedScript(server=server, fast_step=fast_step)
    server.responder = script
    before = len(server.requests)
    wall, rss = child_max_rss_mib([_exe(), *coordinator_argv()], env, workdir)
    return wall, rss, len(server.requests) - before, script.finished


def baseline_run(
    server: FakeAnthropicServer, env: dict[str, str], workdir: str
) -> tuple[float, float]:
    """One plain one-request run: (wall s, peak RSS MiB)."""
    server.responder = lambda body: Turn(text="Hello.")
    argv = [_exe(), "-p", "hi", "--output-format", "stream-json", "--verbose"]
    return child_max_rss_mib([*argv, "--model", "claude-sonnet-4-5"], env, workdir)


def interleaved(
    scenario: Callable[[FakeAnthropicServer, dict[str, str], str], T],
    runs: int,
    *,
    bytecode_cache: bool = True,
    after: Callable[[dict[str, str]], A] | None = None,
) -> tuple[list[T], list[tuple[float, float]], A | None]:
    """Warm up, then run ``scenario`` and the one-request baseline in turns, ``runs`` times.

    Both see the same machine load that way. Each bench passes its own scenario; ``after``
    looks at the state the runs left (their ``TASKLOOM_HOME``) before it is removed.

    Returns:
        The scenario's results, the baseline's (wall, peak RSS), and what ``after`` found.
    """
    scratch = tempfile.mkdtemp(prefix="taskloom-bench-")
    home, workdir = os.path.join(scratch, "home"), os.path.join(scratch, "cwd")
    os.makedirs(workdir)
    pycache = os.path.join(scratch, "pycache") if bytecode_cache else None
    try:
        with FakeAnthropicServer() as server:
            env = _env(server, home, pycache)
            baseline_run(server, env, workdir)  # warm-up: caches, bytecode
            scenario(server, env, workdir)
            results, plain = [], []
            for _ in range(runs):
                plain.append(baseline_run(server, env, workdir))
                results.append(scenario(server, env, workdir))
        found = after(env) if after is not None else None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return results, plain, found


def _left_running() -> int:
    """Processes of the slow worker's command still alive (each run must stop its own).

    Only this bench's: they carry its mark, so that the same command of another program
    (another test under pytest-xdist) is not counted.
    """
    found = 0
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["cmdline"] != SLOW_COMMAND.split() or proc.info["status"] == "zombie":
            continue
        try:
            found += proc.environ().get("TASKLOOM_BENCH_RUN") == RUN_MARK
        except psutil.Error:  # gone meanwhile, or another user's
            continue
    return found


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main() -> int:
    """Run the bench and print its figures; 1 when a run did not go through the scenario."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="Measured runs of each command.")
    parser.add_argument(
        "--fast-step", type=float, default=0.3, help="Seconds the fast worker's answer takes."
    )
    add_bytecode_flag(parser)
    args = parser.parse_args()
    runs, plain, _ = interleaved(
        lambda server, env, workdir: coordinator_run(server, args.fast_step, env, workdir),
        args.runs,
        bytecode_cache=not args.no_bytecode_cache,
    )
    walls = [r[0] for r in runs]
    wall, rss = statistics.median(walls), max(r[1] for r in runs)
    overhead = wall - args.fast_step
    base_wall = statistics.median(p[0] for p in plain)
    base_rss = max(p[1] for p in plain)
    left = _left_running()
    print(f"coordinator scenario: {args.runs} runs")
    print(f"  wall_s_median: {wall:.3f}")
    print(f"  wall_s_min: {min(walls):.3f}")
    print(f"  wall_s_runs: {', '.join(f'{w:.3f}' for w in walls)}")
    print(f"  peak_rss_mib_max: {rss:.1f}")
    print(f"  model_requests_per_run: {', '.join(str(r[2]) for r in runs)}")
    print(f"  slowest_scripted_step_s: {args.fast_step:.3f} (the fast worker's first answer)")
    print(f"  overhead_s_median: {overhead:.3f} (wall - slowest scripted step)")
    print(f"  finished_runs: {sum(r[3] for r in runs)}/{args.runs}")
    print(f"  left_running: {left} ({SLOW_COMMAND!r} processes after the runs)")
    print("baseline: taskloom -p hi --output-format stream-json --verbose (one request)")
    print(f"  wall_s_median: {base_wall:.3f}")
    print(f"  wall_s_min: {min(p[0] for p in plain):.3f}")
    print(f"  peak_rss_mib_max: {base_rss:.1f}")
    print(
        f"coordination adds: {overhead - base_wall:+.3f} s of overhead over the baseline's wall, "
        f"{rss - base_rss:+.1f} MiB of peak RSS"
    )
    print(
        f"{_verdict(overhead <= OVERHEAD_TARGET_S)}: overhead {overhead:.3f} s "
        f"(target <= {OVERHEAD_TARGET_S} s)"
    )
    print(
        f"{_verdict(rss <= RSS_TARGET_MIB)}: peak RSS {rss:.1f} MiB "
        f"(target <= {RSS_TARGET_MIB:.0f} MiB)"
    )
    return 0 if all(r[3] for r in runs) and left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
