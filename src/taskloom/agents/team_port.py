"""What the agent tools ask of a session's team (its implementation lives in ``taskloom.teams``).

Agent with a ``name`` spawns a teammate through it, and SendMessage hands it the messages
between members. The team package builds on the agents, so the agents see it only through
this protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from taskloom.tools.base import ToolContext


class TeamPort(Protocol):
    """The session's team as the Agent and SendMessage tools use it."""

    def is_lead(self, ctx: ToolContext) -> bool:
        """Whether the caller is the session's main thread (the lead)."""
        ...

    def handles(self, to: str, ctx: ToolContext) -> bool:
        """Whether a message to ``to`` from the caller is the team's to deliver."""
        ...

    async def send(
        self,
        to: str,
        message: str | dict[str, Any],
        ctx: ToolContext,
        summary: str | None,
        *,
        notify_when_idle: bool = False,
    ) -> tuple[str, dict[str, Any]]:
        """Deliver a member's message; the tool's text and data.

        ``notify_when_idle`` (the lead's): the recipients' next idle notices wake the lead.

        Raises:
            ToolError: No such member, a protocol message out of place.
        """
        ...

    async def resume_members(self) -> list[str]:
        """Bring back the teammates an earlier process of the session ran; their names."""
        ...

    async def spawn(
        self,
        *,
        name: str,
        prompt: str,
        team_name: str | None,
        model: str | None,
        mode: str | None,
        agent_type: str,
        cwd: str,
        isolation: str | None = None,
    ) -> str:
        """Spawn teammate ``name`` into the lead's team; the result the lead is shown.

        It is built from ``agent_type`` as a subagent of that type is; ``isolation``
        ``worktree`` gives it a worktree of its own.

        Raises:
            ToolError: A bad or taken name, an unknown type, an isolation that failed.
        """
        ...
