"""Benchmark: fan-out to N background subagents through ``taskloom -p``.

A local fake Anthropic server (tests/fake_servers.py, the real SSE wire format) plays the
model: the main thread's first answer launches N general-purpose agents in one message (all
``run_in_background``); each agent answers at once; the main thread then waits for the
notifications and answers. Measured: the wall time of the whole ``taskloom -p`` process and
its peak RSS, for N = 10 and N = 100, plus how many requests the main thread made.

Targets: 10 agents <= 0.6 s and <= 100 MiB; 100 agents <= 2 s and <= 150 MiB.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import child_max_rss_mib

from fake_servers import FakeAnthropicServer

TARGETS = {10: (0.6, 100.0), 100: (2.0, 150.0)}


def responder_for(n: int, main_requests: list[int]) -> Any:
    def respond(body: Any) -> Any:
        if "You are a subagent" in str(body.get("system", "")):
            return {"text": "agent done: 42"}
        main_requests.append(1)
        if len(body["messages"]) == 1:
            return {
                "text": f"Launching {n} agents.",
                "tool_calls": [
                    (
                        "Agent",
                        {
                            "description": f"job {i}",
                            "prompt": f"Do job {i}.",
                            "run_in_background": True,
                        },
                    )
                    for i in range(n)
                ],
            }
        return {"text": "All agents reported."}

    return respond


def one_run(n: int, home: str, workdir: str) -> tuple[float, float, int]:
    main_requests: list[int] = []
    with FakeAnthropicServer(responder=responder_for(n, main_requests)) as server:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))},
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "bench",
            "TASKLOOM_HOME": home,
        }
        exe = str(Path(sys.executable).with_name("taskloom"))
        wall, rss = child_max_rss_mib(
            [exe, "-p", "fan out", "--model", "sonnet", "--dangerously-skip-permissions"],
            env,
            workdir,
        )
    return wall, rss, len(main_requests)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--agents", type=int, nargs="+", default=[10, 100])
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="taskloom-bench-")
    workdir = tempfile.mkdtemp(prefix="taskloom-bench-cwd-")
    try:
        for n in args.agents:
            runs = [one_run(n, home, workdir) for _ in range(args.runs)]
            wall = statistics.median(r[0] for r in runs)
            rss = max(r[1] for r in runs)
            print(f"agents: {n}")
            print(f"  wall_s_median: {wall:.3f}")
            print(f"  wall_s_runs: {', '.join(f'{r[0]:.3f}' for r in runs)}")
            print(f"  peak_rss_mib_max: {rss:.1f}")
            print(f"  main_model_requests: {', '.join(str(r[2]) for r in runs)}")
            if n in TARGETS:
                t_target, m_target = TARGETS[n]
                print(
                    f"{'PASS' if wall <= t_target else 'FAIL'}: {n} agents wall {wall:.3f} s "
                    f"(target <= {t_target} s)"
                )
                print(
                    f"{'PASS' if rss <= m_target else 'FAIL'}: {n} agents peak RSS {rss:.1f} "
                    f"MiB (target <= {m_target:.0f} MiB)"
                )
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
