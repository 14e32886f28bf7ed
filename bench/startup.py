"""Benchmark: start-up of ``taskloom -p`` up to its first model request, and its peak RSS.

A local fake Anthropic server (tests/fake_servers.py, speaking the real SSE wire format)
answers; the time is measured from just before the process is spawned to the moment the
server receives the first ``/v1/messages`` request. Peak RSS is the child's ``ru_maxrss``
over the whole run. The same is measured for ``python -c pass`` as a floor, in the same run.

Targets: <= 0.35 s to the first request, <= 80 MiB peak RSS.
Quick run: ``.venv/bin/python bench/startup.py --runs 3``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import child_max_rss_mib

from fake_servers import FakeAnthropicServer

TIME_TARGET_S = 0.35
RSS_TARGET_MIB = 80.0


def one_run(home: str, workdir: str) -> tuple[float, float]:
    with FakeAnthropicServer() as server:
        first = threading.Event()
        stamp: list[float] = []

        def responder(body: object) -> dict[str, str]:
            if not first.is_set():
                stamp.append(time.monotonic())
                first.set()
            return {"text": "hello"}

        server.responder = responder  # type: ignore[assignment]
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))},
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "bench",
            "TASKLOOM_HOME": home,
        }
        exe = str(Path(sys.executable).with_name("taskloom"))
        start = time.monotonic()
        _, rss = child_max_rss_mib([exe, "-p", "hi", "--model", "sonnet"], env, workdir)
        if not stamp:
            raise RuntimeError("taskloom never reached the model")
        return stamp[0] - start, rss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="taskloom-bench-")
    workdir = tempfile.mkdtemp(prefix="taskloom-bench-cwd-")
    try:
        floor = [
            child_max_rss_mib([sys.executable, "-c", "pass"], dict(os.environ), workdir)
            for _ in range(args.runs)
        ]
        runs = [one_run(home, workdir) for _ in range(args.runs + 1)][1:]  # first warms caches
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    times = [t for t, _ in runs]
    rss = [r for _, r in runs]
    print(f"runs: {args.runs}")
    print(f"python_floor_s_median: {statistics.median(t for t, _ in floor):.3f}")
    print(f"python_floor_rss_mib: {statistics.median(r for _, r in floor):.1f}")
    print(f"first_request_s_median: {statistics.median(times):.3f}")
    print(f"first_request_s_max: {max(times):.3f}")
    print(f"peak_rss_mib_median: {statistics.median(rss):.1f}")
    print(f"peak_rss_mib_max: {max(rss):.1f}")
    t = statistics.median(times)
    r = max(rss)
    print(
        f"{'PASS' if t <= TIME_TARGET_S else 'FAIL'}: first request {t:.3f} s "
        f"(target <= {TIME_TARGET_S} s)"
    )
    print(
        f"{'PASS' if r <= RSS_TARGET_MIB else 'FAIL'}: peak RSS {r:.1f} MiB "
        f"(target <= {RSS_TARGET_MIB:.0f} MiB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
