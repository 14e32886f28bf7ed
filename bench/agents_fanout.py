"""Benchmark: fan-out to N background subagents through ``taskloom -p``, and how it scales.

The main thread's first answer launches N general-purpose agents in one message (all
``run_in_background``); each agent answers at once; the main thread then waits for the
notifications and answers. The model is the scripted one (``--model scripted:FILE``: three
main turns, one answer per agent), so what is measured is taskloom's own cost; ``--wire``
plays it with the fake Anthropic server instead (tests/fake_servers.py, the real SSE wire
format), whose own cost is then part of the figures. The settings let the session run N
agents at once and one turn start N.

Each round runs every N once, in turn, and a run with no agent (the same session, whose first
answer launches nothing: start-up, the store, the transcript): all see the same machine load.
Per N, over ``--runs`` rounds: the median wall time of the whole process and the median of its
peak RSS; from the main transcript (``TASKLOOM_TRANSCRIPTS=taskloom``), the main thread's model
requests (its answers, and the summary requests of its compactions) and how many
``<task-notification>`` each agent's id got in the messages delivered to it (a compaction's
restatement of kept messages is not a delivery); from the store, the notification rows
posted per agent and whether each was acknowledged.

Per agent, against the no-agent run of the same rounds:

* time: (median wall at N - median wall with no agent) / N;
* RSS: (median peak RSS at N - that with no agent) / N, and the marginal figure between the
  two largest N: (RSS at the larger - RSS at the smaller) / their difference in agents.

Targets (checked when 1,000 and 5,000 are both run, the default): the time per agent at 5,000
is at most 1.1 times that at 1,000; the marginal RSS per agent between them is at most 40 KiB;
at every N each agent's notification is delivered exactly once, and the main thread makes at
most 3 model requests.
Quick run: ``.venv/bin/python bench/agents_fanout.py --agents 100 1000 --runs 1``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import add_bytecode_flag, child_env, child_max_rss_mib

#: The scaling targets: time per agent at 5,000 over that at 1,000; marginal KiB per agent.
TIME_RATIO_TARGET = 1.10
RSS_PER_AGENT_TARGET_KIB = 40.0
MAIN_REQUESTS_TARGET = 3
SCALING = (1000, 5000)

_NOTICE = re.compile(r"<task-notification>\s*<task-id>([^<]+)</task-id>")
_LAUNCHED = re.compile(r"^agentId: (\S+)", re.MULTILINE)
#: How a compaction's summary request starts (the fake server answers it with a summary).
_SUMMARY_ASK = "Your task now is to write a detailed summary"


@dataclass
class Run:
    """What one ``taskloom -p`` run showed."""

    wall: float
    rss_mib: float
    answers: int = 0
    summaries: int = 0
    launched: int = 0
    #: Per launched agent: how many notifications about it were delivered to the main thread.
    delivered: Counter[str] = field(default_factory=Counter)
    #: Per task: notification rows posted in the store, and how many are still unacknowledged.
    posted: Counter[str] = field(default_factory=Counter)
    unacked: int = 0

    @property
    def requests(self) -> int:
        """The main thread's model requests: its answers and its compactions' summaries."""
        return self.answers + self.summaries

    def exactly_once(self) -> bool:
        """Whether every launched agent's notification was posted and delivered once."""
        ids = set(self.delivered) | set(self.posted)
        return (
            len(ids) == self.launched
            and all(self.delivered[i] == 1 and self.posted[i] == 1 for i in ids)
            and self.unacked == 0
        )


def first_turn(n: int) -> dict[str, Any]:
    """The main thread's first answer: N background agents (or nothing to launch)."""
    if n == 0:
        return {"text": "Nothing to launch."}
    return {
        "text": f"Launching {n} agents.",
        "tool_calls": [
            {
                "name": "Agent",
                "input": {
                    "description": f"job {i}",
                    "prompt": f"Do job {i}.",
                    "run_in_background": True,
                },
            }
            for i in range(n)
        ],
    }


