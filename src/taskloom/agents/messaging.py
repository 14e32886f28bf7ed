"""Messages to subagents: addressed by id or name, delivered by mailbox, resuming if stopped.

A :class:`Messenger` resolves a recipient through the runtime's directory of names, commits
the message to the runtime's mailbox, and resumes a stopped agent on it: the run this process
started, or one rebuilt from its transcript (an agent of an earlier process).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from taskloom.agents.run import AgentRun, sidechain_path
from taskloom.errors import ToolError
from taskloom.tasks.agent import resumed
from taskloom.tasks.types import AgentTaskState
from taskloom.transcript import load_messages, repair

if TYPE_CHECKING:
    from taskloom.agents.builder import AgentBuilder
    from taskloom.agents.environment import Environments
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tools.base import ToolContext


class Messenger:
    """Delivers SendMessage text to the session's agents."""

    def __init__(
        self,
        runtime: TaskRuntime,
        builder: AgentBuilder,
        environments: Environments,
        runs: dict[str, AgentRun],
        *,
        cwd: Path,
    ) -> None:
        """Deliver on ``runtime`` to the agents of ``runs`` (shared with the spawner).

        Args:
            runtime: The session's runtime (its directory and mailbox).
            builder: Rebuilds an agent of an earlier process from its definition.
            environments: Makes a fresh worktree for an isolated agent whose last one is gone.
            runs: The runs started in this process, by agent id (a resume may replace one).
            cwd: The session's working directory (where a rebuilt agent works).
        """
        self.runtime = runtime
        self.builder = builder
        self.environments = environments
        self.runs = runs
        self.cwd = cwd
        self._resume_locks: dict[str, asyncio.Lock] = {}

    def resolve(self, to: str) -> str:
        """The agent id ``to`` names (an id or a spawn name).

        Raises:
            ToolError: No such agent; the message lists the known names.
        """
        names = self.runtime.directory.entries()
        if to in names:
            return names[to]
        state = self.runtime.get(to)
        if isinstance(state, AgentTaskState):
            return to
        known = sorted(names) or ["(none)"]
        ids = sorted(self.runs)
        raise ToolError(
            f"No agent named or with id {to!r}. Known names: {', '.join(known)}"
            + (f"; ids: {', '.join(ids)}" if ids else "")
        )

    async def send(
        self, to: str, message: str, ctx: ToolContext, *, summary: str | None = None
    ) -> str:
        """Deliver ``message`` through the agent's mailbox; a stopped agent is resumed with it.

        Committed first; a running agent takes it at its next tool boundary, a stopped one
        (even one that died with an earlier process) is resumed on it and older unseen ones.
        """
        agent_id = self.resolve(to)
        self.runtime.authorize(agent_id, ctx.owner)
        run = self.runs.get(agent_id)
        if run is not None and run.finishing and run.driver is not None:
            # It has taken its last input and is wrapping up: resume it once it has ended.
            await asyncio.wait([run.driver], timeout=60)
        # One sender at a time decides whether to resume: a second one, arriving while the
        # first resumes, must find the agent running (and queue), not resume it again.
        async with self._resume_locks.setdefault(agent_id, asyncio.Lock()):
            return await self._deliver(agent_id, ctx, message, summary)

    async def _deliver(
        self, agent_id: str, ctx: ToolContext, message: str, summary: str | None
    ) -> str:
        state = self.runtime.authorize(agent_id, ctx.owner)
        assert isinstance(state, AgentTaskState)
        letter = self.runtime.mailbox.post(
            recipient=agent_id,
            sender=ctx.owner,
            kind="message",
            body=message,
            priority="next",
            summary=summary or "",
            commit=True,
        )
        if not state.terminal:
            return (
                f"Message queued for agent {agent_id}; it will see it at its next tool "
                "boundary, before its next model request."
            )
        try:
            await self._resume(agent_id, state)
        except BaseException:
            # The sender is told it failed: the message must not turn up at a later resume.
            self.runtime.mailbox.withdraw([letter.id])
            raise
        return (
            f"Agent {agent_id} had {state.status.value}; it was resumed in the background with "
            "your message. You will be notified when it finishes."
        )

    async def _resume(self, agent_id: str, state: AgentTaskState) -> None:
        run = self.runs.get(agent_id)
        if run is not None and run.driver is not None and not run.driver.done():
            # Still cleaning up after its last run (killing its shells): let that finish first,
            # or it would close the files and the owner of the new run.
            await asyncio.wait([run.driver], timeout=60)
        if run is not None and run.worktree is not None:
            # An isolated agent goes on isolated: in its kept worktree (each run finishes it
            # again), or in a fresh one if the last was removed as clean.
            if not Path(run.worktree.path).exists():
                worktree = await self.environments.create_worktree(
                    agent_id, Path(run.worktree.repo_root)
                )
                run = self.runs[agent_id] = run.moved(
                    worktree.path,
                    worktree=worktree,
                    finalize=self.environments.worktree_finisher(worktree),
                )
        elif run is None and state.worktree_path:
            raise ToolError(
                f"Agent {agent_id} worked in the worktree {state.worktree_path} in an earlier "
                "process; start a new agent there instead of resuming it."
            )
        if run is not None:
            # A run killed mid-call left tool calls unanswered: the API would refuse it.
            run.recorder.repair()
        if run is None:  # not started by this process: rebuild it from its transcript
            definition = self.builder.definition(state.agent_type)
            messages, _ = repair(load_messages(sidechain_path(self.runtime, agent_id)))
            config = self.builder.config(
                agent_id, definition, description=state.description, cwd=self.cwd, is_async=True
            )
            run = AgentRun(self.runtime, agent_id, config, messages=messages)
            self.runs[agent_id] = run
        self.runtime.reopen_owner(agent_id)
        # Back to running under the same id (the runtime merges what must survive).
        self.runtime.register(resumed(state))
        self.runtime.attach_handle(agent_id, run)
        run.resume()
