"""What a pane teammate has spent, read from its process's records, counted by its lead.

A teammate in a pane runs its model calls in its own process: that process records, on its
teammate's task, its usage so far (``spent_tokens``: input, cache reads and writes and output,
summed; ``tool_uses``; ``cost_usd``). Its lead reads that record when the teammate reports
(each idle notification) and when it ends, and charges what grew to the lead's budgets — the
session's, as an in-process teammate's spending is — so a session budget covers its pane
teammates too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from taskloom.tasks.types import TaskType

if TYPE_CHECKING:
    from taskloom.events import Meter

_FIELDS = ("total_tokens", "tool_uses", "spent_tokens")


def recorded_usage(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """A pane teammate's usage so far, from its own task in its process's records."""
    for task in tasks:
        if task.get("type") == TaskType.IN_PROCESS_TEAMMATE:
            usage: dict[str, Any] = {k: int(task.get(k) or 0) for k in _FIELDS}
            usage["cost_usd"] = float(task.get("cost_usd") or 0.0)
            by_model = task.get("usage_by_model")
            if isinstance(by_model, dict):  # its lead's usage and cost count it by model
                usage["usage_by_model"] = by_model
            return usage
    return {}


class PaneSpending:
    """Charges each pane teammate's recorded spending to its lead's budgets as it grows.

    Args:
        meter_for: The lead's meter for a teammate (by agent id); None: nothing is counted.
    """

    def __init__(self, meter_for: Callable[[str], Meter] | None = None) -> None:
        self.meter_for = meter_for
        self._counted: dict[str, tuple[int, int, float]] = {}
        self._meters: dict[str, Meter] = {}

    def started(self, task_id: str) -> None:
        """A new process runs it (a spawn, a resume): its records count from zero again."""
        self._counted.pop(task_id, None)

    def count(self, task_id: str, agent_id: str, usage: Mapping[str, Any]) -> None:
        """Charge what its record says it spent since it was last counted."""
        if self.meter_for is None or not usage:
            return
        now = (
            int(usage.get("spent_tokens", 0)),
            int(usage.get("tool_uses", 0)),
            float(usage.get("cost_usd", 0.0)),
        )
        was = self._counted.get(task_id, (0, 0, 0.0))
        self._counted[task_id] = (max(now[0], was[0]), max(now[1], was[1]), max(now[2], was[2]))
        tokens, calls, usd = (max(0, now[0] - was[0]), max(0, now[1] - was[1]),
                              max(0.0, now[2] - was[2]))  # fmt: skip
        if tokens or calls or usd:
            meter = self._meters.get(agent_id)
            if meter is None:
                meter = self._meters[agent_id] = self.meter_for(agent_id)
            meter.charge(tokens=tokens, tool_calls=calls, usd=usd)


__all__ = ["PaneSpending", "recorded_usage"]
