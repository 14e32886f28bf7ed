"""Benchmark: 20 remote agents on a local Ray, from one ``taskloom -p`` run.

A fake Anthropic server (tests/fake_servers.py) plays the lead and the agents. The lead first
spawns one remote agent and waits for it (this starts the local Ray: its cost is printed
apart), then spawns ``--agents`` remote agents at once, in the background; each runs
``echo`` in a Bash call on its copy of a scratch git repository and answers. Printed, from
the same run:

- ``ray_start_s``: the first remote agent's call to its first streamed output line (Ray
  started locally, its first worker, the agent's process);
- ``first_output_s``: once Ray is up, from the lead's turn with the 20 Agent calls (the
  server's return of it) to the first line streamed into any of their output files, and the
  median and worst over the agents of each one's first line;
- ``wall_s``: the whole run; ``peak_rss_mib``: the taskloom process's own peak RSS
  (sampled every 20 ms; Ray's processes, its children, are not counted).

The same run first does it all with the setting ``remote.poolSize: 0`` (the baseline: an actor
of its own and a ``taskloom remote worker`` started for each agent), then as a session does by
default (its pool of warm actors, workers forked from their zygotes: see
``taskloom.remote.pool``), and prints both and their ratios.

Targets (with the pool): the fan-out's first output <= 1.5 s once Ray is up; each agent's first
output, from the fan-out, median <= 2 s and max <= 4 s; the parent's RSS <= 120 MiB.
Run: ``.venv/bin/python bench/remote.py`` (``--agents N``, ``--no-baseline``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _common import scratch_config_dir

from coordinator_scenario import texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn

FIRST_OUTPUT_TARGET_S = 1.5
PER_AGENT_MEDIAN_TARGET_S = 2.0
PER_AGENT_MAX_TARGET_S = 4.0
RSS_TARGET_MIB = 120.0
FINAL = "All remote agents done."


class Fanout:
    """The lead: one warm-up remote agent, then ``n`` at once; each agent echoes and answers."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.fanned_at = 0.0
        self.warm_at = 0.0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Turn:
        with self._lock:
            first = " ".join(texts(body["messages"][0]["content"]))
            if first.startswith("job "):
                calls = _calls(body)
                if not calls:
                    return Turn(tool_calls=(ToolCall("Bash", {"command": "echo hi"}),))
                return Turn(text="done")
            return self._lead(body)

    def _lead(self, body: dict[str, Any]) -> Turn:
        calls = _calls(body)
        seen = "\n".join(
            t for m in body["messages"] if m["role"] == "user" for t in texts(m["content"])
        )
        done = seen.count("<task-notification>")
        if not calls:
            self.warm_at = time.monotonic()
            return Turn(tool_calls=(_spawn("warm-up"),))
        if len(calls) == 1 and done >= 1:
            turn = Turn(tool_calls=tuple(_spawn(str(i)) for i in range(self.n)))
            self.fanned_at = time.monotonic()
            return turn
        if done >= self.n + 1:
            return Turn(text=FINAL)
        return Turn(text="Waiting.")


def _spawn(job: str) -> ToolCall:
    return ToolCall(
        "Agent",
        {"description": f"remote {job}", "prompt": f"job {job}: echo", "isolation": "remote",
         "subagent_type": "general-purpose", "run_in_background": True},
    )  # fmt: skip


def _calls(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for m in body["messages"]
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]


def _watch(folder: Path, seen: dict[str, float], stop: threading.Event) -> None:
    """The first time each output file has a line (no event tells another process of it)."""
    while not stop.is_set():
        for path in folder.glob("sessions/*/tasks/r*.output"):
            if path.name not in seen:
                try:
                    if path.stat().st_size:
                        seen[path.name] = time.monotonic()
                except OSError:
                    pass
        stop.wait(0.005)


