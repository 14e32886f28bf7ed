"""Spawning, addressing and resuming subagents: what the Agent and SendMessage tools call.

One ``AgentService`` per session. It knows the agent catalog, how to build a subagent's engine
(its model, tools, prompt, permissions) and the runs it started. The names agents are given
live in the runtime's directory (the store), and SendMessage text in its mailbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._aio import finish_despite_cancel
from taskloom.agents.filter import filter_tools
from taskloom.agents.fork import NESTED_FORK_ERROR, fork_enabled, fork_messages, is_fork
from taskloom.agents.run import AgentRun, sidechain_path
from taskloom.engine import Engine, EngineConfig
from taskloom.errors import ToolError
from taskloom.prompts import environment
from taskloom.tasks.agent import failed_to_start, resumed
from taskloom.tasks.types import AgentTaskState, TaskStatus, TaskType
from taskloom.tools.base import FileState, Tool, ToolContext
from taskloom.transcript import load_messages, repair

if TYPE_CHECKING:
    from taskloom.agents.definition import AgentDefinition
    from taskloom.agents.loader import AgentCatalog
    from taskloom.hooks import HookConfig
    from taskloom.models.base import Model
    from taskloom.permissions import PermissionPolicy
    from taskloom.tasks.runtime import TaskRuntime

#: A foreground agent still running after this long moves to the background.
DEFAULT_AUTO_BACKGROUND_MS = 120_000
#: Most characters of a foreground agent's answer returned inline.
MAX_RESULT_CHARS = 100_000
#: Permission modes from loosest to strictest.
_STRICTNESS = {"bypassPermissions": 0, "acceptEdits": 1, "default": 2, "dontAsk": 3, "plan": 4}

AGENT_SUFFIX = """You are a subagent: you were given one task by another agent, which sees only your
final message. Do the task with your tools, then answer with a complete, self-contained report
of what you found or did (paths, commands, results). Do not ask questions: no one can answer."""


@dataclass
class SpawnRequest:
    """What the Agent tool was asked."""

    description: str
    prompt: str
    subagent_type: str | None = None
    model: str | None = None
    run_in_background: bool = False
    name: str | None = None
    mode: str | None = None
    cwd: str | None = None
    isolation: str | None = None


@dataclass
class SpawnResult:
    """What the Agent tool reports."""

    status: str  # completed | async_launched
    agent_id: str
    agent_type: str
    description: str
    prompt: str
    output_file: str
    content: str = ""
    total_tool_uses: int = 0
    total_tokens: int = 0
    duration_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def auto_background_ms(settings: dict[str, Any]) -> int:
    """``TASKLOOM_AUTO_BACKGROUND_MS``, else the ``autoBackgroundMs`` setting, else 2 min."""
    raw = os.environ.get("TASKLOOM_AUTO_BACKGROUND_MS") or settings.get("autoBackgroundMs")
    try:
        return DEFAULT_AUTO_BACKGROUND_MS if raw is None else max(0, int(raw))
    except (TypeError, ValueError):
        return DEFAULT_AUTO_BACKGROUND_MS


class AgentService:
    """The session's subagents."""

    def __init__(
        self,
        runtime: TaskRuntime,
        *,
        catalog: AgentCatalog,
        model: Model,
        model_name: str,
        tools: Callable[[], Sequence[Tool[Any]]],
        settings: dict[str, Any],
        policy: PermissionPolicy | None,
        cwd: Path,
        resolve_model: Callable[[str], Model] | None = None,
        hooks: HookConfig | None = None,
        mcp: Any = None,
        mcp_config: dict[str, Any] | None = None,
    ) -> None:
        """Serve subagents built from ``catalog`` on ``runtime``.

        Args:
            runtime: The session's runtime.
            catalog: The agent definitions.
            model: The parent's model (``inherit``, and every scripted run, use it).
            model_name: The parent's model id.
            tools: Returns every tool a subagent could be given (filtered per agent).
            settings: Effective settings.
            policy: The session's permission policy (a subagent may change its mode).
            cwd: The session's working directory.
            resolve_model: Builds a model for an alias or id (``sonnet``, ``claude-…``).
            hooks: The session's hooks (an agent's own hooks are added for its runs).
            mcp: The session's MCP manager (for ``requiredMcpServers``), if any.
            mcp_config: The configured MCP servers (an agent's ``mcpServers`` may name them).
        """
        self.runtime = runtime
        self._resume_locks: dict[str, asyncio.Lock] = {}
        self.catalog = catalog
        self.model = model
        self.model_name = model_name
        self.tools = tools
        self.settings = settings
        self.policy = policy
        self.cwd = cwd
        self.resolve_model = resolve_model
        self.hooks = hooks
        self.mcp = mcp
        self.mcp_config = mcp_config or {}
        self.runs: dict[str, AgentRun] = {}
        self.allow_nesting = bool(settings.get("allowNestedAgents", False))
        self._models: dict[str, Model] = {}

    # -- building -----------------------------------------------------------------------------

    def definition(self, subagent_type: str | None) -> AgentDefinition:
        """The definition for ``subagent_type`` (default ``general-purpose``)."""
        name = subagent_type or "general-purpose"
        found = self.catalog.get(name)
        if found is None:
            known = ", ".join(sorted(self.catalog.names()))
            raise ToolError(f"Agent type '{name}' not found. Available agents: {known}")
        return found

    def _model_for(self, spec: str | None) -> tuple[Model, str]:
        if not spec or spec == "inherit" or self.resolve_model is None:
            return self.model, self.model_name
        if spec not in self._models:
            self._models[spec] = self.resolve_model(spec)
        model = self._models[spec]
        return model, model.name

    def _hooks_for(self, definition: AgentDefinition) -> HookConfig | None:
        if not definition.hooks:
            return self.hooks
        from taskloom.hooks import HookConfig

        own = HookConfig.parse(definition.hooks, source=f"agent {definition.agent_type}")
        return self.hooks.merged(own) if self.hooks else own

    def _policy_for(self, requested: str | None, defined: str | None) -> PermissionPolicy | None:
        """The agent's policy: its file's mode, then a mode the model asked for if stricter.

        A definition file is the user's word and may loosen the mode; the model may only
        tighten it — otherwise ``mode: bypassPermissions`` would escape every rule.
        """
        if self.policy is None:
            return None
        policy = self.policy.with_mode(defined) if defined else self.policy
        if requested and _STRICTNESS.get(requested, -1) > _STRICTNESS.get(str(policy.mode), -1):
            policy = policy.with_mode(requested)
        return policy

    def build_engine(
        self,
        agent_id: str,
        definition: AgentDefinition,
        request: SpawnRequest,
        *,
        is_async: bool,
        files: FileState | None,
        messages: list[Any] | None = None,
        extra_tools: Sequence[Tool[Any]] = (),
    ) -> Engine:
        """The engine of one subagent: its model, tools, prompt and permissions."""
        model, model_name = self._model_for(request.model or definition.model)
        cwd = Path(request.cwd) if request.cwd else self.cwd
        offered: dict[str, Tool[Any]] = {}
        for tool in [*self.tools(), *extra_tools]:
            offered.setdefault(tool.name, tool)  # the API refuses duplicate tool names
        tools = filter_tools(
            list(offered.values()),
            allowed=definition.tools,
            disallowed=definition.disallowed_tools,
            is_async=is_async,
            allow_nesting=self.allow_nesting,
        )
        prompt = "\n\n".join(
            p for p in (definition.system_prompt.strip(), AGENT_SUFFIX, environment(cwd)) if p
        )
        config = EngineConfig(
            model=model,
            model_name=model_name,
            system_prompt=prompt,
            tools=tools,
            owner=agent_id,
            agent_id=agent_id,
            cwd=cwd,
            max_turns=definition.max_turns,
            permissions=self._policy_for(request.mode, definition.permission_mode),
            headless=True,
            wait_for_tasks=False,
            settings=self.settings,
            metadata={"agent_type": definition.agent_type, "description": request.description},
            hooks=self._hooks_for(definition),
            session_id=self.runtime.session_id,
            transcript_path=str(sidechain_path(self.runtime, agent_id)),
        )
        return Engine(config, self.runtime, messages, files.clone() if files else None)

    # -- spawning -----------------------------------------------------------------------------

    async def spawn(self, request: SpawnRequest, ctx: ToolContext) -> SpawnResult:
        """Start a subagent; wait for it in the foreground unless it goes to the background.

        Raises:
            ToolError: Unknown agent type, a taken name, a bad cwd.
        """
        if request.subagent_type is None and fork_enabled(self.settings):
            return await self._fork(request, ctx)
        definition = self.definition(request.subagent_type)
        if request.name and self.runtime.directory.resolve(request.name) is not None:
            raise ToolError(f"An agent named {request.name!r} already exists")
        if request.cwd and not Path(request.cwd).is_dir():
            raise ToolError(f"cwd {request.cwd!r} is not a directory")
        is_async = request.run_in_background or definition.background
        await self._require_mcp(definition)
        agent_id = self.runtime.new_id(TaskType.LOCAL_AGENT)
        isolation = request.isolation or definition.isolation
        # The child starts where its parent works now (a worktree it entered, or its own).
        base = Path(request.cwd) if request.cwd else ctx.cwd
        parent_engine: Engine | None = ctx.engine
        confine = parent_engine.config.confine_to if parent_engine is not None else None
        worktree = None
        if isolation == "remote":
            raise ToolError("isolation 'remote' is not available yet in this version")
        if isolation == "worktree":
            worktree = await self._create_worktree(agent_id, base)
            base, confine = worktree.path, worktree.path
        request = dataclasses.replace(request, cwd=str(base))
        self._register(agent_id, request, ctx, definition.agent_type, background=is_async)
        own_mcp = None
        try:
            own_mcp = await self._start_agent_mcp(definition, base)
            engine = self.build_engine(
                agent_id,
                definition,
                request,
                is_async=is_async,
                files=ctx.files,
                extra_tools=own_mcp.tools() if own_mcp is not None else (),
            )
        except BaseException as exc:
            # Nothing ran: undo what was set up, and end the task (the caller gets the error).
            await finish_despite_cancel(self._abandon(agent_id, worktree, own_mcp, exc))
            raise
        engine.config.confine_to = confine
        run = AgentRun(
            self.runtime,
            agent_id,
            engine,
            on_end=(lambda _run: own_mcp.aclose()) if own_mcp is not None else None,
        )
        if worktree is not None:
            run.worktree = worktree
            run.finalize = self._worktree_finisher(worktree)
        if request.name and not self.runtime.directory.bind(request.name, agent_id):
            # Taken meanwhile by a concurrent spawn: this one does not start.
            taken = ToolError(f"An agent named {request.name!r} already exists")
            await finish_despite_cancel(self._abandon(agent_id, worktree, own_mcp, taken))
            raise taken
        self.runs[agent_id] = run
        self.runtime.attach_handle(agent_id, run)
        driver = run.start(request.prompt)
        if is_async:
            return self._launched(agent_id, definition, request)
        return await self._wait_foreground(run, driver, definition, request)

    def _register(
        self,
        agent_id: str,
        request: SpawnRequest,
        ctx: ToolContext,
        agent_type: str,
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
            return self._launched(run.agent_id, definition, request)
        # Its end is recorded by the run itself (even a kill): wait without inheriting a
        # cancellation that was aimed at the child.
        await asyncio.wait([driver])
        state = self.runtime.get(run.agent_id)
        assert isinstance(state, AgentTaskState)
        if state.status != TaskStatus.COMPLETED:
            raise ToolError(f"Agent {run.agent_id} {state.status.value}: {state.error or ''}")
        text = state.result or ""
        if len(text) > MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + f"\n[truncated; full answer in {state.output_file}]"
        extra: dict[str, Any] = {}
        if state.worktree_path:
            extra = {"worktreePath": state.worktree_path, "worktreeBranch": state.worktree_branch}
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

    async def _abandon(
        self, agent_id: str, worktree: Any, own_mcp: Any, exc: BaseException
    ) -> None:
        if own_mcp is not None:
            await own_mcp.aclose()
        if worktree is not None:
            await self._worktree_finisher(worktree)()
        error = f"could not start: {exc}" if str(exc) else "could not start"
        self.runtime.update(agent_id, lambda s: failed_to_start(s, error))

    async def _require_mcp(self, definition: AgentDefinition) -> None:
        """Wait (at most 30 s) for the MCP servers the definition requires."""
        patterns = list(definition.required_mcp_servers)
        if not patterns:
            return
        missing = await self.mcp.wait_for(patterns, timeout=30.0) if self.mcp else patterns
        if missing:
            raise ToolError(
                f"Agent '{definition.agent_type}' requires MCP servers matching: "
                f"{', '.join(missing)}"
            )

    async def _start_agent_mcp(self, definition: AgentDefinition, cwd: Path) -> Any:
        """Start the agent's own MCP servers (stopped when its run ends); None if none.

        A server the session already runs is not started twice: the agent uses the session's.
        """
        if not definition.mcp_servers:
            return None
        from taskloom.mcp.config import resolve_servers
        from taskloom.mcp.manager import McpManager

        servers = resolve_servers(
            definition.mcp_servers, self.mcp_config, f"agent {definition.agent_type}"
        )
        running = set(self.mcp.status()) if self.mcp is not None else set()
        servers = {name: cfg for name, cfg in servers.items() if name not in running}
        if not servers:
            return None
        manager = McpManager(servers, cwd=cwd)
        await manager.start()
        return manager

    async def _create_worktree(self, agent_id: str, base: Path) -> Any:
        """A fresh worktree off the parent's HEAD; failing is an error, never the main tree."""
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

    def _worktree_finisher(self, worktree: Any) -> Any:
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

    async def _fork(self, request: SpawnRequest, ctx: ToolContext) -> SpawnResult:
        """A background copy of the calling agent, with the directive appended."""
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
        self._register(agent_id, request, ctx, "fork", background=True)
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
            transcript_path=str(sidechain_path(self.runtime, agent_id)),
            cwd=ctx.cwd,
            cwd_source=None,  # fixed where the parent was: it must not follow the parent
        )
        messages = fork_messages(parent.messages, request.prompt)
        engine = Engine(config, self.runtime, messages, parent.files.clone())
        run = AgentRun(self.runtime, agent_id, engine)
        self.runs[agent_id] = run
        if request.name:
            self.runtime.directory.bind(request.name, agent_id, replace=True)
        self.runtime.attach_handle(agent_id, run)
        run.start(None)
        return SpawnResult(
            status="async_launched",
            agent_id=agent_id,
            agent_type="fork",
            description=request.description,
            prompt=request.prompt,
            output_file=str(self.runtime.output_path(agent_id)),
        )

    def _launched(
        self, agent_id: str, definition: AgentDefinition, request: SpawnRequest
    ) -> SpawnResult:
        return SpawnResult(
            status="async_launched",
            agent_id=agent_id,
            agent_type=definition.agent_type,
            description=request.description,
            prompt=request.prompt,
            output_file=str(self.runtime.output_path(agent_id)),
        )

    # -- messages -----------------------------------------------------------------------------

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
            # An isolated agent goes on isolated: in its kept worktree, or in a fresh one if
            # the last was removed as clean.
            worktree = run.worktree
            if not Path(worktree.path).exists():
                worktree = await self._create_worktree(agent_id, Path(worktree.repo_root))
                run.worktree = worktree
                run.engine.config.cwd = worktree.path
                run.engine.config.confine_to = worktree.path
            run.finalize = self._worktree_finisher(worktree)
        elif run is None and state.worktree_path:
            raise ToolError(
                f"Agent {agent_id} worked in the worktree {state.worktree_path} in an earlier "
                "process; start a new agent there instead of resuming it."
            )
        if run is not None:
            # A run killed mid-call left tool calls unanswered: the API would refuse it.
            run.recorder.repair()
        if run is None:  # not started by this process: rebuild it from its transcript
            definition = self.definition(state.agent_type)
            messages, _ = repair(load_messages(sidechain_path(self.runtime, agent_id)))
            request = SpawnRequest(description=state.description, prompt=state.prompt)
            engine = self.build_engine(
                agent_id, definition, request, is_async=True, files=None, messages=messages
            )
            run = AgentRun(self.runtime, agent_id, engine)
            self.runs[agent_id] = run
        self.runtime.reopen_owner(agent_id)
        # Back to running under the same id (the runtime merges what must survive).
        self.runtime.register(resumed(state))
        self.runtime.attach_handle(agent_id, run)
        run.resume()
