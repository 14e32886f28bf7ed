"""Input models of :mod:`taskloom.tools.skill` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class SkillInput(ToolInput):
    """The Skill tool's input."""

    skill: str = Field(description='The skill name. E.g., "commit", "review-pr", or "pdf"')
    args: str | None = Field(default=None, description="Optional arguments for the skill")
