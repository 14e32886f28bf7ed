"""Input models of :mod:`taskloom.tools.plan_mode` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class EnterPlanModeInput(ToolInput):
    """EnterPlanMode takes no input."""


class ExitPlanModeInput(ToolInput):
    """ExitPlanMode's input."""

    plan: str = Field(
        description=(
            "The plan you came up with, that you want to run by the user for approval. "
            "Supports markdown. The plan should be pretty concise."
        )
    )
