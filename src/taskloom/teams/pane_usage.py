"""What a pane teammate has spent, read from its process's records, charged by its lead.

A teammate in a pane runs its model calls in its own process: that process records, on its
teammate's task, its usage so far (per model, under the ledger's report key, and its tool
calls). Its lead reads that record when the teammate reports (each idle notification) and when
it ends, and charges what grew to the session's usage ledger and to the lead's budgets — the
session's, as an in-process teammate's spending is — so a session budget covers its pane
teammates too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from taskloom.tasks.kinds import kind_of
from taskloom.tasks.narrow import as_teammate
from taskloom.tasks.types import readable_state
from taskloom.tasks.usage import UsageLedger, report_fields, report_in

if TYPE_CHECKING:
    from taskloom.events import Meter

_FIELDS = ("total_tokens", "tool_uses", "spent_tokens")


def recorded_usage(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """A pane teammate's usage so far, from its own task in its process's records."""
    for task in tasks:
        state = as_teammate(readable_state(task))
        if state is None:
            continue
        usage: dict[str, Any] = {k: int(task.get(k) or 0) for k in _FIELDS}
        usage["cost_usd"] = float(task.get("cost_usd") or 0.0)
        reported = kind_of(state).usage_from_elsewhere(state)  # its process made its calls
        if reported is not None:  # the session's ledger counts it by model
            usage.update(report_fields(reported.by_model))
        return usage
    return {}


class PaneSpending:
    """Charges each pane teammate's recorded spending to the session's ledger.

    Args:
        ledger: The session's usage ledger (the lead's budgets count what it is charged).
        meter_for: Opens the lead's meter for a teammate (by agent id), before its first
            charge; None: it counts against the session's budget alone.
    """

    def __init__(
        self, ledger: UsageLedger, meter_for: Callable[[str], Meter] | None = None
    ) -> None:
        self.ledger = ledger
        self.meter_for = meter_for
        self._meters: dict[str, Meter] = {}

    def started(self, agent_id: str) -> None:
        """A new process runs it (a spawn, a resume): its records count from zero again."""
        self.ledger.restart(agent_id)

    def count(self, agent_id: str, usage: Mapping[str, Any]) -> None:
        """Charge what its record says it spent since it was last counted."""
        by_model = report_in(usage)
        if by_model is None:
            return
        if self.meter_for is not None and agent_id not in self._meters:
            # Its budgets first: what the ledger is charged then counts there too.
            self._meters[agent_id] = self.meter_for(agent_id)
        self.ledger.report(agent_id, by_model, int(usage.get("tool_uses", 0)))


__all__ = ["PaneSpending", "recorded_usage"]
