"""Benchmark (``bench/team.py --tmux``): message latency between a lead and a teammate in a pane.

``taskloom -p --teams --teammate-mode tmux`` is run against a local fake Anthropic server
(tests/fake_servers.py) playing the model with :class:`PingPongScript`: the lead spawns
``alice`` in team ``bench`` (a ``python -m taskloom teammate`` process of its own, in a pane
of a private tmux server: never the user's); once her first idle notification is in (she is
up: her start-up is no delivery), it sends her ``ping 1`` with SendMessage and ends its
turn; alice answers ``pong 1`` to ``team-lead`` and ends hers; once ``pong i`` has reached the
lead it sends ``ping i+1`` (one per lead turn), up to ``--messages``; then it asks alice to
shut down and, her ``shutdown_approved`` in, answers a final text. The messages cross
processes through the SQLite store plus a Unix-datagram wake-up ping.

Measured per message:

**Delivery** (the targets): from the post of ``ping i`` (or ``pong i``) in the sender's process
to the moment the recipient's transcript holds it, in the recipient's process: the mailbox
row's own stamps (``created_at``, stamped by the sender as it posts, and ``delivered_at``,
stamped by the recipient as it records the message), read from the store after the run. A
recipient busy with a request when the row comes takes it when that request is answered (at
its next tool boundary or the end of its turn): that wait is in the figure, as for the user.
"Both ways" is the sum of the two deliveries of one exchange (alice's own turn left out).

**Turn to request** (what a user sees, for context), from the fake server's clock
(``time.monotonic()``):

- lead -> teammate: from the responder's return of the lead turn holding the SendMessage
  ``ping i`` to the arrival of alice's first request whose messages carry ``ping i``;
- teammate -> lead: from the responder's return of alice's turn holding ``pong i`` to the
  arrival of the lead's first request carrying ``pong i``;
- round trip: from the return of ``ping i`` to the arrival of the lead's request carrying
  ``pong i`` (both deliveries and alice's own request in between).

Each figure includes one model turn's overhead on the sender's side (the tool call streamed
to it, parsed and executed, the message posted) and the receiver's start of a new request:
what a user sees, not the bare mailbox (``bench/mailbox_ipc.py`` measures that). The fake
server stamps an arrival once it has parsed the body, and the conversations grow with every
message (the last requests carry some 800 messages, a few ms of JSON for it to parse): the
late figures are upper bounds, and the bench's own server shares the machine's CPUs. Measured in
the same invocation, against the same server, with the same script and number of messages:
the in-process backend (``--teammate-mode in-process``), as a baseline. A first, short run of
each backend (2 messages) only warms caches and is left out.

Targets (for the tmux backend): delivery p50 <= 20 ms, p99 <= 100 ms, each direction and
both ways.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import child_env

from coordinator_scenario import system_text, texts
from fake_servers import FakeAnthropicServer, ToolCall, Turn
from team_scenario import events_of, team_argv
from tmux_driver import TmuxError, TmuxServer

TEAM = "bench"
FINAL = "Ping-pong done."
P50_TARGET_S = 0.020
P99_TARGET_S = 0.100
WARMUP_MESSAGES = 2
_ALICE = "You are alice, a member of the agent team"
_PING = re.compile(r"\bping (\d+)\b")
_PONG = re.compile(r"\bpong (\d+)\b")
_SHUTDOWN = re.compile(r'"requestId": ?"(shutdown-[^"]*@alice)"')
_APPROVED = re.compile(r'"type": ?"shutdown_approved"')
_IDLE = re.compile(r'"type": ?"idle_notification"')


def _user_text(messages: list[dict[str, Any]]) -> str:
    return "\n".join(t for m in messages if m["role"] == "user" for t in texts(m["content"]))


def _sent(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The inputs of every SendMessage this conversation's model made."""
    return [
        b["input"]
        for m in messages
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use" and b.get("name") == "SendMessage"
    ]


def _numbers(pattern: re.Pattern[str], text: str) -> set[int]:
    return {int(n) for n in pattern.findall(text)}


def _is_alice(body: Any) -> bool:
    return isinstance(body, dict) and _ALICE in system_text(body)


