"""Input models of :mod:`taskloom.agents.workflow_tool` (imported on first use)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class WorkflowInput(ToolInput):
    """Input of :class:`WorkflowTool`."""

    description: str = Field(description="A short (3-5 word) description of the workflow.")
    items: list[Any] | None = Field(
        default=None,
        min_length=1,
        description="The work items, one agent each (strings, numbers, objects).",
    )
    prompt: str | None = Field(
        default=None, description="Each agent's prompt: a template with {item}, {index}."
    )
    script: str | None = Field(
        default=None,
        description="Instead of items and prompt: a Python script that runs the agents.",
    )
    subagent_type: str | None = Field(default=None, description="The agents' type.")
    concurrency: int | None = Field(
        default=None, ge=1, description="The most agents running at once (default 16)."
    )
    reduce: str | None = Field(
        default=None, description="The prompt of a last agent given every result to combine."
    )
