"""The session's subagents, as the Agent and SendMessage tools see them.

One ``AgentService`` per session; :mod:`taskloom.agents.compose` builds its parts and it composes
them, each the owner of one concern, so that a spawn walks down them once:

- :mod:`taskloom.agents.builder`: the catalog, and each agent's engine configuration;
- :mod:`taskloom.agents.environment`: each agent's directory, worktree and MCP servers;
- :mod:`taskloom.agents.spawner`: deciding, registering and starting an agent (or a fork);
- :mod:`taskloom.agents.messaging`: SendMessage delivery and resuming a stopped agent.

The names agents are given live in the runtime's directory (the store), and SendMessage text
in its mailbox.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskloom.agents.messaging import Delivery, Messenger
from taskloom.agents.spawn_request import SpawnRequest, SpawnResult
from taskloom.agents.spawner import Spawner

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from taskloom.agents.budget import Budget
    from taskloom.agents.builder import AgentBuilder
    from taskloom.agents.definition import AgentDefinition
    from taskloom.agents.environment import Environments
    from taskloom.agents.loader import AgentCatalog
    from taskloom.agents.run import AgentRun
    from taskloom.agents.team_port import TeamPort
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tools.base import ToolContext

__all__ = ["AgentService", "Delivery", "SpawnRequest", "SpawnResult"]


class AgentService:
    """The session's subagents."""

    def __init__(
        self,
        runtime: TaskRuntime,
        builder: AgentBuilder,
        environments: Environments,
        *,
        cwd: Path,
        coordinator: bool = False,
        listen_path: Path | None = None,
        bridge_address: str | None = None,
        teams: TeamPort | None = None,
        session_budget: Budget | None = None,
        on_session_spent: Callable[[str], None] | None = None,
    ) -> None:
        """Serve the subagents of ``runtime``'s session.

        Args:
            runtime: The session's runtime.
            builder: The catalog, and how each agent's engine is configured.
            environments: How each agent's directory, worktree and MCP servers are set up.
            cwd: The session's working directory (where an agent rebuilt from its transcript
                works).
            coordinator: The main thread coordinates the agents (its messages to them are
                signed ``coordinator``).
            listen_path: This session's socket for other sessions (``--listen``), if any.
            bridge_address: Its ``bridge:`` address on the Ray cluster, if it listens there.
            teams: The session's team, when teams are on: Agent with a name spawns a
                teammate, and messages between members go through it.
            session_budget: The whole session's budget, if it has one.
            on_session_spent: Told why once the session's budget ran out.
        """
        self.runtime = runtime
        self.builder = builder
        self.teams = teams
        #: The runs started in this process, by agent id.
        self.runs: dict[str, AgentRun] = {}
        self.spawner = Spawner(
            runtime,
            builder,
            environments,
            self.runs,
            session_budget=session_budget,
            on_session_spent=on_session_spent,
        )
        self.coordinator = coordinator
        # A resumed agent is counted and watched as a spawned one is: the spawner's.
        self.messenger = Messenger(
            runtime,
            builder,
            environments,
            self.runs,
            cwd=cwd,
            coordinator=coordinator,
            listen_path=listen_path,
            teams=teams,
            budgets=self.spawner.budgets,
            on_resumed=self.spawner.resumed,
            limits=lambda: self.spawner.limits,  # made at the first resume
            bridge_address=bridge_address,
            # One connection to Ray per process: the remote agents' (see RemoteSpawner.share).
            bridge_cluster=lambda: self.spawner.remote.cluster(),  # Ray only if it is asked
        )

    @property
    def catalog(self) -> AgentCatalog:
        """The agent definitions."""
        return self.builder.catalog

    @property
    def settings(self) -> dict[str, Any]:
        """Effective settings."""
        return self.builder.settings

    def definition(self, subagent_type: str | None) -> AgentDefinition:
        """The definition for ``subagent_type`` (default ``general-purpose``).

        Raises:
            ToolError: No such agent type.
        """
        return self.builder.definition(subagent_type)

    async def spawn(self, request: SpawnRequest, ctx: ToolContext) -> SpawnResult:
        """Start a subagent; wait for it in the foreground unless it goes to the background.

        Raises:
            ToolError: Unknown agent type, a taken name, a bad cwd.
        """
        return await self.spawner.spawn(request, ctx)

    def resolve(self, to: str, sender: str | None = None) -> str:
        """The agent id ``to`` names (an id or a spawn name).

        Raises:
            ToolError: No such agent; the message lists whom ``sender`` may address.
        """
        return self.messenger.resolve(to, sender)

    async def send(
        self, to: str, message: str, ctx: ToolContext, *, summary: str | None = None
    ) -> str:
        """Deliver ``message`` to agent ``to``; a stopped agent is resumed with it.

        Raises:
            ToolError: No such agent, or it cannot be resumed.
            TaskError: ``ctx.owner`` may not message it.
        """
        return await self.messenger.send(to, message, ctx, summary=summary)

    async def deliver(
        self,
        to: str,
        message: str | dict[str, Any],
        ctx: ToolContext,
        *,
        summary: str | None = None,
        notify_when_idle: bool = False,
    ) -> Delivery:
        """Deliver ``message`` (text or a structured object) to ``to``, as SendMessage does.

        ``to`` is an agent's id or name, ``*`` (every running agent ``ctx.owner`` may
        message), the session id (the main thread, from an agent) or ``uds:<socket path>``
        (another taskloom process on this machine) or ``bridge:<session id>`` (one on the Ray
        cluster). ``notify_when_idle`` (a team lead's, to
        teammates): their next idle notices wake the lead.

        Raises:
            ToolError: An invalid structured message, an unknown recipient, nobody to
                broadcast to, an unreachable peer, an agent that cannot be resumed.
            TaskError: ``ctx.owner`` may not message that agent.
        """
        return await self.messenger.deliver(
            to, message, ctx, summary=summary, notify_when_idle=notify_when_idle
        )
