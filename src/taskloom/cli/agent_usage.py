"""The ``agentUsage`` of a result: each agent's tokens and cost, and its subtree's.

Read from the session's usage ledger (:mod:`taskloom.tasks.usage`), keyed by agent id,
``main`` for the session's main thread; a remote agent's figures are what its worker reported.
Each entry has the agent's own tokens (``inputTokens``, ``outputTokens``,
``cacheReadInputTokens``, ``cacheCreationInputTokens``) and ``costUSD``, summed over every
model it used; an agent also has its ``agentType``, ``description``, ``status``,
``toolUses``, ``durationMs`` and ``parentAgentId`` (None: started by the main thread), and
``subtree`` — the same token and cost figures for it and every agent it started, recursively.
The entries' ``costUSD`` add up to the result's ``total_cost_usd``. ``responsesWithoutUsage``
is added when some of the agent's responses had no usage reported (counted as 0).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from taskloom.tasks.kinds import kind_of
from taskloom.tasks.types import TaskState
from taskloom.tasks.usage import MAIN, Figures, UsageLedger


def agent_usage(ledger: UsageLedger, states: Iterable[TaskState]) -> dict[str, dict[str, Any]]:
    """Each agent's figures (see the module docstring), from the ledger and its task."""
    facts = {s.id: (s, f) for s in states if (f := kind_of(s).agent_facts(s)) is not None}
    out: dict[str, dict[str, Any]] = {}
    for key in ledger.agents():
        if not ledger.models(key):
            continue  # nothing counted of it here (an agent of an earlier process)
        own = ledger.own(key)
        entry = _figures(own)
        if key in facts:
            state, fact = facts[key]
            end = state.end_time or time.time()  # still running: so far
            entry.update(
                agentType=fact.agent_type,
                description=state.description,
                status=state.status.value,
                toolUses=own.tool_uses,  # this process's, as its tokens are
                durationMs=int(max(0.0, end - state.start_time) * 1000),
                # The ledger's tree, as its subtree: a teammate's agent's owner is the
                # teammate's task, its parent the teammate's agent id (its key here).
                parentAgentId=ledger.parent(key),
            )
        if key != MAIN:
            subtree = _figures(ledger.subtree(key))
            subtree.pop("responsesWithoutUsage", None)
            entry["subtree"] = subtree
        out[key] = entry
    return out


def _figures(figures: Figures) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "inputTokens": figures.input_tokens,
        "outputTokens": figures.output_tokens,
        "cacheReadInputTokens": figures.cache_read_input_tokens,
        "cacheCreationInputTokens": figures.cache_creation_input_tokens,
        "costUSD": figures.cost_usd,
    }
    if figures.unreported:
        entry["responsesWithoutUsage"] = figures.unreported  # it counts less than it spent
    return entry


__all__ = ["MAIN", "agent_usage"]
