"""Budgets per agent subtree: tokens, tool calls and wall time, counted and enforced.

An agent's budget covers it and every agent it starts, recursively: what a child spends is
counted against its own budget, its parent's, and so on up to the session. Budgets come from
the agent's definition (``tokens``), from the Agent call (``max_tokens_budget``,
``max_tool_calls``, ``max_seconds``, offered when the setting ``agentBudgets`` is on) and
from the session's options; a child never runs on past what its ancestors allow, since what it
spends is theirs too.

At :data:`WRAP_UP_AT` of any of its budgets, every running member of the subtree finds one
note in its next request: wrap up now. At 100 % the subtree is stopped — the agent whose
budget ran out, and with it its children — and its task records why, with the figures; the
notification says so.

Tokens are what each model response processed and wrote: its input (cache reads and writes
included) plus its output, summed over the responses. What is counted is what the session's
usage ledger (:mod:`taskloom.tasks.usage`) is charged: each response, each tool call, each
report from another process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import field
from typing import Any

from taskloom._dataclass import dataclass
from taskloom.tasks.usage import Spent, UsageLedger

#: The share of a budget at which the subtree is told to wrap up.
WRAP_UP_AT = 0.8


@dataclass(frozen=True)
class Budget:
    """Limits on an agent subtree (None: no limit of that kind).

    Attributes:
        tokens: Tokens (see the module docstring).
        tool_calls: Tool calls.
        seconds: Wall time from the agent's start.
        usd: Dollars, by the price table (``modelPrices``, else list prices).
    """

    tokens: int | None = None
    tool_calls: int | None = None
    seconds: float | None = None
    usd: float | None = None

    def __bool__(self) -> bool:
        limits = (self.tokens, self.tool_calls, self.seconds, self.usd)
        return any(v is not None for v in limits)

    def tightest(self, other: Budget) -> Budget:
        """Each limit the lower of the two."""

        def low(a: float | None, b: float | None) -> float | None:
            return b if a is None else a if b is None else min(a, b)

        tokens, calls = low(self.tokens, other.tokens), low(self.tool_calls, other.tool_calls)
        return Budget(
            None if tokens is None else int(tokens),
            None if calls is None else int(calls),
            low(self.seconds, other.seconds),
            low(self.usd, other.usd),
        )


@dataclass(eq=False)
class _Node:
    """One agent (or the session) in the tree of budgets."""

    id: str
    parent: _Node | None
    budget: Budget
    started: float
    tokens: int = 0
    tool_calls: int = 0
    usd: float = 0.0
    warned: bool = False
    spent: str | None = None
    spent_kind: str | None = None
    running: bool = True
    children: list[_Node] = field(default_factory=list)
    timers: list[asyncio.TimerHandle] = field(default_factory=list)

    def members(self) -> list[_Node]:
        """It and its descendants, running or not."""
        found = [self]
        for child in self.children:
            found += child.members()
        return found


class Budgets:
    """A session's budgets and what each agent subtree has used (see the module docstring)."""

    def __init__(
        self,
        session_id: str,
        stop: Callable[[str, str], Coroutine[Any, Any, object]],
        ledger: UsageLedger,
        clock: Callable[[], float] = time.monotonic,
        session: Budget | None = None,
        on_spend: Callable[[str, int, int, float], None] | None = None,
    ) -> None:
        """Count for ``session_id``'s agents; ``stop(agent_id, why)`` stops a subtree.

        ``session``: the budget of the whole session (its main thread and every agent), whose
        ``stop`` is called with the session's id. ``on_spend(agent_id, tokens, tool_calls,
        usd)`` hears each agent's subtree totals as they grow (for its live usage).
        ``ledger``: the session's usage ledger. What it is charged (each response, tool call
        and report from another process) is what the budgets count — an agent not counted
        here (the main thread, a pane teammate) against the session's — and it is told who
        started whom, so that its subtree totals follow the budgets' tree.
        """
        self._ledger = ledger
        self._stop = stop
        self._on_spend = on_spend
        self._clock = clock
        root = _Node(session_id, None, session or Budget(), clock())
        self._nodes: dict[str, _Node] = {session_id: root}
        self._notes: dict[str, str] = {}
        self._stopping: set[asyncio.Task[object]] = set()
        with contextlib.suppress(RuntimeError):  # no loop (a unit test): no wall-time clock
            self._time(root)
        ledger.listen(self._charged)

    def _charged(self, agent_id: str, spent: Spent) -> None:
        """The ledger counted what ``agent_id`` spent: so do its budgets and those above it."""
        root = next(iter(self._nodes))
        counted = agent_id if agent_id in self._nodes else root  # MAIN: the session's
        with contextlib.suppress(RuntimeError):  # no loop: nothing to stop with
            self.charge(counted, spent.tokens, spent.tool_calls, spent.usd)

    def _time(self, node: _Node) -> None:
        """Check its wall-time budget at 80 % and at 100 % (of what is left of it)."""
        seconds = node.budget.seconds
        if seconds is not None:
            loop = asyncio.get_running_loop()
            elapsed = self._clock() - node.started
            node.timers = [
                loop.call_later(max(0.0, at - elapsed), self._check, node)
                for at in (seconds * WRAP_UP_AT, seconds + 0.001)  # never a hair early
            ]

    def limit_session(self, budget: Budget) -> None:
        """Give the whole session ``budget`` (before it spends anything)."""
        root = self._nodes[next(iter(self._nodes))]
        root.budget = budget
        for timer in root.timers:
            timer.cancel()
        self._time(root)

    def meter(self, agent_id: str) -> AgentMeter:
        """The meter of an agent already counted (the session's id: its main thread's)."""
        return AgentMeter(self, agent_id)

    def open(self, agent_id: str, parent: str, budget: Budget) -> AgentMeter:
        """Count ``agent_id`` (started by ``parent``) under ``budget``; its engine's meter."""
        above = self._nodes.get(parent) or self._nodes[next(iter(self._nodes))]
        # One started by the session's main thread is at the top of the ledger's tree.
        self._ledger.link(agent_id, above.id if above.parent is not None else None)
        node = _Node(agent_id, above, budget, self._clock())
        above.children.append(node)
        self._nodes[agent_id] = node
        self._time(node)
        return AgentMeter(self, agent_id)

    def reopen(
        self,
        agent_id: str,
        parent: str,
        budget: Budget | None = None,
        spent: tuple[int, int] = (0, 0),
        spent_usd: float = 0.0,
    ) -> AgentMeter:
        """A resumed agent counts again, on top of what it had spent; its meter.

        One this process has not counted yet (an agent of an earlier process) is opened with
        ``budget`` and what it had ``spent`` then (tokens, tool calls; ``spent_usd``).
        """
        node = self._nodes.get(agent_id)
        if node is None:
            meter = self.open(agent_id, parent, budget or Budget())
            node = self._nodes[agent_id]
            (node.tokens, node.tool_calls), node.usd = spent, spent_usd
            return meter  # whether that is all of it is for exhausted() to say
        if not node.running:
            node.running = True
            self._time(node)  # its clock goes on from its start
        return AgentMeter(self, agent_id)

    def close(self, agent_id: str) -> None:
        """The agent has ended: it is told nothing more (its spending stays counted)."""
        node = self._nodes.get(agent_id)
        if node is not None:
            node.running = False
            for timer in node.timers:
                timer.cancel()
            self._notes.pop(agent_id, None)

    def used(self, agent_id: str) -> tuple[int, int]:
        """Tokens and tool calls of ``agent_id``'s subtree so far."""
        node = self._nodes.get(agent_id)
        return (node.tokens, node.tool_calls) if node is not None else (0, 0)

    def spent(self, agent_id: str) -> str | None:
        """Why ``agent_id``'s subtree was stopped (which budget ran out), if it was."""
        node = self._nodes.get(agent_id)
        return node.spent if node is not None else None

    def exhausted(self, agent_id: str) -> str | None:
        """Why ``agent_id`` may start nothing more (a budget above it, or its own, ran out)."""
        # One not counted here (a teammate, an agent of another process) is under the session.
        node: _Node | None = self._nodes.get(agent_id) or self._nodes[next(iter(self._nodes))]
        while node is not None:
            if node.spent is not None:
                return node.spent
            ran_out = self._ran_out(node)
            if ran_out is not None:
                return ran_out[1]
            node = node.parent
        return None

    def spent_kind(self, agent_id: str) -> str | None:
        """Which budget of ``agent_id``'s ran out: ``token``, ``tool-call`` or ``wall-time``."""
        node = self._nodes.get(agent_id)
        return node.spent_kind if node is not None else None

    async def settled(self, timeout: float = 10.0) -> None:
        """Wait (bounded) for the stops under way: the stopped tasks have ended."""
        if self._stopping:
            await asyncio.wait(set(self._stopping), timeout=timeout)

    async def aclose(self) -> None:
        """Stop the timers; wait for the stops under way."""
        for node in self._nodes.values():
            for timer in node.timers:
                timer.cancel()
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)

    # -- counting -----------------------------------------------------------------------------

    def charge(self, agent_id: str, tokens: int, tool_calls: int, usd: float = 0.0) -> None:
        """Count what ``agent_id`` spent against its budget and every one above it."""
        node = self._nodes.get(agent_id)
        while node is not None:
            node.tokens += tokens
            node.tool_calls += tool_calls
            node.usd += usd
            if self._on_spend is not None and node.parent is not None:
                self._on_spend(node.id, node.tokens, node.tool_calls, node.usd)
            self._check(node)
            node = node.parent

    def reminder(self, agent_id: str) -> str | None:
        """The note waiting for ``agent_id``'s next request (taken)."""
        return self._notes.pop(agent_id, None)

    def admit_tool_call(self, agent_id: str) -> str | None:
        """Admit a tool call ``agent_id`` is about to make; why not, if a budget is used up.

        The last call a tool-call budget allows runs; the one after it is refused and the
        subtree whose budget it is, stopped.
        """
        node: _Node | None = self._nodes.get(agent_id)
        while node is not None:
            if node.spent is not None:
                return node.spent  # stopping already: nothing more runs
            limit = node.budget.tool_calls
            if limit is not None and node.tool_calls >= limit:
                figures = f"{limit} of {limit} tool calls"
                what = f"the tool-call budget of {_whose(node)} ran out ({figures})"
                self._spend(node, "tool-call", what)
                return what
            node = node.parent
        return None  # the call is counted when the ledger is charged with it

    def _check(self, node: _Node) -> None:
        if node.spent is not None or not node.budget:
            return
        ran_out = self._ran_out(node)
        if ran_out is not None:
            self._spend(node, *ran_out)
            return
        share, _, what = max(self._shares(node))
        if share >= WRAP_UP_AT and not node.warned:
            node.warned = True
            whom = "the whole session" if node.parent is None else f"{node.id} and its agents"
            note = (
                f"<system-reminder>{what}: it covers you ({whom}). Wrap up now: finish what "
                "you are doing, report what you have, and start nothing new. At 100 % the "
                "work is stopped.</system-reminder>"
            )
            for member in node.members():
                if member.running and member.spent is None:
                    self._notes[member.id] = note

    def _spend(self, node: _Node, kind: str, what: str) -> None:
        node.spent, node.spent_kind = what, kind
        self._warn_off(node)
        task: asyncio.Task[object] = asyncio.get_running_loop().create_task(
            self._stop(node.id, what)
        )
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    def _warn_off(self, node: _Node) -> None:
        for member in node.members():
            self._notes.pop(member.id, None)
            for timer in member.timers:
                timer.cancel()

    def _ran_out(self, node: _Node) -> tuple[str, str] | None:
        """A budget of ``node``'s used up, if one is: its kind, and it in words.

        All of its tokens, time or cost used: nothing more. A tool-call budget at its end has
        just let its last call run (that may be this very spawn; the calls after it are
        refused one by one, see :meth:`admit_tool_call`): it ran out once more were counted
        (a remote agent's calls are counted after they ran).
        """
        for share, kind, what in self._shares(node):
            if share > 1.0 or (share >= 1.0 and kind != "tool-call"):
                return kind, what
        return None

    def _shares(self, node: _Node) -> list[tuple[float, str, str]]:
        """Each of its budgets: the share used, its kind, and it in words, with the figures."""
        b = node.budget
        shares: list[tuple[float, str, str]] = []
        if b.tokens is not None:
            figures = f"{node.tokens:,} of {b.tokens:,} tokens"
            shares.append((node.tokens / max(b.tokens, 1), "token", figures))
        if b.tool_calls is not None:
            figures = f"{node.tool_calls} of {b.tool_calls} tool calls"
            shares.append((node.tool_calls / max(b.tool_calls, 1), "tool-call", figures))
        if b.seconds is not None:
            elapsed = self._clock() - node.started
            figures = f"{elapsed:.0f} of {b.seconds:g} s"
            shares.append((elapsed / max(b.seconds, 1e-9), "wall-time", figures))
        if b.usd is not None:
            figures = f"{node.usd:.4f} of {b.usd:g} USD"
            shares.append((node.usd / max(b.usd, 1e-12), "cost", figures))
        whose = _whose(node)
        return [
            (share, kind, f"the {kind} budget of {whose} {_used(share, kind)} ({figures})")
            for share, kind, figures in shares
        ]