def main() -> int:
    """Run it (the baseline first, unless told not to); print the figures and the verdicts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the run without a pool (faster)"
    )
    args = parser.parse_args()
    base = None
    if not args.no_baseline:
        base = _run(args.agents, {"poolSize": 0})
        if base is None:
            return 1
        _show("baseline, no pool (an actor and a worker started per agent)", base)
    pooled = _run(args.agents, {})
    if pooled is None:
        return 1
    print(f"remote agents: {args.agents} at once (after one to start Ray), local Ray")
    _show("the session's pool of warm actors", pooled)
    if base is not None:
        for key in ("first_output_s", "per_agent_median_s", "per_agent_max_s", "ray_start_s"):
            print(f"ratio {key} pool/baseline: {pooled[key] / max(base[key], 1e-9):.2f}")
    _verdict(pooled["first_output_s"] <= FIRST_OUTPUT_TARGET_S,
             f"first output {pooled['first_output_s']:.2f} s (target <= "
             f"{FIRST_OUTPUT_TARGET_S} s once Ray is up)")  # fmt: skip
    _verdict(pooled["per_agent_median_s"] <= PER_AGENT_MEDIAN_TARGET_S,
             f"first output per agent, median {pooled['per_agent_median_s']:.2f} s (target <= "
             f"{PER_AGENT_MEDIAN_TARGET_S} s)")  # fmt: skip
    _verdict(pooled["per_agent_max_s"] <= PER_AGENT_MAX_TARGET_S,
             f"first output per agent, max {pooled['per_agent_max_s']:.2f} s (target <= "
             f"{PER_AGENT_MAX_TARGET_S} s)")  # fmt: skip
    rss = pooled["peak_rss_mib"]
    _verdict(rss <= RSS_TARGET_MIB, f"peak RSS {rss:.1f} MiB (target <= {RSS_TARGET_MIB:.0f} MiB)")
    return 0


def _show(title: str, figures: dict[str, float]) -> None:
    print(f"{title}:")
    print(f"  ray_start_s (first agent: Ray started, to its first output line): "
          f"{figures['ray_start_s']:.2f}")  # fmt: skip
    print(f"  first_output_s (the fan-out's first line, once Ray is up): "
          f"{figures['first_output_s']:.2f}")  # fmt: skip
    print(f"  first_output_per_agent_s_median: {figures['per_agent_median_s']:.2f}")
    print(f"  first_output_per_agent_s_max: {figures['per_agent_max_s']:.2f}")
    print(f"  wall_s: {figures['wall_s']:.2f}")
    print(f"  peak_rss_mib (the taskloom process): {figures['peak_rss_mib']:.1f}")


def _verdict(ok: bool, what: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'}: {what}")


def _run(agents: int, remote: dict[str, Any]) -> dict[str, float] | None:
    """One session fanning out ``agents`` remote agents, with ``remote`` settings; its
    figures, or None (said) if it failed."""
    scratch = Path(tempfile.mkdtemp(prefix="taskloom-bench-remote-"))
    repo, home = scratch / "repo", scratch / "home"
    repo.mkdir()
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / "README.md").write_text("bench\n")
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], cwd=repo, check=True)
    script = Fanout(agents)
    seen: dict[str, float] = {}
    peak: list[int] = [0]
    stop = threading.Event()
    try:
        with FakeAnthropicServer(responder=script) as server:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "RAY_"))}
            env.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="bench")
            env["TASKLOOM_HOME"] = str(home)
            env["CLAUDE_CONFIG_DIR"] = scratch_config_dir()  # transcripts not in ~/.claude
            settings = json.dumps({"remote": {"localCpus": os.cpu_count() or 2, **remote}})
            watcher = threading.Thread(target=_watch, args=(home, seen, stop), daemon=True)
            watcher.start()
            began = time.monotonic()
            # The prompt names the count: the fan-out guard lets one turn start that many.
            proc = subprocess.Popen(
                [sys.executable, "-m", "taskloom", "-p", f"Fan out to {agents + 1} remote agents.",
                 "--output-format", "stream-json", "--verbose", "--model", "claude-sonnet-4-5",
                 "--dangerously-skip-permissions", "--settings", settings],
                cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
            sampler = threading.Thread(target=_sample_rss, args=(proc.pid, peak, stop))
            sampler.start()
            out, err = proc.communicate(timeout=600)
            wall = time.monotonic() - began
            stop.set()
            sampler.join(5)
    finally:
        stop.set()
        shutil.rmtree(scratch, ignore_errors=True)
    bad = [line for line in out.splitlines() if line.strip() and not line.startswith("{")]
    if bad:
        print(f"FAIL: stream-json output has lines that are not JSON: {bad[:3]}")
        return None
    last = [json.loads(line) for line in out.splitlines() if line.strip()][-1:]
    if proc.returncode != 0 or not last or last[0].get("result") != FINAL:
        print(f"FAIL: exit code {proc.returncode}; stderr:\n{err[-3000:]}")
        return None
    ids = sorted(seen, key=seen.__getitem__)
    fanned = [seen[i] - script.fanned_at for i in ids[1:] if seen[i] >= script.fanned_at]
    if len(fanned) < agents:
        print(f"FAIL: {agents - len(fanned)} of the {agents} agents printed nothing")
        return None
    return {
        "ray_start_s": seen[ids[0]] - script.warm_at,
        "first_output_s": min(fanned),
        "per_agent_median_s": statistics.median(fanned),
        "per_agent_max_s": max(fanned),
        "wall_s": wall,
        "peak_rss_mib": peak[0] / 2**20,
    }


def _sample_rss(pid: int, peak: list[int], stop: threading.Event) -> None:
    """The taskloom process's own RSS, sampled (its Ray processes are apart, and would count
    in a wait4 figure)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            stop.wait(0.02)
    except psutil.Error:
        return  # it has ended


if __name__ == "__main__":
    raise SystemExit(main())
