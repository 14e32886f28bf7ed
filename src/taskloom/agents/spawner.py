"""Spawning subagents: what the Agent tool asks for, decided, registered and started.

A :class:`Spawner` checks a :class:`SpawnRequest`, registers the agent's task, sets up its
environment (:mod:`taskloom.agents.environment`), has its engine configured
(:mod:`taskloom.agents.builder`) and starts its run; in the foreground it waits for the answer
until the agent moves to the background. A fork (``forkSubagent``, no agent type) copies the
calling agent instead; an agent whose isolation is ``remote`` runs on the Ray cluster
(:mod:`taskloom.agents._remote_spawn`). What is asked and answered is in
:mod:`taskloom.agents.spawn_request`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._aio import finish_despite_cancel
from taskloom.agents.budget import Budget, Budgets
from taskloom.agents.spawn_request import SpawnRequest, SpawnResult, auto_background_ms, launched
from taskloom.errors import ToolError
from taskloom.signals import emit
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.narrow import as_agent
from taskloom.tasks.types import AgentTaskState, TaskStatus, TaskType

if TYPE_CHECKING:
    from taskloom.agents._remote_spawn import RemoteSpawner
    from taskloom.agents.builder import AgentBuilder
    from taskloom.agents.definition import AgentDefinition
    from taskloom.agents.environment import AgentEnvironment, Environments
    from taskloom.agents.limits import Slot, SpawnLimits
    from taskloom.agents.run import AgentRun
    from taskloom.engine import Engine
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tools.base import ToolContext

#: Most characters of a foreground agent's answer returned inline.
MAX_RESULT_CHARS = 100_000
#: How long an agent told to stop while it ends with its answer has to end on its own.
FINISH_GRACE_S = 5.0


class Spawner:
    """Starts the session's subagents and keeps their runs."""

    def __init__(
        self,
        runtime: TaskRuntime,
        builder: AgentBuilder,
        environments: Environments,
        runs: dict[str, AgentRun],
        *,
        session_budget: Budget | None = None,
        on_session_spent: Callable[[str], None] | None = None,
    ) -> None:
        """Spawn on ``runtime``, adding each run to ``runs`` (shared with the messenger).

        Args:
            runtime: The session's runtime (its directory holds the agents' names).
            builder: Configures each agent's engine.
            environments: Sets up each agent's directory, worktree and MCP servers.
            runs: The runs started in this process, by agent id.
            session_budget: The whole session's budget (flag, then settings), if it has one.
            on_session_spent: Told why once the session's budget ran out (the main thread
                ends its run).
        """
        self.runtime = runtime
        self.builder = builder
        self.environments = environments
        self.runs = runs
        #: What each agent subtree spends, against its budgets.
        self.budgets = Budgets(
            runtime.session_id, self._stop_saying, runtime.usage, on_spend=self._spent
        )
        if session_budget:
            self.budgets.limit_session(session_budget)  # before anything is spent
        # Both made at first use (a spawn, a resume): a session that starts no agent never
        # loads their modules.
        self._remote: RemoteSpawner | None = None
        self._limits: SpawnLimits | None = None
        self._on_session_spent = on_session_spent

    @property
    def remote(self) -> RemoteSpawner:
        """The session's remote agents (Ray is imported only when the first starts)."""
        if self._remote is None:
            from taskloom.agents._remote_spawn import RemoteSpawner

            self._remote = RemoteSpawner(self.runtime, self.builder, self.budgets)
        return self._remote

    @property
    def limits(self) -> SpawnLimits:
        """How many agents may run, and how deep they may nest: this process's count.

        A pane teammate runs a process of its own, with a count of its own.
        """
        if self._limits is None:
            from taskloom.agents.limits import SpawnLimits

            self._limits = SpawnLimits(self.runtime, lambda: self.settings)
        return self._limits

    @property
    def settings(self) -> dict[str, Any]:
        """Effective settings."""
        return self.builder.settings

    async def spawn(self, request: SpawnRequest, ctx: ToolContext) -> SpawnResult:
        """Start a subagent; wait for it in the foreground unless it goes to the background.

        Raises:
            ToolError: Unknown agent type, a taken name, a bad cwd, a spawning limit reached
                (:mod:`taskloom.agents.limits`).
        """
        spent = self.budgets.exhausted(ctx.owner)
        if spent is not None:
            raise ToolError(f"No agent can be started: {spent}.")
        slot = self.limits.admit(ctx.owner)  # before any await: parallel spawns count it
        try:
            return await self._spawn(request, ctx, slot)
        finally:
            slot.release()  # did not register (it failed, or a remote agent ran)

    async def _spawn(self, request: SpawnRequest, ctx: ToolContext, slot: Slot) -> SpawnResult:
        # What running an agent takes is loaded at the first spawn: off the start-up path.
        from taskloom.agents.builder import DEFAULT_TYPE
        from taskloom.agents.fork import fork_enabled
        from taskloom.agents.run import AgentRun

        # With forks on, naming no type forks the caller; but not where an omitted type
        # means another default (a coordinator's workers).
        forks = fork_enabled(self.settings) and self.builder.default_type == DEFAULT_TYPE
        if request.subagent_type is None and forks:
            return await self._fork(request, ctx, slot)
        definition = self.builder.definition(request.subagent_type)
        if request.name and self.runtime.directory.resolve(request.name) is not None:
            raise ToolError(f"An agent named {request.name!r} already exists")
        if request.cwd and not Path(request.cwd).is_dir():
            raise ToolError(f"cwd {request.cwd!r} is not a directory")
        is_async = request.run_in_background or definition.background
        if (request.isolation or definition.isolation) == "remote":
            return await self.remote.spawn(request, ctx, definition, background=is_async)
        agent_id = self.runtime.new_id(TaskType.LOCAL_AGENT)
        # The child starts where its parent stands now (its shell's directory, in a worktree
        # it entered or its own); from then on each moves its own shell only.
        parent: Engine | None = ctx.engine
        env = self.environments.for_agent(
            agent_id,
            definition,
            base=Path(request.cwd) if request.cwd else ctx.cwd,
            confine_to=parent.config.confine_to if parent is not None else None,
            isolation=request.isolation or definition.isolation,
        )
        await env.isolate()
        self._register(agent_id, request, ctx, definition.agent_type, slot, background=is_async)
        self._selected(agent_id, ctx, definition, is_async=is_async)
        try:
            await env.start()
            files = ctx.files.clone() if ctx.files else None
            config = self.builder.config(
                agent_id,
                definition,
                description=request.description,
                cwd=env.cwd,
                is_async=is_async,
                model=request.model,
                mode=request.mode,
                confine_to=env.confine_to,
                extra_tools=env.tools(),
            )
            # Counted under its caller's agent id: a teammate's owner is its task id, but
            # its budget (and its ledger account) is under its agent id.
            caller = ctx.agent_id or ctx.owner
            meter = self.budgets.open(agent_id, caller, request.budget(definition))
            # Unless confined to its worktree, its shell may go where its parent's may.
            roots = ctx.workdir.roots if ctx.workdir is not None else ()
            # Its rules are its parent's (its own worktree's when it has one).
            base = None if env.worktree is not None else ctx.rules_base
            config = dataclasses.replace(config, meter=meter, cwd_roots=roots, rules_base=base)
            if ctx.engine is not None:  # its hooks name the session's transcript, as there
                config = dataclasses.replace(
                    config, transcript_path=ctx.engine.config.transcript_path
                )
            run = AgentRun(
                self.runtime,
                agent_id,
                config,
                files=files,
                on_end=(lambda _run: env.aclose()) if env.mcp is not None else None,
                worktree=env.worktree,
                finalize=env.finisher,
            )
        except BaseException as exc:
            # Nothing ran: undo what was set up, and end the task (the caller gets the error).
            await finish_despite_cancel(self._abandon(agent_id, env, exc))
            raise
        if request.name and not self.runtime.directory.bind(request.name, agent_id):
            # Taken meanwhile by a concurrent spawn: this one does not start.
            taken = ToolError(f"An agent named {request.name!r} already exists")
            await finish_despite_cancel(self._abandon(agent_id, env, taken))
            raise taken
        self.runs[agent_id] = run
        self.runtime.attach_handle(agent_id, run)
        driver = run.start(self.builder.first_prompt(definition, request.prompt))
        self._watch(run, driver)
        if is_async:
            return self._launched(agent_id, definition.agent_type, request)
        return await self._wait_foreground(run, driver, definition, request)

    def _register(
        self,
        agent_id: str,
        request: SpawnRequest,
        ctx: ToolContext,
        agent_type: str,
        slot: Slot,
        *,
        background: bool,
    ) -> None:
        self.runtime.register(
            AgentTaskState(
                id=agent_id,
                status=TaskStatus.RUNNING,
                description=request.description,
                owner=ctx.owner,
                tool_use_id=ctx.tool_use_id,
                output_file=str(self.runtime.output_path(agent_id)),
                is_backgrounded=background,
                prompt=request.prompt,
                agent_type=agent_type,
                name=request.name,
            )
        )
        slot.release()  # counted as a live agent from now on

    async def _abandon(self, agent_id: str, env: AgentEnvironment, exc: BaseException) -> None:
        from taskloom.tasks.agent import failed_to_start

        self.budgets.close(agent_id)
        await env.abandon()
        error = f"could not start: {exc}" if str(exc) else "could not start"
        self.runtime.update(agent_id, lambda s: failed_to_start(s, error))
        self._terminated(agent_id, "")

    async def _wait_foreground(
        self,
        run: AgentRun,
        driver: asyncio.Task[None],
        definition: AgentDefinition,
        request: SpawnRequest,
    ) -> SpawnResult:
        limit_ms = auto_background_ms(self.settings)
        # A cancelled parent takes its foreground child with it; a timeout backgrounds it.
        end = await run.handoff.wait(
            self.runtime, run.agent_id, driver, limit_ms / 1000 if limit_ms else None
        )
        if end.backgrounded:
            return self._launched(run.agent_id, definition.agent_type, request)
        # Its end is recorded by the run itself (even a kill): wait without inheriting a
        # cancellation that was aimed at the child.
        await asyncio.wait([driver])
        state = as_agent(self.runtime.get(run.agent_id))
        assert state is not None  # its record stays (evicted, it is read back)
        if state.status != TaskStatus.COMPLETED:
            # A kill by TaskStop or from an editor records no reason of its own.
            why = state.stopped_reason or state.error or "stopped before it finished"
            raise ToolError(f"Agent {run.agent_id} {state.status.value}: {why}")
        text = state.result or ""
        if len(text) > MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + f"\n[truncated; full answer in {state.output_file}]"
        extra: dict[str, Any] = {}
        if state.worktree_path:
            extra = {"worktreePath": state.worktree_path, "worktreeBranch": state.worktree_branch}
        if state.partial:  # stopped at its maxTurns: its answer says how to continue it
            extra["partial"] = True
        return SpawnResult(
            status="completed",
            agent_id=run.agent_id,
            agent_type=definition.agent_type,
            description=request.description,
            prompt=request.prompt,
            output_file=state.output_file,
            content=text,
            total_tool_uses=state.tool_uses,
            total_tokens=state.total_tokens,
            duration_ms=int(((state.end_time or time.time()) - state.start_time) * 1000),
            extra=extra,
        )

    async def _fork(self, request: SpawnRequest, ctx: ToolContext, slot: Slot) -> SpawnResult:
        """A background copy of the calling agent, with the directive appended."""
        from taskloom.agents.fork import NESTED_FORK_ERROR, fork_messages, is_fork
        from taskloom.agents.run import AgentRun

        parent: Engine | None = ctx.engine
        if parent is None:
            raise ToolError("Fork is not available here: no parent conversation to copy.")
        if is_fork(parent.messages):
            raise ToolError(NESTED_FORK_ERROR)
        if request.isolation or request.cwd:
            raise ToolError(
                "A fork works in its parent's directory: omit isolation and cwd, or give a "
                "subagent_type to start a separate agent with them."
            )
        agent_id = self.runtime.new_id(TaskType.LOCAL_AGENT)
        self._register(agent_id, request, ctx, "fork", slot, background=True)
        emit(
            "agent_tool_selected",
            session_id=self.runtime.session_id,
            agent_id=agent_id,
            parent_id=ctx.owner,
            agent_type="fork",
            model=parent.config.model_name or "",
            source="fork",
            is_fork=True,
            is_async=True,
        )
        # Same prompt, tools and model as the parent: the request prefix stays identical.
        config = dataclasses.replace(
            parent.config,
            owner=agent_id,
            agent_id=agent_id,
            wait_for_tasks=False,
            max_turns=None,
            inbox=None,
            metadata={**parent.config.metadata, "agent_type": "fork", "fork": True},
            session_id=self.runtime.session_id,
            transcript_path=parent.config.transcript_path,  # its own is agent_transcript_path
            cwd=ctx.cwd,
            meter=self.budgets.open(agent_id, ctx.owner, Budget()),
            cwd_source=None,  # fixed where the parent was: it must not follow the parent
            cwd_roots=ctx.workdir.roots if ctx.workdir is not None else parent.config.cwd_roots,
            rules_base=ctx.rules_base or parent.config.rules_root(),
        )
        messages = fork_messages(parent.messages, request.prompt)
        run = AgentRun(
            self.runtime, agent_id, config, messages=messages, files=parent.files.clone()
        )
        self.runs[agent_id] = run
        if request.name:
            self.runtime.directory.bind(request.name, agent_id, replace=True)
        self.runtime.attach_handle(agent_id, run)
        self._watch(run, run.start(None))
        return self._launched(agent_id, "fork", request)

    def take_up_remote(self, cwd: Path) -> None:
        """A resumed session: follow again the detached remote agents its last process left."""
        if self._remote is None and not self.runtime.list(types=[TaskType.REMOTE_AGENT]):
            return  # none to follow (every start asks): the remote spawner is not made
        self.remote.take_up(cwd)

    def resumed(self, run: AgentRun, driver: asyncio.Task[None]) -> None:
        """A resumed agent (SendMessage) is watched and counted again, as a spawned one is."""
        self._watch(run, driver)

    def _watch(self, run: AgentRun, driver: asyncio.Task[None]) -> None:
        """Watch its progress (if the settings say) and its calls, until it ends.

        Its budgets end then too.
        """
        from taskloom.agents.watch import watch_agent, watch_stuck

        agent_id = run.agent_id
        unwatch = watch_agent(
            self.runtime,
            agent_id,
            run.engine,
            self.settings,
            self._stop_saying,
            below=lambda: self._progress_below(agent_id),
        )
        run.on_tool = watch_stuck(self.runtime, agent_id, self.settings, self._stop_saying)

        def ended(_: object) -> None:
            current = self.runs.get(agent_id)
            if current is not None and current.driver is not driver:
                return  # resumed since (maybe moved to a new run): that end is the one to tell
            self.budgets.close(agent_id)
            if unwatch is not None:
                unwatch()
            self._terminated(agent_id, run.engine.config.model_name or "")

        driver.add_done_callback(ended)

    def _terminated(self, agent_id: str, model: str) -> None:
        """Emit ``agent_tool_terminated`` for an agent that has ended (its span ends)."""
        state = as_agent(self.runtime.get(agent_id))
        if state is not None:
            end = state.end_time or time.time()
            emit(
                "agent_tool_terminated",
                session_id=self.runtime.session_id,
                agent_id=agent_id,
                agent_type=state.agent_type,
                model=model,
                duration_ms=int(max(0.0, end - state.start_time) * 1000),
                is_async=state.is_backgrounded,
                reason=state.stopped_reason or state.status.value,
                total_tokens=state.total_tokens,
                tool_uses=state.tool_uses,
            )

    def _selected(
        self, agent_id: str, ctx: ToolContext, definition: AgentDefinition, *, is_async: bool
    ) -> None:
        emit(
            "agent_tool_selected",
            session_id=self.runtime.session_id,
            agent_id=agent_id,
            parent_id=ctx.owner,
            agent_type=definition.agent_type,
            model=definition.model or "inherit",
            source=definition.source,
            is_fork=False,
            is_async=is_async,
        )

    def _progress_below(self, agent_id: str) -> int:
        """What the agents ``agent_id`` started (and theirs) and their commands did.

        The progress of its live agents, and the output its and their live commands wrote:
        a long command that prints is at work.
        """
        live = [s for s in self.runtime.list(types=[TaskType.LOCAL_AGENT]) if not s.terminal]
        total, owners = 0, {agent_id}
        while True:  # the live ones only (what is in memory): this runs on each check
            found = [s for s in live if s.owner in owners and s.id not in owners]
            if not found:
                break
            for state in found:
                owners.add(state.id)
                run = self.runs.get(state.id)
                total += run.engine.progress if run is not None else 0
        for task in self.runtime.list():
            kind = kind_of(task)
            if task.terminal or not kind.is_process:
                continue
            if any(kind.started_by(task, o) for o in owners):
                with contextlib.suppress(OSError):
                    total += self.runtime.output_path(task.id).stat().st_size
        return total

    def _spent(self, agent_id: str, tokens: int, tool_calls: int, usd: float) -> None:
        """An agent's subtree totals grew: its state shows them (live usage).

        Also once it has ended: what its agents were answered while they were being stopped
        with it counts (its figures are what its budgets counted).
        """
        self.runtime.update(
            agent_id,
            lambda s: (
                s.replace(subtree_tokens=tokens, subtree_tool_uses=tool_calls, subtree_cost_usd=usd)
                if as_agent(s) is not None
                else s
            ),
        )

    async def _stop_saying(self, agent_id: str, why: str) -> None:
        """Stop ``agent_id`` (and its subtree), recording why (a budget ran out, a stall).

        The session's id stands for the whole session: every agent is stopped, and the main
        thread is told (``on_session_spent``) to end its run.
        """
        if agent_id == self.runtime.session_id:
            # Every agent: the session's, its teammates' and theirs (a stopped owner's
            # agents are stopped with it; stopping one twice is harmless).
            live = [s.id for s in self.runtime.list() if kind_of(s).is_agent and not s.terminal]
            if self._on_session_spent is not None:
                self._on_session_spent(why)
            await asyncio.gather(*(self._stop_saying(a, why) for a in live), return_exceptions=True)
            return
        run = self.runs.get(agent_id)
        if run is not None and _finishing(run, self.runtime):
            # Its last answer ended its work: it ends on its own, with that answer, asking
            # for nothing more (mail that comes now is not answered). One that does not end
            # soon (a SubagentStop hook that hangs) is stopped all the same.
            run.engine.halt(why)
            driver = run.driver
            if driver is None or driver.done():
                return
            done, _ = await asyncio.wait({driver}, timeout=FINISH_GRACE_S)
            if done:
                return
        self.runtime.update(agent_id, lambda s: s if s.terminal else s.replace(stopped_reason=why))
        await self.runtime.kill(agent_id)

    async def close_remote(self) -> None:
        """Once the session's tasks are stopped: let go of the Ray cluster and budget clocks."""
        await self.budgets.aclose()
        if self._remote is not None:
            await self._remote.close()

    def _launched(self, agent_id: str, agent_type: str, request: SpawnRequest) -> SpawnResult:
        return launched(request, agent_id, agent_type, str(self.runtime.output_path(agent_id)))


def _finishing(run: AgentRun, runtime: TaskRuntime) -> bool:
    """Whether it is ending its run.

    Its last answer asked for no tool, and it waits for no task of its own (one that does is
    stopped: it would go on when they end).
    """
    messages = run.engine.messages
    if not messages or messages[-1].role != "assistant" or messages[-1].tool_uses():
        return False
    return not runtime.has_live_tasks(run.agent_id)
