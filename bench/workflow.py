"""Benchmark: N trivial agents through one workflow vs N background agents spawned directly.

Both runs are ``taskloom -p`` with the scripted model (``--model scripted:FILE``): the main
thread's first answer either calls Workflow once with N items (concurrency 256, the most the
setting allows) or calls Agent N times in one message (all ``run_in_background``); every
agent answers at once; the main thread then waits for its notifications and answers. The
settings let the session run N agents at once and one turn start N (``maxConcurrentAgents``,
``maxAgentsPerTurn``). The two are measured alternately in the same run, so that both see the
same machine load: the wall time of the whole process and its peak RSS, for N = 200 and
N = 1,000.

Target: the workflow adds at most 10 % wall time and 10 MiB peak RSS to the same number of
agents spawned directly.
Quick run: ``.venv/bin/python bench/workflow.py --runs 3``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import add_bytecode_flag, child_env, child_max_rss_mib

#: The most the workflow may add: wall time (a ratio) and peak RSS (MiB).
WALL_RATIO_TARGET = 1.10
RSS_DELTA_TARGET_MIB = 10.0


def script(n: int, how: str) -> dict[str, Any]:
    """The scripted turns: N agents through a workflow (``workflow``) or directly."""
    if how == "workflow":
        call = {
            "description": "trivial agents",
            "items": list(range(n)),
            "prompt": "Answer for item {item}.",
            "concurrency": 256,
        }
        first = [{"name": "Workflow", "input": call}]
    else:
        first = [
            {
                "name": "Agent",
                "input": {
                    "description": f"agent {i}",
                    "prompt": f"Answer for item {i}.",
                    "run_in_background": True,
                },
            }
            for i in range(n)
        ]
    return {
        "turns": [{"tool_calls": first}, {"text": "Waiting."}, {"text": "All reported."}],
        "subagents": {"general-purpose": {"text": "done"}},
    }


def one_run(n: int, how: str, work: Path, pycache: str | None) -> tuple[float, float]:
    """One ``taskloom -p`` run (its own home): (wall seconds, peak RSS MiB)."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"{how}-", dir=work))
    (run_dir / ".claude").mkdir()
    settings = {
        "maxConcurrentAgents": n,
        "maxAgentsPerTurn": n,
        "workflowMaxConcurrency": 256,
        "workflowMaxAgents": max(n, 1000),
    }
    (run_dir / ".claude" / "settings.json").write_text(json.dumps(settings))
    turns = run_dir / "turns.json"
    turns.write_text(json.dumps(script(n, how)))
    env = child_env(pycache, TASKLOOM_HOME=str(run_dir / "home"))
    exe = str(Path(sys.executable).with_name("taskloom"))
    argv = [exe, "-p", "go", "--model", f"scripted:{turns}", "--dangerously-skip-permissions"]
    try:
        return child_max_rss_mib(argv, env, str(run_dir))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--agents", type=int, nargs="+", default=[200, 1000])
    add_bytecode_flag(parser)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="taskloom-bench-workflow-"))
    pycache = None if args.no_bytecode_cache else str(work / "pycache")
    try:
        one_run(10, "direct", work, pycache)  # warms the bytecode cache: not counted
        for n in args.agents:
            runs: dict[str, list[tuple[float, float]]] = {"direct": [], "workflow": []}
            for _ in range(args.runs):
                for how in runs:
                    runs[how].append(one_run(n, how, work, pycache))
            print(f"agents: {n}")
            wall = {how: statistics.median(r[0] for r in rs) for how, rs in runs.items()}
            rss = {how: max(r[1] for r in rs) for how, rs in runs.items()}
            for how, rs in runs.items():
                print(f"  {how}_wall_s_median: {wall[how]:.3f}")
                print(f"  {how}_wall_s_runs: {', '.join(f'{r[0]:.3f}' for r in rs)}")
                print(f"  {how}_peak_rss_mib_max: {rss[how]:.1f}")
            ratio = wall["workflow"] / wall["direct"]
            delta = rss["workflow"] - rss["direct"]
            print(f"  wall_ratio_workflow_over_direct: {ratio:.3f}")
            print(f"  peak_rss_delta_mib: {delta:+.1f}")
            verdict = "PASS" if ratio <= WALL_RATIO_TARGET else "FAIL"
            print(f"{verdict}: {n} agents, workflow wall x{ratio:.3f} (target <= x1.10)")
            verdict = "PASS" if delta <= RSS_DELTA_TARGET_MIB else "FAIL"
            print(f"{verdict}: {n} agents, workflow peak RSS {delta:+.1f} MiB (target <= +10)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
