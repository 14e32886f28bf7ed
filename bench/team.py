"""Benchmark: the agent team scenario through ``taskloom -p --teams``.

A local fake Anthropic server (tests/fake_servers.py, the real SSE wire format) plays the
model with ``TeamScript`` (tests/team_scenario.py): the lead spawns alice and bob in one
message; each reports to ``team-lead`` with SendMessage and goes idle; the lead asks both to
shut down, each approves, and the lead answers. Nothing in the script waits: everything the
run spends is taskloom's (start-up, requests, spawning, mailboxes, idleness, shutdown, exit).

Measured per run: the wall time of the whole ``taskloom -p`` process, its peak RSS, and the
lead's and the teammates' model requests. Delivery latency: for each teammate SendMessage to
``team-lead`` (its report, its shutdown_response), from the moment the server's responder
returned the turn holding that call (the call is streamed to the teammate from then on) to
the arrival of the lead's first request that carries what it sent (the report's text, the
``shutdown_approved`` for that request id); ``next_request_carried`` says how many were in
the lead's very next request, and ``next_lead_request_ms_p50`` is the time to that next
request whatever it carries (it may be the lead's own tool results, sent before the message
was even posted: a lower bound, not a delivery). Measured in the same run, against the same
server: a one-request ``taskloom -p hi`` (its wall time and RSS). The first run of each
command only warms caches and is left out.

Targets: wall <= 1.0 s, delivery p50 <= 20 ms, peak RSS <= 70 MiB.
Quick run: ``.venv/bin/python bench/team.py --runs 3``.

Then, in the same run (bench/team_notices.py): the share of the lead's input tokens that idle
and protocol notices take, in a scenario of three teammates and ten tasks, before (setting
``teammateIdleNotices: "each"``: one lead turn per notice, as at 815cf13) and after (held and
folded, the default). Target: at most 5 %. ``--notices`` runs only that part.

With ``--tmux`` (bench/team_tmux.py): delivery latency between two processes instead, a lead
and one teammate in a tmux pane of a private tmux server (``--teammate-mode tmux``), over
``--messages`` ping/pong exchanges (200 by default): p50 and p99 lead -> teammate, teammate ->
lead and round trip, each including one model turn's overhead, with the in-process backend
over the same exchanges as the baseline. Targets there: p50 <= 20 ms, p99 <= 100 ms.
``.venv/bin/python bench/team.py --tmux --messages 200``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import add_bytecode_flag, child_max_rss_mib
from coordinator import _exe, _verdict, interleaved

from coordinator_scenario import system_text, texts
from fake_servers import FakeAnthropicServer, Turn
from team_scenario import FINAL, TeamScript, team_argv

WALL_TARGET_S = 1.0
DELIVERY_TARGET_S = 0.020
RSS_TARGET_MIB = 70.0
_MEMBER = "a member of the agent team"


@dataclass
class TimedTeamScript(TeamScript):
    """The team scenario, noting when each teammate's SendMessage to the lead was answered."""

    #: (monotonic time the responder returned it, who sent it, what the lead will then see).
    sends: list[tuple[float, str, str]] = field(default_factory=list)
    #: Whether the lead gave its final answer (the run went through every step).
    finished: bool = False

    def __call__(self, body: dict[str, Any]) -> Turn:
        """The scenario's answer to ``body``; its SendMessage calls to the lead are timed."""
        turn = super().__call__(body)
        if turn.text == FINAL:
            self.finished = True
        system = system_text(body)
        sender = next((n for n in ("alice", "bob") if f"You are {n}, " in system), None)
        found = [_mark(c.input) for c in turn.tool_calls if c.name == "SendMessage"]
        marks = [m for m in found if m is not None]
        if sender is not None and marks:
            now = time.monotonic()  # the turn is streamed from here on
            self.sends += [(now, sender, mark) for mark in marks]
        return turn


def _mark(call: dict[str, Any]) -> str | None:
    """What the lead's conversation holds once a teammate's SendMessage reached it."""
    if call.get("to") != "team-lead":
        return None
    message = call.get("message")
    if isinstance(message, dict):  # a shutdown_response: the lead gets shutdown_approved
        return f'"type": "shutdown_approved", "requestId": "{message.get("request_id")}"'
    return str(message)


def _lead_requests(server: FakeAnthropicServer, start: int) -> list[tuple[float, str]]:
    """The lead's requests since ``start``: (arrival, every user text of the conversation)."""
    found = []
    for request in server.requests[start:]:
        body = request.body
        if not isinstance(body, dict) or _MEMBER in system_text(body):
            continue
        seen = "\n".join(
            t for m in body.get("messages", []) if m["role"] == "user" for t in texts(m["content"])
        )
        found.append((request.received, seen))
    return found


@dataclass
class TeamRun:
    """One scenario run's figures."""

    wall: float
    rss: float
    lead_requests: int
    teammate_requests: int
    latencies: list[float]
    next_request: list[float]
    next_carried: int
    finished: bool


