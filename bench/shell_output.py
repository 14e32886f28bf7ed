"""Benchmark: throughput and memory of a background shell task writing a large output.

Writes ``--size-mib`` MiB (default 1024, i.e. 1 GiB) of zeros with the same generating command,
``dd if=/dev/zero bs=1M count=N status=none``, two ways in the same run:

* plain: ``sh -c 'CMD > FILE'`` started from this process (the baseline);
* taskloom: ``run_shell(rt, CMD, run_in_background=True)`` in a ``TaskRuntime``, then
  ``rt.wait(task_id)``; timed from just before ``run_shell`` to the terminal state. This side runs
  in a child Python process of its own so that its peak RSS (``ru_maxrss``) measures taskloom
  alone, not the baseline or this driver.

After ``--warmup`` untimed plain runs (default 1: the first large write of a run is often
several times slower), the two sides alternate ``--runs`` times (default 3); each output file is
checked for the exact size and deleted right after its run. Throughput is MiB / seconds; the best
run of each side is used for the targets (noise only ever slows a run down), the median is
printed as well.

Targets:

* ``throughput ratio`` taskloom / plain (best runs) >= 0.90;
* peak RSS of the taskloom process (max over its runs) <= 64 MiB.

The script is a report, not a test: it always exits 0 (unless it cannot run at all).
Quick smoke run: ``.venv/bin/python bench/shell_output.py --size-mib 16 --runs 1``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 1024 * 1024
RATIO_TARGET = 0.90
RSS_TARGET_MIB = 64.0


def generator(size_mib: int) -> str:
    """The generating command, identical for both sides (status=none: nothing on stderr)."""
    return f"dd if=/dev/zero bs=1M count={size_mib} status=none"


# -- taskloom side (runs in a child process) ----------------------------------------------------


async def _taskloom_once(size_mib: int, timeout: float) -> dict[str, float | int | str]:
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tasks.shell import run_shell

    expected = size_mib * MIB
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with TaskRuntime() as rt:
        # The default cap (5 GiB) must not cut the output short.
        if rt.output_cap < expected:
            raise SystemExit(f"output cap {rt.output_cap} < {expected} bytes")
        start = time.perf_counter()
        outcome = await run_shell(rt, generator(size_mib), run_in_background=True)
        state = await rt.wait(outcome.task_id, timeout=timeout)
        elapsed = time.perf_counter() - start
        path = Path(outcome.output_file)
        size = path.stat().st_size
        path.unlink()
        status = state.status.value
        exit_code = getattr(state, "exit_code", None)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {
        "elapsed": elapsed,
        "size": size,
        "status": status,
        "exit_code": -999 if exit_code is None else exit_code,
        "rss_before_kib": rss_before,
        "rss_peak_kib": rss_after,
    }


def child_main(size_mib: int, timeout: float) -> None:
    """Entry point of the child process: one taskloom run, result as JSON on stdout."""
    result = asyncio.run(_taskloom_once(size_mib, timeout))
    print(json.dumps(result))


def run_taskloom(size_mib: int, timeout: float, env: dict[str, str]) -> dict[str, float]:
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "--size-mib",
            str(size_mib),
            "--timeout",
            str(timeout),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"taskloom child failed ({proc.returncode}): {proc.stderr.strip()}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# -- plain side ---------------------------------------------------------------------------------


def run_plain(size_mib: int, out: Path, timeout: float) -> tuple[float, int, int]:
    start = time.perf_counter()
    proc = subprocess.run(
        ["sh", "-c", f"{generator(size_mib)} > {out}"], timeout=timeout, check=False
    )
    elapsed = time.perf_counter() - start
    size = out.stat().st_size if out.exists() else -1
    out.unlink(missing_ok=True)
    return elapsed, size, proc.returncode


# -- driver -------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="MiB to write (1024)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each side (3)")
    parser.add_argument("--timeout", type=float, default=600.0, help="per-run limit, s (600)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed plain runs first (1)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.size_mib, args.timeout)
        return 0

    expected = args.size_mib * MIB
    home = tempfile.mkdtemp(prefix="taskloom-bench-")
    os.environ["TASKLOOM_HOME"] = home
    env = dict(os.environ)
    plain_times: list[float] = []
    tl_times: list[float] = []
    rss_peaks: list[float] = []
    rss_floor: list[float] = []
    errors: list[str] = []
    try:
        for i in range(args.warmup):  # the first big write on a fresh file system is slow
            run_plain(args.size_mib, Path(home) / f"warmup-{i}.out", args.timeout)
        for i in range(args.runs):
            out = Path(home) / f"plain-{i}.out"
            elapsed, size, code = run_plain(args.size_mib, out, args.timeout)
            if code != 0 or size != expected:
                errors.append(f"plain run {i}: exit {code}, {size} bytes (expected {expected})")
            else:
                plain_times.append(elapsed)
            res = run_taskloom(args.size_mib, args.timeout, env)
            if res["status"] != "completed" or res["exit_code"] != 0 or res["size"] != expected:
                errors.append(f"taskloom run {i}: {res}")
            else:
                tl_times.append(res["elapsed"])
            rss_peaks.append(res["rss_peak_kib"] / 1024)
            rss_floor.append(res["rss_before_kib"] / 1024)
    finally:
        shutil.rmtree(home, ignore_errors=True)

    print(f"command: {generator(args.size_mib)}")
    print(f"size_mib: {args.size_mib}")
    print(f"warmup_runs: {args.warmup}")
    print(f"runs_per_side: {args.runs} (alternating; targets use the best run)")
    for err in errors:
        print(f"error: {err}")
    if not plain_times or not tl_times:
        print("FAIL: no valid run on one side")
        return 0

    def mibs(seconds: float) -> float:
        return args.size_mib / seconds

    plain_best, tl_best = mibs(min(plain_times)), mibs(min(tl_times))
    plain_med = mibs(statistics.median(plain_times))
    tl_med = mibs(statistics.median(tl_times))
    ratio = tl_best / plain_best
    peak = max(rss_peaks)
    print("plain_runs_s: " + ", ".join(f"{t:.3f}" for t in plain_times))
    print("taskloom_runs_s: " + ", ".join(f"{t:.3f}" for t in tl_times))
    print(f"plain_throughput_best_mib_s: {plain_best:.1f}")
    print(f"plain_throughput_median_mib_s: {plain_med:.1f}")
    print(f"taskloom_throughput_best_mib_s: {tl_best:.1f}")
    print(f"taskloom_throughput_median_mib_s: {tl_med:.1f}")
    print(f"throughput_ratio_best: {ratio:.3f}")
    print(f"throughput_ratio_median: {tl_med / plain_med:.3f}")
    print(f"taskloom_rss_after_import_mib: {max(rss_floor):.1f}")
    print(f"taskloom_peak_rss_mib: {peak:.1f}")
    verdict = "PASS" if ratio >= RATIO_TARGET and not errors else "FAIL"
    print(f"{verdict}: throughput ratio {ratio:.3f} (target >= {RATIO_TARGET:.2f})")
    verdict = "PASS" if peak <= RSS_TARGET_MIB else "FAIL"
    print(f"{verdict}: peak RSS {peak:.1f} MiB (target <= {RSS_TARGET_MIB:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
