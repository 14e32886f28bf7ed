"""Benchmark: task churn through the TaskRuntime (register, complete, notify, drain, ack).

No processes are involved. Inside ``async with TaskRuntime() as rt`` a producer coroutine, for
each of ``--tasks`` tasks (default 10,000):

* ``rt.register(ShellTaskState(..., status=RUNNING, is_backgrounded=True))``;
* ``rt.update(id, lambda s: s.replace(status=COMPLETED, exit_code=0))`` - the runtime enqueues
  the notification on this terminal transition;

and yields to the loop (``await asyncio.sleep(0)``) after every ``--burst`` tasks (default 10;
``--burst 1`` models completions that each arrive in their own loop callback, which gives the
store no chance to group-commit). A consumer coroutine awaits
``rt.notifications.wait_pending()``, then ``rt.drain()`` and ``rt.ack()`` on the batch.

Figures:

* ``tasks_per_s``: tasks / wall time from the first ``register`` until the consumer has acked
  the last notification and the store is flushed (so every write, acks included, is committed);
* latency, per task: from just before its ``update`` call to the return of the ``rt.drain()``
  that hands its notification out. ``drain()`` flushes the store first and the store otherwise
  group-commits once per loop iteration, so the SQLite commit of the task's writes always lies
  inside this interval. Under churn it also includes waiting for the rest of the producer's
  burst (the consumer runs only when the producer yields). Measured under churn (the target)
  and, separately, for ``--isolated`` tasks completed one at a time on an otherwise idle loop
  (update, then ``sleep(0)`` until a drain returns it).

The baseline, measured in the same run (``--rounds`` rounds, each runs both, alternately):
raw SQLite and asyncio doing the same commits (bench/_raw_churn.py: the same rows and
statements per task, group-committed as the store does, the same producer and consumer). Its
``tasks_per_s`` is what the machine allows at all; taskloom's is judged by its ratio to it.

Targets: ``tasks_per_s`` at least 0.5 times the raw baseline's (the median over the rounds of
each round's ratio: its two runs ran back to back, under the same load);
churn latency p99 <= 5 ms.

The script is a report, not a test: it always exits 0 (unless it cannot run at all).
Quick smoke run: ``.venv/bin/python bench/task_churn.py --tasks 500 --isolated 100``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _raw_churn import raw_churn

#: taskloom's tasks/s over the raw baseline's, at least.
RATIO_TARGET = 0.5
P99_TARGET_MS = 5.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


async def churn(n_tasks: int, burst: int, n_isolated: int) -> dict[str, object]:
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tasks.types import ShellTaskState, TaskStatus, TaskType

    def complete(s: ShellTaskState) -> ShellTaskState:
        return s.replace(status=TaskStatus.COMPLETED, exit_code=0)  # type: ignore[return-value]

    def new_task(rt: TaskRuntime, i: int) -> str:
        task_id = rt.new_id(TaskType.LOCAL_BASH)
        rt.register(
            ShellTaskState(
                id=task_id,
                owner=rt.session_id,
                description=f"bench task {i}",
                status=TaskStatus.RUNNING,
                is_backgrounded=True,
            )
        )
        return task_id

    async with TaskRuntime() as rt:
        t_update: dict[str, float] = {}
        latencies: list[float] = []
        batches: list[int] = []
        received: set[str] = set()
        duplicates = 0

        async def consumer() -> None:
            nonlocal duplicates
            while len(received) < n_tasks:
                await rt.notifications.wait_pending(timeout=60)
                batch = rt.drain()
                t1 = time.perf_counter()
                for note in batch:
                    latencies.append(t1 - t_update[note.task_id])
                    if note.task_id in received:
                        duplicates += 1
                    received.add(note.task_id)
                batches.append(len(batch))
                rt.ack(batch)

        async def producer() -> None:
            for i in range(n_tasks):
                task_id = new_task(rt, i)
                t_update[task_id] = time.perf_counter()
                rt.update(task_id, complete)
                if (i + 1) % burst == 0:
                    await asyncio.sleep(0)

        start = time.perf_counter()
        consuming = asyncio.create_task(consumer())
        await producer()
        await consuming
        rt.store.flush()
        elapsed = time.perf_counter() - start

        mail = rt.store.undelivered_mail(rt.session_id)
        leftover = sum(1 for row in mail if row.kind == "notification")
        still_in_memory = len(rt.list())

        # Isolated: one task at a time, nothing else on the loop.
        isolated: list[float] = []
        for i in range(n_isolated):
            task_id = new_task(rt, n_tasks + i)
            await asyncio.sleep(0)  # let the registration commit on its own
            t0 = time.perf_counter()
            rt.update(task_id, complete)
            batch: list[object] = []
            while not batch:
                await asyncio.sleep(0)
                batch = rt.drain()  # type: ignore[assignment]
            isolated.append(time.perf_counter() - t0)
            rt.ack(batch)  # type: ignore[arg-type]

    return {
        "elapsed": elapsed,
        "latencies": latencies,
        "isolated": isolated,
        "received": len(received),
        "duplicates": duplicates,
        "leftover": leftover,
        "in_memory": still_in_memory,
        "batches": batches,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000, help="tasks to churn (10000)")
    parser.add_argument("--burst", type=int, default=10, help="tasks between yields (10)")
    parser.add_argument("--isolated", type=int, default=1000, help="isolated samples (1000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of both runs (5)")
    args = parser.parse_args()
    burst = max(1, args.burst)

    work = Path(tempfile.mkdtemp(prefix="taskloom-bench-"))
    ours: list[dict[str, object]] = []
    raws: list[dict[str, object]] = []
    try:
        for round_no in range(max(1, args.rounds)):
            home = work / f"home-{round_no}"
            home.mkdir()
            os.environ["TASKLOOM_HOME"] = str(home)
            ours.append(asyncio.run(churn(args.tasks, burst, args.isolated)))
            raw_db = work / f"raw-{round_no}.db"
            raws.append(asyncio.run(raw_churn(raw_db, args.tasks, burst)))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rates = [args.tasks / float(r["elapsed"]) for r in ours]  # type: ignore[arg-type]
    raw_rates = [args.tasks / float(r["elapsed"]) for r in raws]  # type: ignore[arg-type]
    rate, raw_rate = statistics.median(rates), statistics.median(raw_rates)
    res = ours[rates.index(rate)] if rate in rates else ours[0]
    lat_ms = [x * 1000 for x in res["latencies"]]  # type: ignore[attr-defined]
    iso_ms = [x * 1000 for r in ours for x in r["isolated"]]  # type: ignore[attr-defined]
    raw_lat_ms = [x * 1000 for r in raws for x in r["latencies"]]  # type: ignore[attr-defined]
    batches: list[int] = res["batches"]  # type: ignore[assignment]
    correct = all(
        r["received"] == args.tasks and r["duplicates"] == 0 and r["leftover"] == 0 for r in ours
    ) and all(r["received"] == args.tasks for r in raws)
    print(f"tasks: {args.tasks}")
    print(f"burst: {args.burst}")
    print(f"rounds: {len(ours)}")
    print(f"tasks_per_s_median: {rate:.0f}  (rounds {', '.join(f'{x:.0f}' for x in rates)})")
    print(f"raw_baseline_tasks_per_s_median: {raw_rate:.0f}  ", end="")
    print(f"(rounds {', '.join(f'{x:.0f}' for x in raw_rates)})")
    # Each round's pair ran back to back, under the same load: the median of their ratios.
    ratio = statistics.median(a / b for a, b in zip(rates, raw_rates, strict=True))
    print(f"ratio_to_raw_baseline: {ratio:.3f}")
    print(f"us_per_task: {1e6 / rate:.1f} (raw baseline {1e6 / raw_rate:.1f})")
    print(f"notifications_received: {res['received']}")
    print(f"duplicate_notifications: {res['duplicates']}")
    print(f"unacked_in_store: {res['leftover']}")
    print(f"tasks_left_in_memory: {res['in_memory']}")
    print(f"drain_batches: {len(batches)} (mean size {sum(batches) / max(1, len(batches)):.1f})")
    p99 = percentile(lat_ms, 99)
    print(f"latency_p50_ms: {percentile(lat_ms, 50):.3f}")
    print(f"latency_p99_ms: {p99:.3f} (raw baseline {percentile(raw_lat_ms, 99):.3f})")
    print(f"latency_max_ms: {max(lat_ms):.3f}")
    if iso_ms:
        print(f"isolated_samples: {len(iso_ms)}")
        print(f"isolated_latency_p50_ms: {percentile(iso_ms, 50):.3f}")
        print(f"isolated_latency_p99_ms: {percentile(iso_ms, 99):.3f}")
    if not correct:
        print("error: notifications lost, duplicated or left unacknowledged")
    verdict = "PASS" if ratio >= RATIO_TARGET and correct else "FAIL"
    print(
        f"{verdict}: throughput {rate:.0f} tasks/s, x{ratio:.3f} the raw baseline's "
        f"{raw_rate:.0f} (target >= x{RATIO_TARGET})"
    )
    verdict = "PASS" if p99 <= P99_TARGET_MS else "FAIL"
    print(f"{verdict}: latency p99 {p99:.3f} ms (target <= {P99_TARGET_MS:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
