"""The ``agentUsage`` of a result: each agent's tokens and cost, and its subtree's.

Keyed by agent id, ``main`` for the session's main thread; a remote agent's figures are
what its worker reported. Each entry has the agent's own
tokens (``inputTokens``, ``outputTokens``, ``cacheReadInputTokens``,
``cacheCreationInputTokens``) and ``costUSD``, summed over every model it used; an agent also
has its ``agentType``, ``description``, ``status``, ``toolUses``, ``durationMs`` and
``parentAgentId`` (None: started by the main thread), and ``subtree`` — the same token and
cost figures for it and every agent it started, recursively. The entries' ``costUSD`` add up
to the result's ``total_cost_usd``. ``responsesWithoutUsage`` is added when some of the
agent's responses had no usage reported (counted as 0).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from taskloom.models.pricing import UsageLedger
from taskloom.tasks.remote import RemoteAgentTaskState
from taskloom.tasks.types import AgentTaskState, TaskState

MAIN = "main"
_TOKENS = ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")


def agent_usage(
    ledgers: Mapping[str, UsageLedger],
    states: Iterable[TaskState],
    prices: Mapping[str, Any] | None,
) -> dict[str, dict[str, Any]]:
    """Each agent's figures (see the module docstring), from its ledger and its task."""
    agents: dict[str, AgentTaskState | RemoteAgentTaskState] = {
        s.id: s for s in states if isinstance(s, (AgentTaskState, RemoteAgentTaskState))
    }
    out: dict[str, dict[str, Any]] = {}
    for key, ledger in ledgers.items():
        ledger.overrides = dict(prices or {})
        entry = _figures(ledger)
        state = agents.get(key)
        if state is not None:
            end = state.end_time or time.time()  # still running: so far
            entry.update(
                agentType=state.agent_type,
                description=state.description,
                status=state.status.value,
                toolUses=state.tool_uses,
                durationMs=int(max(0.0, end - state.start_time) * 1000),
                parentAgentId=state.owner if state.owner in agents else None,
            )
        out[key] = entry
    children: dict[str, list[str]] = {}
    for key, entry in out.items():
        parent = entry.get("parentAgentId")
        if key != MAIN and parent is not None:
            children.setdefault(parent, []).append(key)
    for key, entry in out.items():
        if key != MAIN:
            entry["subtree"] = _subtree(key, out, children)
    return out


def _figures(ledger: UsageLedger) -> dict[str, Any]:
    entry: dict[str, Any] = dict.fromkeys(_TOKENS, 0)
    for per_model in ledger.model_usage().values():
        for name in _TOKENS:
            entry[name] += per_model[name]
    entry["costUSD"] = ledger.cost()
    unreported = ledger.unreported_responses()
    if unreported:
        entry["responsesWithoutUsage"] = unreported  # its figures count less than it spent
    return entry


def _subtree(
    key: str, out: Mapping[str, dict[str, Any]], children: Mapping[str, list[str]]
) -> dict[str, Any]:
    total: dict[str, Any] = dict.fromkeys((*_TOKENS, "costUSD"), 0)
    stack, seen = [key], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for name in total:
            total[name] += out[node][name]
        stack += children.get(node, [])
    return total


__all__ = ["MAIN", "agent_usage"]
