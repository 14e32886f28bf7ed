"""A spawn's request and result: what the Agent tool asks the spawner, and what it reports.

Also how long the Agent tool waits for a foreground agent before it moves to the background
(:func:`auto_background_ms`), whether the agent runs here or on the Ray cluster.
"""

from __future__ import annotations

import os
from dataclasses import field
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.agents.budget import Budget

if TYPE_CHECKING:
    from taskloom.agents.definition import AgentDefinition

#: A foreground agent still running after this long moves to the background.
DEFAULT_AUTO_BACKGROUND_MS = 120_000


@dataclass
class SpawnRequest:
    """What the Agent tool was asked."""

    description: str
    prompt: str
    subagent_type: str | None = None
    model: str | None = None
    run_in_background: bool = False
    name: str | None = None
    mode: str | None = None
    cwd: str | None = None
    isolation: str | None = None
    max_tokens_budget: int | None = None
    max_tool_calls: int | None = None
    max_seconds: float | None = None

    def budget(self, definition: AgentDefinition) -> Budget:
        """Its budget: the call's, within its definition's."""
        asked = Budget(self.max_tokens_budget, self.max_tool_calls, self.max_seconds)
        return asked.tightest(Budget(tokens=definition.tokens))


@dataclass
class SpawnResult:
    """What the Agent tool reports."""

    status: str  # completed | async_launched
    agent_id: str
    agent_type: str
    description: str
    prompt: str
    output_file: str
    content: str = ""
    total_tool_uses: int = 0
    total_tokens: int = 0
    duration_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def launched(
    request: SpawnRequest, agent_id: str, agent_type: str, output_file: str
) -> SpawnResult:
    """What the Agent tool reports of an agent it left running in the background."""
    return SpawnResult(
        status="async_launched",
        agent_id=agent_id,
        agent_type=agent_type,
        description=request.description,
        prompt=request.prompt,
        output_file=output_file,
    )


def auto_background_ms(settings: dict[str, Any]) -> int:
    """``TASKLOOM_AUTO_BACKGROUND_MS``, else the ``autoBackgroundMs`` setting, else 2 min."""
    raw = os.environ.get("TASKLOOM_AUTO_BACKGROUND_MS") or settings.get("autoBackgroundMs")
    try:
        return DEFAULT_AUTO_BACKGROUND_MS if raw is None else max(0, int(raw))
    except (TypeError, ValueError):
        return DEFAULT_AUTO_BACKGROUND_MS