def team_run(server: FakeAnthropicServer, env: dict[str, str], workdir: str) -> TeamRun:
    """One ``taskloom -p --teams`` run of the scenario."""
    script = TimedTeamScript()
    server.responder = script
    start = len(server.requests)
    wall, rss = child_max_rss_mib([_exe(), *team_argv()], env, workdir)
    leads = _lead_requests(server, start)
    latencies, next_request, next_carried = [], [], 0
    for sent, _, mark in script.sends:
        later = [(at, seen) for at, seen in leads if at >= sent]
        if later:
            next_request.append(later[0][0] - sent)
        carrying = next(((at, i) for i, (at, seen) in enumerate(later) if mark in seen), None)
        if carrying is not None:
            latencies.append(carrying[0] - sent)
            next_carried += carrying[1] == 0
    return TeamRun(
        wall,
        rss,
        len(script.lead_requests),
        sum(len(r) for r in script.teammate_requests.values()),
        latencies,
        next_request,
        next_carried,
        script.finished and len(latencies) == len(script.sends) == 4,
    )


def _teams_left(env: dict[str, str]) -> int:
    listed = subprocess.run(
        [_exe(), "teams", "--json"], capture_output=True, text=True, timeout=60, env=env
    )
    return len(json.loads(listed.stdout)["teams"]) if listed.returncode == 0 else -1


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def main() -> int:
    """Run the bench and print its figures; 1 when a run did not go through the scenario."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="Measured runs of each command.")
    parser.add_argument(
        "--tmux",
        action="store_true",
        help="Lead <-> teammate-in-a-tmux-pane latency instead (see bench/team_tmux.py).",
    )
    parser.add_argument(
        "--messages", type=int, default=200, help="With --tmux: the ping/pong exchanges."
    )
    parser.add_argument(
        "--notices",
        action="store_true",
        help="Only the share of the lead's input tokens that notices take (bench/team_notices.py).",
    )
    add_bytecode_flag(parser)
    args = parser.parse_args()
    if args.tmux:
        import team_tmux

        return team_tmux.main(args.messages, bytecode_cache=not args.no_bytecode_cache)
    import team_notices

    if args.notices:
        return team_notices.main(args.runs, bytecode_cache=not args.no_bytecode_cache)
    runs, plain, left = interleaved(
        team_run, args.runs, bytecode_cache=not args.no_bytecode_cache, after=_teams_left
    )
    walls = [r.wall for r in runs]
    wall, rss = statistics.median(walls), max(r.rss for r in runs)
    latencies = [x for r in runs for x in r.latencies]
    p50 = statistics.median(latencies) if latencies else float("inf")
    worst = max(latencies) if latencies else float("inf")
    nexts = [x for r in runs for x in r.next_request]
    next_p50 = statistics.median(nexts) if nexts else float("inf")
    base_wall, base_rss = statistics.median(p[0] for p in plain), max(p[1] for p in plain)
    print(f"team scenario: {args.runs} runs (lead + alice + bob, report, shutdown)")
    print(f"  wall_s_median: {wall:.3f}")
    print(f"  wall_s_min: {min(walls):.3f}")
    print(f"  wall_s_runs: {', '.join(f'{w:.3f}' for w in walls)}")
    print(f"  peak_rss_mib_max: {rss:.1f}")
    print(f"  lead_requests_per_run: {', '.join(str(r.lead_requests) for r in runs)}")
    print(f"  teammate_requests_per_run: {', '.join(str(r.teammate_requests) for r in runs)}")
    print(f"  delivery_ms_p50: {_ms(p50)}")
    print(f"  delivery_ms_max: {_ms(worst)}")
    print(f"  next_lead_request_ms_p50: {_ms(next_p50)} (carrying the message or not)")
    print(
        f"  deliveries: {len(latencies)} (next_request_carried: "
        f"{sum(r.next_carried for r in runs)}/{len(latencies)})"
    )
    print(f"  finished_runs: {sum(r.finished for r in runs)}/{args.runs}")
    print(f"  teams_left: {left}")
    print("baseline: taskloom -p hi --output-format stream-json --verbose (one request)")
    print(f"  wall_s_median: {base_wall:.3f}")
    print(f"  wall_s_min: {min(p[0] for p in plain):.3f}")
    print(f"  peak_rss_mib_max: {base_rss:.1f}")
    print(
        f"the team adds: {wall - base_wall:+.3f} s of wall over the baseline's, "
        f"{rss - base_rss:+.1f} MiB of peak RSS"
    )
    print(f"{_verdict(wall <= WALL_TARGET_S)}: wall {wall:.3f} s (target <= {WALL_TARGET_S} s)")
    print(
        f"{_verdict(p50 <= DELIVERY_TARGET_S)}: delivery p50 {_ms(p50)} ms "
        f"(target <= {DELIVERY_TARGET_S * 1000:.0f} ms)"
    )
    print(
        f"{_verdict(rss <= RSS_TARGET_MIB)}: peak RSS {rss:.1f} MiB "
        f"(target <= {RSS_TARGET_MIB:.0f} MiB)"
    )
    notices = team_notices.main(args.runs, bytecode_cache=not args.no_bytecode_cache)
    return 0 if all(r.finished for r in runs) and left == 0 and notices == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
