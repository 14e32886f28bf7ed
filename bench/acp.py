"""Benchmark: ``taskloom acp`` against print mode's stream-json on the same scripted model.

Both sides run the same script (``--model scripted:FILE``): one prompt whose model reads a file
``--calls`` times, one Read a turn, then answers. In the same run, alternating, ``--runs``
times each:

* acp: ``taskloom acp`` driven by the official Python client library (``agent-client-protocol``),
  as an editor drives it: ``initialize``, ``session/new``, one ``session/prompt``. Measured: the
  time from sending ``initialize`` to the first ``session/update`` of the prompt, and the time
  from sending the prompt to its answer divided by the updates it streamed;
* print: ``taskloom -p go --output-format stream-json --include-partial-messages``: the time
  from its ``system/init`` line to its ``result`` line divided by the lines between (the
  baseline: the same turns, the same engine, another rendering), and the time from its spawn
  to its first line after ``system/init`` (the baseline of the time to the first update: the
  ACP side's clock starts after its spawn, at ``initialize``, so the ratio flatters it by
  the few milliseconds of an exec).

Reported: the median run of each side, the ratio of the first-update times, of the
per-update times, acp / print (1.0: an ACP update costs what a stream-json line does), and
the ratio of the whole turn's times (ACP sends fewer, larger updates: no per-event lines of
the model's stream beyond its text and thinking deltas). A
report, not a test: it exits 0 unless it cannot run at all. Smoke run:
``.venv/bin/python bench/acp.py --runs 1 --calls 5``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _common import child_env

# This file is named acp.py: with its directory first on the path, ``import acp`` would find
# it instead of the library.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def write_script(work: Path, calls: int) -> str:
    """The scripted model's turns: ``calls`` Reads, one a turn, then a closing answer."""
    target = work / "data.txt"
    target.write_text("".join(f"line {i}\n" for i in range(200)))
    turns: list[dict[str, Any]] = [
        {
            "text": f"Reading it, pass {i}.",
            "tool_calls": [{"name": "Read", "input": {"file_path": str(target)}}],
        }
        for i in range(calls)
    ]
    turns.append({"text": "Done reading."})
    path = work / "turns.yaml"
    path.write_text(yaml.safe_dump({"turns": turns}))
    return f"scripted:{path}"


class _Client:
    def __init__(self) -> None:
        self.first: float | None = None
        self.updates = 0
        self.prompting = False

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if not self.prompting:
            return  # the commands advertised after session/new
        self.updates += 1
        if self.first is None:
            self.first = time.perf_counter()

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the benchmark's calls need no permission")


async def acp_run(model: str, work: Path, env: dict[str, str]) -> dict[str, float]:
    """One ``taskloom acp`` run: time to the first update, and per update."""
    import acp

    client = _Client()
    argv = ("-m", "taskloom", "acp", "--model", model, "--permission-mode", "bypassPermissions")
    async with acp.spawn_agent_process(client, sys.executable, *argv, env=env, cwd=work) as (
        conn,
        _proc,
    ):
        start = time.perf_counter()
        await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
        session = await conn.new_session(cwd=str(work), mcp_servers=[])
        client.prompting = True
        sent = time.perf_counter()
        said = await conn.prompt(session_id=session.session_id, prompt=[acp.text_block("go")])
        done = time.perf_counter()
    if said.stop_reason != "end_turn" or client.first is None:
        raise RuntimeError(f"the acp run ended {said.stop_reason} with {client.updates} updates")
    return {
        "first_update_s": client.first - start,
        "turn_ms": (done - sent) * 1000,
        "per_update_ms": (done - sent) * 1000 / client.updates,
        "updates": client.updates,
    }


def print_run(model: str, work: Path, env: dict[str, str]) -> dict[str, float]:
    """One print-mode run: per stream-json line from ``system/init`` to ``result``."""
    argv = [
        sys.executable, "-m", "taskloom", "-p", "go", "--output-format", "stream-json",
        "--include-partial-messages", "--model", model,
        "--permission-mode", "bypassPermissions",
    ]  # fmt: skip
    spawned = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, cwd=work, text=True)
    assert proc.stdout is not None
    init = result = first = None
    lines = 0
    for line in proc.stdout:
        kind = json.loads(line).get("type"), json.loads(line).get("subtype")
        now = time.perf_counter()
        if kind == ("system", "init") and init is None:
            init = now
        elif kind[0] == "result":
            result = now
        elif init is not None:
            first = first or now
            lines += 1
    proc.wait(timeout=120)
    if init is None or result is None or first is None:
        raise RuntimeError(f"print mode ended {proc.returncode} without its lines")
    turn_ms = (result - init) * 1000
    return {
        "turn_ms": turn_ms,
        "per_line_ms": turn_ms / lines,
        "lines": lines,
        "first_line_s": first - spawned,
    }


def median(values: Any) -> float:
    """The median of ``values``."""
    return float(statistics.median(list(values)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="Runs of each side (default 3).")
    parser.add_argument("--calls", type=int, default=30, help="Read calls in the script.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-acp-") as tmp:
        work = Path(tmp)
        model = write_script(work, args.calls)
        env = child_env(
            str(work / "pycache"),
            TASKLOOM_HOME=str(work / "home"),
            CLAUDE_CONFIG_DIR=str(work / "claude"),  # transcripts stay in the scratch dir
        )
        acp_runs, print_runs = [], []
        for _ in range(args.runs):
            print_runs.append(print_run(model, work, env))
            acp_runs.append(asyncio.run(acp_run(model, work, env)))
    first = median(r["first_update_s"] for r in acp_runs)
    print_first = median(r["first_line_s"] for r in print_runs)
    per_update = median(r["per_update_ms"] for r in acp_runs)
    per_line = median(r["per_line_ms"] for r in print_runs)
    acp_turn = median(r["turn_ms"] for r in acp_runs)
    print_turn = median(r["turn_ms"] for r in print_runs)
    report = {
        "runs": args.runs,
        "calls": args.calls,
        "acp_updates": acp_runs[0]["updates"],
        "print_lines": print_runs[0]["lines"],
        "initialize_to_first_update_s": round(first, 3),
        "print_spawn_to_first_line_s": round(print_first, 3),
        "first_update_ratio_acp_over_print": round(first / print_first, 2),
        "acp_per_update_ms": round(per_update, 3),
        "print_per_line_ms": round(per_line, 3),
        "per_update_ratio_acp_over_print": round(per_update / per_line, 2),
        "acp_turn_ms": round(acp_turn, 1),
        "print_turn_ms": round(print_turn, 1),
        "turn_ratio_acp_over_print": round(acp_turn / print_turn, 2),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