@dataclass
class PingPongScript:
    """The lead and alice playing ping-pong (see the module docstring); times each send.

    The fake server calls it from its own thread: the bookkeeping is under a lock.
    """

    messages: int
    #: Ping number -> monotonic time the responder returned the lead turn sending it.
    pings: dict[int, float] = field(default_factory=dict)
    #: Pong number -> monotonic time the responder returned alice's turn sending it.
    pongs: dict[int, float] = field(default_factory=dict)
    lead_requests: int = 0
    alice_requests: int = 0
    #: Whether the lead gave its final answer (the run went through every step).
    finished: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Turn:
        """The next answer to ``body``; its ping or pong, if any, timed at return."""
        with self._lock:
            alice = _is_alice(body)
            if alice:
                self.alice_requests += 1
                turn = self._alice(body["messages"])
            else:
                self.lead_requests += 1
                turn = self._lead(body["messages"])
            self.finished |= turn.text == FINAL
            sent = [c.input.get("message") for c in turn.tool_calls if c.name == "SendMessage"]
            words = " ".join(m for m in sent if isinstance(m, str))
            now = time.monotonic()  # the turn is streamed from here on
            for n in _numbers(_PONG if alice else _PING, words):
                (self.pongs if alice else self.pings).setdefault(n, now)
            return turn

    def _lead(self, messages: list[dict[str, Any]]) -> Turn:
        seen, sent = _user_text(messages), _sent(messages)
        if not any(
            b.get("type") == "tool_use"
            for m in messages
            if m["role"] == "assistant" and isinstance(m["content"], list)
            for b in m["content"]
        ):
            spawn = {
                "description": "ping-pong",
                "prompt": "Answer each ping of the lead.",
                "name": "alice",
                "team_name": TEAM,
            }
            return Turn(tool_calls=(ToolCall("Agent", spawn),))
        if _APPROVED.search(seen):
            return Turn(text=FINAL)
        pinged = {
            n
            for s in sent
            if isinstance(s.get("message"), str)
            for n in _numbers(_PING, s["message"])
        }
        asked_to_stop = any(isinstance(s.get("message"), dict) for s in sent)
        last = max(pinged, default=0)
        # ping 1 once alice is up and idle: her start-up is not a delivery
        if (last == 0 and _IDLE.search(seen)) or (last and last in _numbers(_PONG, seen)):
            if last < self.messages:
                ping = {"to": "alice", "message": f"ping {last + 1}", "summary": f"p{last + 1}"}
                return Turn(tool_calls=(ToolCall("SendMessage", ping),))
            if not asked_to_stop:
                stop = {"to": "alice", "message": {"type": "shutdown_request", "reason": "done"}}
                return Turn(tool_calls=(ToolCall("SendMessage", stop),))
        return Turn(text="Waiting for alice.")

    def _alice(self, messages: list[dict[str, Any]]) -> Turn:
        seen, sent = _user_text(messages), _sent(messages)
        requests = _SHUTDOWN.findall(seen)
        if requests and not any(isinstance(s.get("message"), dict) for s in sent):
            answer = {"type": "shutdown_response", "request_id": requests[-1], "approve": True}
            return Turn(
                tool_calls=(ToolCall("SendMessage", {"to": "team-lead", "message": answer}),)
            )
        answered = {
            n
            for s in sent
            if isinstance(s.get("message"), str)
            for n in _numbers(_PONG, s["message"])
        }
        todo = sorted(_numbers(_PING, seen) - answered)
        if todo:
            return Turn(
                tool_calls=tuple(
                    ToolCall("SendMessage", {"to": "team-lead", "message": f"pong {n}"})
                    for n in todo
                )
            )
        return Turn(text="Waiting.")


@dataclass
class PingPongRun:
    """One run's figures (seconds)."""

    backend: str
    messages: int
    wall: float
    to_teammate: list[float]
    to_lead: list[float]
    round_trip: list[float]
    lead_requests: int
    alice_requests: int
    failure: str | None
    #: Delivery (post -> the recipient's transcript), from the mailbox rows' stamps.
    delivered_to_teammate: list[float] = field(default_factory=list)
    delivered_to_lead: list[float] = field(default_factory=list)
    delivered_both: list[float] = field(default_factory=list)


def _deliveries(home: str) -> tuple[dict[int, float], dict[int, float]]:
    """Each ping's and pong's delivery, from the rows the run left in its store."""
    db = sqlite3.connect(f"file:{os.path.join(home, 'taskloom.db')}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT recipient, body, created_at, delivered_at FROM mailbox"
            " WHERE kind = 'message' AND delivered_at IS NOT NULL"
        ).fetchall()
    finally:
        db.close()
    pings: dict[int, float] = {}
    pongs: dict[int, float] = {}
    for recipient, body, created, delivered in rows:
        to_alice = recipient == f"alice@{TEAM}"
        for n in _numbers(_PING if to_alice else _PONG, body):
            (pings if to_alice else pongs).setdefault(n, delivered - created)
    return pings, pongs