def _used(share: float, kind: str) -> str:
    # A tool-call budget at its end has let its last call run: it runs out with the next.
    out = share > 1.0 or (share >= 1.0 and kind != "tool-call")
    return "ran out" if out else f"{share:.0%} used"


def _whose(node: _Node) -> str:
    return "the session" if node.parent is None else node.id


def session_budget(
    settings: Mapping[str, Any], max_tokens: int | None = None, max_usd: float | None = None
) -> Budget:
    """The whole session's budget.

    Its tokens are ``--max-budget-tokens``, else the setting ``sessionBudget``'s ``tokens``;
    its tool calls and seconds are that setting's ``toolCalls`` and ``seconds``.
    """
    raw = settings.get("sessionBudget")
    raw = raw if isinstance(raw, Mapping) else {}

    def number(key: str) -> float | None:
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            return None
        return float(value)

    tokens = max_tokens or number("tokens")
    calls = number("toolCalls")
    return Budget(
        None if tokens is None else int(tokens),
        None if calls is None else int(calls),
        number("seconds"),
        max_usd or number("usd"),
    )


@dataclass
class AgentMeter:
    """One agent's engine meter over the session's :class:`Budgets`."""

    budgets: Budgets
    agent_id: str

    def admit_tool_call(self) -> str | None:
        """Admit a tool call about to start; why it may not, if a budget is used up."""
        try:
            return self.budgets.admit_tool_call(self.agent_id)
        except RuntimeError:  # no loop: nothing to stop with
            return None

    def reminder(self) -> str | None:
        """Its wrap-up note, once."""
        return self.budgets.reminder(self.agent_id)


__all__ = ["WRAP_UP_AT", "AgentMeter", "Budget", "Budgets", "session_budget"]
