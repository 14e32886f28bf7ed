"""Input models of :mod:`taskloom.agents.agent_tool` (imported on first use)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from taskloom.tools.inputs import ToolInput

AgentMode = Literal["acceptEdits", "bypassPermissions", "default", "dontAsk", "plan"]


class AgentInput(ToolInput):
    """Input of :class:`AgentTool`."""

    description: str = Field(description="A short (3-5 word) description of the task.")
    prompt: str = Field(description="The task for the agent to perform.")
    subagent_type: str | None = Field(default=None, description="The agent type to use.")
    model: Literal["sonnet", "opus", "haiku"] | None = Field(
        default=None, description="Model override for this agent."
    )
    run_in_background: bool | None = Field(
        default=None, description="Run in the background; you are notified when it ends."
    )
    name: str | None = Field(default=None, description="A name to address it by (SendMessage).")
    team_name: str | None = Field(default=None, description="Team to spawn a teammate into.")
    mode: AgentMode | None = Field(default=None, description="Permission mode for the agent.")
    isolation: Literal["worktree", "remote"] | None = Field(
        default=None, description="Run in an isolated git worktree, or remotely."
    )
    cwd: str | None = Field(default=None, description="Absolute working directory.")
    max_tokens_budget: int | None = Field(
        default=None, ge=1, description="Token budget of the agent and the agents it starts."
    )
    max_tool_calls: int | None = Field(
        default=None, ge=1, description="Tool-call budget of the agent and the agents it starts."
    )
    max_seconds: float | None = Field(
        default=None, gt=0, description="Wall-time budget of the agent and its agents, seconds."
    )

    @model_validator(mode="after")
    def _exclusive(self) -> AgentInput:
        if self.cwd is not None and self.isolation is not None:
            raise ValueError("cwd and isolation cannot be used together")
        return self