def _first_arrivals(
    server: FakeAnthropicServer, start: int
) -> tuple[dict[int, float], dict[int, float]]:
    """Arrival of alice's first request carrying each ping, and of the lead's with each pong."""
    with server._lock:  # the server appends from its thread; the run is over, but be exact
        requests = list(server.requests[start:])
    at_alice: dict[int, float] = {}
    at_lead: dict[int, float] = {}
    for request in requests:
        body = request.body
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            continue
        alice = _is_alice(body)
        found = _numbers(_PING if alice else _PONG, _user_text(body["messages"]))
        into = at_alice if alice else at_lead
        for n in found:
            into.setdefault(n, request.received)
    return at_alice, at_lead


def ping_pong_run(
    server: FakeAnthropicServer,
    messages: int,
    env: dict[str, str],
    workdir: str,
    tmux: TmuxServer | None,
    home: str,
) -> PingPongRun:
    """One ``taskloom -p --teams`` run of :class:`PingPongScript`, in tmux panes or in-process."""
    script = PingPongScript(messages)
    server.responder = script
    start = len(server.requests)
    env = dict(env)
    argv = [sys.executable, "-m", "taskloom", *team_argv("Play ping-pong with alice.")]
    if tmux is not None:
        env["TMUX"] = f"{tmux.socket_path},{tmux.pid},0"
        argv += ["--teammate-mode", "tmux"]
    else:
        argv += ["--teammate-mode", "in-process"]
    backend = "tmux" if tmux is not None else "in-process"
    failure: str | None = None
    began = time.monotonic()
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=60 + messages,
            cwd=workdir,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        failure = f"the {backend} run did not end within {e.timeout:.0f} s"
        proc = None
    wall = time.monotonic() - began
    if proc is not None:
        failure = _run_failure(proc, script)
    if failure is not None and tmux is not None:
        failure += _panes_shown(tmux)
    at_alice, at_lead = _first_arrivals(server, start)
    to_teammate = [at_alice[n] - t for n, t in script.pings.items() if n in at_alice]
    to_lead = [at_lead[n] - t for n, t in script.pongs.items() if n in at_lead]
    round_trip = [at_lead[n] - t for n, t in script.pings.items() if n in at_lead]
    if failure is None and not (len(to_teammate) == len(to_lead) == len(round_trip) == messages):
        failure = (
            f"the {backend} run delivered {len(to_teammate)} pings and {len(to_lead)} pongs"
            f" of {messages}"
        )
    pinged, ponged = _deliveries(home)
    if failure is None and not (len(pinged) == len(ponged) == messages):
        failure = (
            f"the {backend} run's store holds {len(pinged)} delivered pings and {len(ponged)}"
            f" delivered pongs of {messages}"
        )
    return PingPongRun(
        backend,
        messages,
        wall,
        to_teammate,
        to_lead,
        round_trip,
        script.lead_requests,
        script.alice_requests,
        failure,
        list(pinged.values()),
        list(ponged.values()),
        [pinged[n] + ponged[n] for n in pinged if n in ponged],
    )


def _run_failure(proc: subprocess.CompletedProcess[str], script: PingPongScript) -> str | None:
    result = None
    try:
        events = events_of(proc.stdout)
    except ValueError:
        events = []
    if events and events[-1].get("type") == "result":
        result = events[-1].get("result")
    if proc.returncode == 0 and result == FINAL and script.finished:
        return None
    return (
        f"exit code {proc.returncode}, final result {result!r} (wanted {FINAL!r});"
        f" pings sent {len(script.pings)}, pongs sent {len(script.pongs)}\n"
        f"stderr (last 2000 characters):\n{proc.stderr[-2000:]}"
    )


def _panes_shown(tmux: TmuxServer) -> str:
    """What the teammates' panes show, for a failure's message."""
    try:
        listed = tmux.run("list-panes", "-a", "-F", "#{pane_id} #{pane_dead}", check=False)
        shown = ""
        for line in listed.splitlines():
            pane = line.split()[0]
            screen = tmux.run("capture-pane", "-p", "-t", pane, check=False).rstrip()
            shown += f"\npane {line}:\n{screen[-2000:]}"
        return shown or "\n(no tmux pane left)"
    except TmuxError as e:
        return f"\n(tmux panes not readable: {e})"


