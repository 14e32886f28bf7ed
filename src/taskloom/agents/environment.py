"""Where a subagent works: its directory, its git worktree, its own MCP servers.

An :class:`AgentEnvironment` is set up when the agent is spawned and torn down when its run
ends, or at once when the agent could not start. :class:`Environments` holds what every agent
of the session shares (the hooks, the session's MCP servers and their configuration) and makes
one environment per agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom.errors import ToolError

if TYPE_CHECKING:
    from taskloom.agents.definition import AgentDefinition
    from taskloom.agents.run import Finisher
    from taskloom.hooks import HookConfig
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tools.base import Tool


class Environments:
    """What the session's agents share for their environments."""

    def __init__(
        self,
        runtime: TaskRuntime,
        *,
        hooks: HookConfig | None = None,
        mcp: Any = None,
        mcp_config: dict[str, Any] | None = None,
    ) -> None:
        """Environments of ``runtime``'s agents.

        Args:
            runtime: The session's runtime.
            hooks: The session's hooks (the WorktreeCreate and WorktreeRemove ones run).
            mcp: The session's MCP manager (for ``requiredMcpServers``), if any.
            mcp_config: The configured MCP servers (an agent's ``mcpServers`` may name them).
        """
        self.runtime = runtime
        self.hooks = hooks
        self.mcp = mcp
        self.mcp_config = mcp_config or {}

    def for_agent(
        self,
        agent_id: str,
        definition: AgentDefinition,
        *,
        base: Path,
        confine_to: Path | None,
        isolation: str | None,
    ) -> AgentEnvironment:
        """The environment of a new agent, not set up yet (see :class:`AgentEnvironment`)."""
        return AgentEnvironment(
            self, agent_id, definition, base=base, confine_to=confine_to, isolation=isolation
        )

    async def create_worktree(self, agent_id: str, base: Path) -> Any:
        """A fresh worktree off the parent's HEAD; failing is an error, never the main tree.

        Raises:
            ToolError: The worktree could not be made.
        """
        from taskloom.worktrees import WorktreeError, create_worktree

        try:
            return await create_worktree(
                base,
                f"agent-{agent_id[:8]}",
                hooks=self.hooks,
                session_id=self.runtime.session_id,
            )
        except WorktreeError as exc:
            raise ToolError(f"Worktree isolation failed, the agent was not started: {exc}") from exc

    def worktree_finisher(self, worktree: Any) -> Finisher:
        """Removes ``worktree`` if nothing would be lost, else keeps it and says where."""

        async def finish_worktree() -> tuple[dict[str, Any], str]:
            from taskloom.worktrees import WorktreeError, finish

            try:
                outcome = await finish(
                    worktree, hooks=self.hooks, session_id=self.runtime.session_id
                )
            except WorktreeError as exc:
                return (
                    {"worktree_path": str(worktree.path), "worktree_branch": worktree.branch},
                    f"\n\n[worktree kept at {worktree.path} (branch {worktree.branch}): {exc}]",
                )
            if not outcome.kept:
                return {}, ""
            return (
                {"worktree_path": str(outcome.path), "worktree_branch": outcome.branch},
                f"\n\n[worktree kept: {outcome.path} on branch {outcome.branch}]\n"
                f"{outcome.diffstat}".rstrip(),
            )

        return finish_worktree


class AgentEnvironment:
    """One agent's environment, set up in two steps and torn down once.

    :meth:`isolate` waits for the MCP servers the agent requires and makes its worktree (a
    failure leaves nothing behind); the caller then registers the task, and :meth:`start`
    starts the agent's own MCP servers in its directory. If anything fails after
    :meth:`isolate`, :meth:`abandon` undoes it all. Otherwise the run tears it down at the
    end of each run: its :attr:`finisher` (the worktree) and :meth:`aclose` (its servers,
    which a resumed run does not get back).
    """

    def __init__(
        self,
        shared: Environments,
        agent_id: str,
        definition: AgentDefinition,
        *,
        base: Path,
        confine_to: Path | None,
        isolation: str | None,
    ) -> None:
        """Prepare (not set up) the environment of ``agent_id``.

        Args:
            shared: What the session's agents share.
            agent_id: The agent's task id.
            definition: Its agent type.
            base: Where it works unless isolated (its worktree is made from here).
            confine_to: Where its file tools stay unless isolated (its parent's confinement).
            isolation: ``worktree`` or None (a remote agent has no local environment).
        """
        self.shared = shared
        self.agent_id = agent_id
        self.definition = definition
        self.isolation = isolation
        #: Where the agent works.
        self.cwd = base
        #: The directory its file tools may not leave, if any.
        self.confine_to = confine_to
        #: Its git worktree, once made.
        self.worktree: Any = None
        #: Its own MCP servers, once started (None when it has none of its own).
        self.mcp: Any = None

    @property
    def finisher(self) -> Finisher | None:
        """What finishes its worktree at the end of a run (None when not isolated)."""
        return None if self.worktree is None else self.shared.worktree_finisher(self.worktree)

    def tools(self) -> Sequence[Tool[Any]]:
        """The tools of its own MCP servers."""
        return self.mcp.tools() if self.mcp is not None else ()

    async def isolate(self) -> None:
        """Wait for the required MCP servers, then make its worktree if it is isolated.

        Raises:
            ToolError: A required server is missing, the isolation is not available, or the
                worktree could not be made. Nothing is left to undo.
        """
        await self._require_mcp()
        if self.isolation == "worktree":
            self.worktree = await self.shared.create_worktree(self.agent_id, self.cwd)
            self.cwd = self.confine_to = self.worktree.path

    async def start(self) -> None:
        """Start the agent's own MCP servers (stopped when its run ends), if it has any.

        A server the session already runs is not started twice: the agent uses the session's.
        """
        definition = self.definition
        if not definition.mcp_servers:
            return
        from taskloom.mcp.config import resolve_servers
        from taskloom.mcp.manager import McpManager

        shared = self.shared
        servers = resolve_servers(
            definition.mcp_servers, shared.mcp_config, f"agent {definition.agent_type}"
        )
        running = set(shared.mcp.status()) if shared.mcp is not None else set()
        servers = {name: cfg for name, cfg in servers.items() if name not in running}
        if not servers:
            return
        manager = McpManager(servers, cwd=self.cwd)
        await manager.start()
        self.mcp = manager

    async def abandon(self) -> None:
        """Undo the set-up of an agent that did not start: its servers, then its worktree."""
        await self.aclose()
        if self.worktree is not None:
            await self.shared.worktree_finisher(self.worktree)()

    async def aclose(self) -> None:
        """Stop its own MCP servers (nothing if it has none)."""
        if self.mcp is not None:
            await self.mcp.aclose()

    async def _require_mcp(self) -> None:
        """Wait (at most 30 s) for the MCP servers the definition requires."""
        patterns = list(self.definition.required_mcp_servers)
        if not patterns:
            return
        mcp = self.shared.mcp
        missing = await mcp.wait_for(patterns, timeout=30.0) if mcp else patterns
        if missing:
            raise ToolError(
                f"Agent '{self.definition.agent_type}' requires MCP servers matching: "
                f"{', '.join(missing)}"
            )