def wire_responder(n: int) -> Any:
    """The fake server's answers: as the scripted model's (``--wire``)."""

    def respond(body: Any) -> Any:
        if "You are a subagent" in str(body.get("system", "")):
            return {"text": "agent done: 42"}
        if _SUMMARY_ASK in str(body["messages"][-1]):  # a compaction's summary request
            return {"text": "<summary>The user asked to fan out.</summary>"}
        if len(body["messages"]) == 1:
            turn = first_turn(n)
            return {
                "text": turn["text"],
                "tool_calls": [(c["name"], c["input"]) for c in turn.get("tool_calls", [])],
            }
        return {"text": "All agents reported."}

    return respond


def one_run(n: int, work: Path, pycache: str | None, wire: bool) -> Run:
    """One ``taskloom -p`` run in a directory (and home) of its own."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"fanout-{n}-", dir=work))
    (run_dir / ".claude").mkdir()
    settings = {"maxConcurrentAgents": max(n, 1), "maxAgentsPerTurn": max(n, 1)}
    (run_dir / ".claude" / "settings.json").write_text(json.dumps(settings))
    home = run_dir / "home"
    env = child_env(pycache, TASKLOOM_HOME=str(home), TASKLOOM_TRANSCRIPTS="taskloom")
    exe = str(Path(sys.executable).with_name("taskloom"))
    argv = [exe, "-p", "fan out", "--dangerously-skip-permissions"]
    try:
        if wire:
            from fake_servers import FakeAnthropicServer

            with FakeAnthropicServer(responder=wire_responder(n)) as server:
                env.update(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="bench")
                wall, rss = child_max_rss_mib([*argv, "--model", "sonnet"], env, str(run_dir))
        else:
            script = {
                "turns": [first_turn(n), {"text": "Waiting."}, {"text": "All reported."}],
                "subagents": {"general-purpose": {"text": "agent done: 42"}},
            }
            turns = run_dir / "turns.json"
            turns.write_text(json.dumps(script))
            argv += ["--model", f"scripted:{turns}"]
            wall, rss = child_max_rss_mib(argv, env, str(run_dir))
        run = Run(wall=wall, rss_mib=rss)
        read_transcript(home, run)
        read_store(home, run)
        return run
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def read_transcript(home: Path, run: Run) -> None:
    """Fill the main thread's requests and deliveries from its transcript."""
    for path in home.glob("sessions/*/transcript.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            kind = record.get("type")
            if kind == "assistant":
                run.answers += 1
            elif kind == "system" and record.get("subtype") == "compact_boundary":
                run.summaries += 1
            elif kind == "user" and not record.get("isCompactSummary"):
                for block in record["message"]["content"]:
                    text = block.get("text") or block.get("content") or ""
                    if not isinstance(text, str):
                        text = json.dumps(text)
                    if block.get("type") == "tool_result":
                        run.launched += len(_LAUNCHED.findall(text))
                    else:
                        run.delivered.update(_NOTICE.findall(text))


def read_store(home: Path, run: Run) -> None:
    """Fill the notification rows posted per task, and those left unacknowledged."""
    db = sqlite3.connect(home / "taskloom.db")
    try:
        rows = db.execute(
            "SELECT sender, delivered_at FROM mailbox WHERE kind = 'notification'"
        ).fetchall()
    finally:
        db.close()
    run.posted.update(sender for sender, _ in rows)
    run.unacked = sum(1 for _, delivered in rows if delivered is None)


def verdict(ok: bool, what: str) -> None:
    """Print one PASS/FAIL line."""
    print(f"{'PASS' if ok else 'FAIL'}: {what}")


def report(n: int, runs: list[Run], base: dict[str, float]) -> dict[str, float]:
    """Print the figures of N agents; return its medians and per-agent figures."""
    wall = statistics.median(r.wall for r in runs)
    rss = statistics.median(r.rss_mib for r in runs)
    print(f"agents: {n}")
    print(f"  wall_s_median: {wall:.3f}  (runs {', '.join(f'{r.wall:.3f}' for r in runs)})")
    print(f"  peak_rss_mib_median: {rss:.1f}  (runs {', '.join(f'{r.rss_mib:.1f}' for r in runs)})")
    figures = {"wall": wall, "rss": rss}
    if n:
        figures["ms_per_agent"] = (wall - base["wall"]) / n * 1000
        figures["kib_per_agent"] = (rss - base["rss"]) * 1024 / n
        print(f"  ms_per_agent (over no agent): {figures['ms_per_agent']:.3f}")
        print(f"  rss_kib_per_agent (over no agent): {figures['kib_per_agent']:.1f}")
    print(f"  main_requests: {', '.join(f'{r.requests}' for r in runs)}")
    print(f"    answers: {', '.join(str(r.answers) for r in runs)}")
    print(f"    compaction summaries: {', '.join(str(r.summaries) for r in runs)}")
    print(f"  agents_launched: {', '.join(str(r.launched) for r in runs)}")
    for label, counts in (("delivered", "delivered"), ("posted in store", "posted")):
        spread = [Counter(getattr(r, counts).values()) for r in runs]
        shown = "; ".join(", ".join(f"{k}x: {v}" for k, v in sorted(s.items())) for s in spread)
        print(f"  notifications per agent, {label}: {shown or 'none'}")
    print(f"  unacknowledged notification rows: {', '.join(str(r.unacked) for r in runs)}")
    if n:
        once = all(r.exactly_once() and r.launched == n for r in runs)
        verdict(once, f"{n} agents: every notification delivered exactly once")
        most = max(r.requests for r in runs)
        verdict(
            most <= MAIN_REQUESTS_TARGET,
            f"{n} agents: {most} main-thread model requests (target <= {MAIN_REQUESTS_TARGET})",
        )
    return figures


def scaling(figures: dict[int, dict[str, float]]) -> None:
    """The scaling verdicts between 1,000 and 5,000 agents, when both ran."""
    small, large = SCALING
    if small not in figures or large not in figures:
        return
    a, b = figures[small], figures[large]
    ratio = b["ms_per_agent"] / a["ms_per_agent"]
    marginal = (b["rss"] - a["rss"]) * 1024 / (large - small)
    print(f"time_per_agent_ratio_{large}_over_{small}: {ratio:.3f}")
    how = f"(RSS at {large} - RSS at {small}) / {large - small}"
    print(f"rss_kib_per_agent_marginal {how}: {marginal:.1f}")
    verdict(
        ratio <= TIME_RATIO_TARGET,
        f"time per agent at {large} is x{ratio:.3f} that at {small} "
        f"(target <= x{TIME_RATIO_TARGET})",
    )
    verdict(
        marginal <= RSS_PER_AGENT_TARGET_KIB,
        f"RSS per agent {marginal:.1f} KiB between {small} and {large} "
        f"(target <= {RSS_PER_AGENT_TARGET_KIB:.0f} KiB; over no agent: "
        f"{a['kib_per_agent']:.1f} at {small}, {b['kib_per_agent']:.1f} at {large})",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds (3)")
    parser.add_argument(
        "--agents", type=int, nargs="+", default=list(SCALING), help="N (1000 5000)"
    )
    parser.add_argument("--wire", action="store_true", help="the fake Anthropic server plays")
    add_bytecode_flag(parser)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="taskloom-bench-fanout-"))
    pycache = None if args.no_bytecode_cache else str(work / "pycache")
    sizes = [0, *sorted(set(args.agents) - {0})]
    try:
        one_run(10, work, pycache, args.wire)  # warms the bytecode cache: not counted
        runs: dict[int, list[Run]] = {n: [] for n in sizes}
        for _ in range(args.runs):
            for n in sizes:
                runs[n].append(one_run(n, work, pycache, args.wire))
        print(f"model: {'fake Anthropic server' if args.wire else 'scripted'}")
        base = report(0, runs[0], {})
        figures = {n: report(n, runs[n], base) for n in sizes if n}
        scaling(figures)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