def _quantile(values: list[float], q: int) -> float:
    """The ``q``-th percentile (inclusive method); inf when there is nothing."""
    if not values:
        return float("inf")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def _print_run(run: PingPongRun, title: str) -> None:
    print(title)
    for label, values in (
        ("delivery_lead_to_teammate", run.delivered_to_teammate),
        ("delivery_teammate_to_lead", run.delivered_to_lead),
        ("delivery_both_ways", run.delivered_both),
        ("turn_to_request_lead_to_teammate", run.to_teammate),
        ("turn_to_request_teammate_to_lead", run.to_lead),
        ("turn_to_request_round_trip", run.round_trip),
    ):
        print(f"  {label}_ms_p50: {_ms(_quantile(values, 50))}")
        print(f"  {label}_ms_p99: {_ms(_quantile(values, 99))}")
        print(f"  {label}_ms_max: {_ms(max(values, default=float('inf')))}")
    print(
        f"  deliveries: {len(run.to_teammate)}/{run.messages} pings,"
        f" {len(run.to_lead)}/{run.messages} pongs"
    )
    print(f"  lead_requests: {run.lead_requests}, teammate_requests: {run.alice_requests}")
    print(f"  wall_s: {run.wall:.3f}")


def _verdicts(run: PingPongRun, base: PingPongRun) -> None:
    for label, values, baseline in (
        ("delivery lead -> teammate", run.delivered_to_teammate, base.delivered_to_teammate),
        ("delivery teammate -> lead", run.delivered_to_lead, base.delivered_to_lead),
        ("delivery both ways", run.delivered_both, base.delivered_both),
    ):
        for q, target in ((50, P50_TARGET_S), (99, P99_TARGET_S)):
            value = _quantile(values, q)
            verdict = "PASS" if value <= target else "MISSED"
            print(
                f"{verdict}: tmux {label} p{q} {_ms(value)} ms (target <= {target * 1000:.0f}"
                f" ms; in-process {_ms(_quantile(baseline, q))} ms)"
            )


def main(messages: int, *, bytecode_cache: bool = True) -> int:
    """Run both backends, print the figures; 1 when a run did not go through the script."""
    if messages < 1:
        print("--messages must be at least 1", file=sys.stderr)
        return 2
    scratch = tempfile.mkdtemp(prefix="taskloom-bench-tmux-")
    workdir = os.path.join(scratch, "cwd")
    os.makedirs(workdir)
    pycache = os.path.join(scratch, "pycache") if bytecode_cache else None
    runs: dict[str, PingPongRun] = {}
    tmux = TmuxServer(scratch)
    try:
        tmux.start()
        with FakeAnthropicServer() as server:
            for label, pane, count in (
                ("warm-up-in-process", None, WARMUP_MESSAGES),
                ("warm-up-tmux", tmux, WARMUP_MESSAGES),
                ("in-process", None, messages),
                ("tmux", tmux, messages),
            ):
                home = os.path.join(scratch, f"home-{label}")
                env = child_env(
                    pycache,
                    ANTHROPIC_BASE_URL=server.url,
                    ANTHROPIC_API_KEY="bench",
                    TASKLOOM_HOME=home,
                )
                for name in ("TMUX", "TMUX_PANE", "TASKLOOM_TEAMMATE_MODE"):
                    env.pop(name, None)  # never the user's tmux, nor their mode
                run = ping_pong_run(server, count, env, workdir, pane, home)
                if run.failure is not None:
                    print(f"FAILED: {label} run: {run.failure}")
                    return 1
                runs[label] = run
    finally:
        tmux.close()
        shutil.rmtree(scratch, ignore_errors=True)
    tm, base = runs["tmux"], runs["in-process"]
    print(
        f"team over tmux: {messages} messages each way (lead <-> alice in her own process"
        " and tmux pane, ping/pong, shutdown)"
    )
    print(
        "  (delivery: the sender's post to the recipient's transcript, from the mailbox rows;"
        " turn to request: also one model turn's overhead, the sender's tool call streamed and"
        " run, the receiver's next request sent and parsed by the fake server)"
    )
    _print_run(tm, "tmux backend (--teammate-mode tmux, private tmux server):")
    _print_run(base, f"baseline: in-process backend, same script, {messages} messages:")
    to_tm, to_lead = tm.delivered_to_teammate, tm.delivered_to_lead
    print(
        "tmux adds over in-process, delivery p50: lead -> teammate"
        f" {_ms(_quantile(to_tm, 50) - _quantile(base.delivered_to_teammate, 50))} ms,"
        " teammate -> lead"
        f" {_ms(_quantile(to_lead, 50) - _quantile(base.delivered_to_lead, 50))} ms"
    )
    _verdicts(tm, base)
    return 0
