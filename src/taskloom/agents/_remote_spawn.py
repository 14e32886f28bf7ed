"""Spawning a subagent on the Ray cluster (see :mod:`taskloom.remote`): a ``remote_agent``.

The spawner hands over a request whose isolation is ``remote``; here it becomes a
:class:`~taskloom.remote.spec.RemoteSpec` (its model, mode and settings as a local agent's
would be) started through the session's :class:`~taskloom.remote.service.RemoteAgents`,
made on the first such spawn: Ray is imported only then. A resumed session follows again the
remote agents its last process left running.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom.agents.spawn_request import (
    SpawnRequest,
    SpawnResult,
    auto_background_ms,
    launched,
)
from taskloom.errors import ToolError
from taskloom.tasks.narrow import as_remote_agent
from taskloom.tasks.types import TaskStatus, TaskType

if TYPE_CHECKING:
    from taskloom.agents.budget import Budgets
    from taskloom.agents.builder import AgentBuilder
    from taskloom.agents.definition import AgentDefinition
    from taskloom.remote.cluster import Cluster
    from taskloom.remote.service import RemoteAgents
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tools.base import ToolContext


def _as_flag_json(definition: AgentDefinition) -> str:
    """One definition as ``--agents`` JSON, for a worker that has not its file."""
    entry: dict[str, Any] = {
        "description": definition.when_to_use,
        "prompt": definition.system_prompt or definition.when_to_use,
    }
    if definition.tools is not None:
        entry["tools"] = list(definition.tools)
    if definition.disallowed_tools:
        entry["disallowedTools"] = list(definition.disallowed_tools)
    if definition.model:
        entry["model"] = definition.model
    if definition.permission_mode:
        entry["permissionMode"] = definition.permission_mode
    if definition.max_turns:
        entry["maxTurns"] = definition.max_turns
    return json.dumps({definition.agent_type: entry})


class RemoteSpawner:
    """Starts the session's remote subagents, and follows again those a resumed one left."""

    def __init__(self, runtime: TaskRuntime, builder: AgentBuilder, budgets: Budgets) -> None:
        """Spawn on ``runtime``'s session, configured as ``builder`` says, within ``budgets``.

        Args:
            runtime: The session's runtime.
            builder: The catalog, the session's model, policy and settings.
            budgets: What each agent subtree spends (the spawner's).
        """
        self.runtime = runtime
        self.builder = builder
        self.budgets = budgets
        #: The session's remote agents, made on the first (Ray is imported only then).
        self.agents: RemoteAgents | None = None

    def _service(self, cluster: Cluster | None = None) -> RemoteAgents:
        from taskloom.remote.service import RemoteAgents

        if self.agents is None:
            self.agents = RemoteAgents(self.runtime, self.builder.settings, cluster)
        return self.agents

    def cluster(self) -> Cluster:
        """The session's Ray cluster (one connection per process: ``bridge:`` uses it too)."""
        return self._service().cluster

    def share(self, cluster: Cluster) -> bool:
        """Use ``cluster``, already made (the ``bridge:`` listener's), and close it at the end.

        Returns:
            Whether it was taken (False: the session made its own already).
        """
        return self._service(cluster).cluster is cluster

    async def spawn(
        self,
        request: SpawnRequest,
        ctx: ToolContext,
        definition: AgentDefinition,
        *,
        background: bool,
    ) -> SpawnResult:
        """Start ``request`` on the cluster; in the foreground, wait until it moves to the back.

        Raises:
            ToolError: A cwd was given; the agent did not complete.
        """
        from taskloom.remote.spec import RemoteSpec, settings_json
        from taskloom.settings import MAX_OUTPUT_TOKENS_SETTING

        if request.cwd:
            raise ToolError("A remote agent works on a copy of the project: omit cwd.")
        remote = self._service()
        settings = self.builder.settings
        policy = self.builder.policy
        spec = RemoteSpec(
            description=request.description,
            prompt=request.prompt,
            agent_type=definition.agent_type,
            agents=None if definition.source == "built-in" else _as_flag_json(definition),
            # Its own model, else its definition's, else its parent's (as a local agent).
            model=request.model
            or (definition.model if definition.model not in (None, "inherit") else None)
            or self.builder.model_name,
            mode=request.mode or (str(policy.mode) if policy is not None else None),
            skip_permissions=policy is not None and str(policy.mode) == "bypassPermissions",
            # Its responses are capped as the session's are, whatever set the cap here.
            settings=settings_json(
                {**settings, MAX_OUTPUT_TOKENS_SETTING: self.builder.max_tokens}
            ),
            name=request.name,
        )
        budget = request.budget(definition)
        agent_id, connected = await remote.spawn(
            spec,
            owner=ctx.owner,
            tool_use_id=ctx.tool_use_id,
            cwd=ctx.cwd,
            background=background,
            meter_for=lambda task_id: self.budgets.open(task_id, ctx.owner, budget),
        )
        driver = remote.runs[agent_id].driver
        if driver is not None:
            driver.add_done_callback(lambda _: self.budgets.close(agent_id))
        output_file = str(self.runtime.output_path(agent_id))
        started = launched(request, agent_id, definition.agent_type, output_file)
        if connected.started_locally and len(remote.runs) == 1:
            started.extra["cluster"] = (
                f"no Ray cluster was configured (RAY_ADDRESS, setting remote.address): a local "
                f"Ray was started for this session in {connected.seconds:.1f} s"
            )
            note = remote.policy_note(connected)
            if note:
                started.extra["cluster"] += f"; {note}"
        if background:
            return started
        run = remote.runs[agent_id]
        assert run.driver is not None
        limit_ms = auto_background_ms(settings)
        done, _ = await asyncio.wait([run.driver], timeout=limit_ms / 1000 if limit_ms else None)
        if not done:
            self.runtime.update(agent_id, lambda s: s.replace(is_backgrounded=True))
            return started
        state = as_remote_agent(self.runtime.get(agent_id))
        assert state is not None  # its record stays (evicted, it is read back)
        if state.status != TaskStatus.COMPLETED:
            raise ToolError(f"Agent {agent_id} {state.status.value}: {state.error or ''}")
        return SpawnResult(
            status="completed",
            agent_id=agent_id,
            agent_type=definition.agent_type,
            description=request.description,
            prompt=request.prompt,
            output_file=state.output_file,
            content=state.result or "",
            total_tool_uses=state.tool_uses,
            total_tokens=state.total_tokens,
            duration_ms=int(((state.end_time or time.time()) - state.start_time) * 1000),
            extra=started.extra,
        )

    def take_up(self, cwd: Path) -> None:
        """A resumed session: follow again the detached remote agents its last process left."""
        left = [
            remote
            for remote in map(as_remote_agent, self.runtime.list(types=[TaskType.REMOTE_AGENT]))
            if remote is not None and not remote.terminal
        ]
        if not left:
            return
        self._service().take_up(left, cwd)

    async def close(self) -> None:
        """Let go of the Ray cluster, if a remote agent was started."""
        if self.agents is not None:
            await self.agents.close()
