"""The composition root: one place that builds a session from :class:`Options`.

Print mode, the demo and library users all start here::

    async with Harness(Options(model="sonnet", cwd=".")) as h:
        async for event in h.run("fix the failing test"):
            ...

:meth:`Harness.start` reads the settings, resolves the model, builds the permission policy,
starts the task runtime (which claims the session) and the MCP servers, loads hooks and agent
definitions, assembles the tools and the main session, in that order; what it built is one
:class:`Started`, and :meth:`Harness.aclose` undoes it in reverse. Nothing is built anywhere
else — the agents' part (:mod:`taskloom.agents.compose`), the team's
(:mod:`taskloom.teams.compose`) and the main thread's configuration
(:mod:`taskloom.main_thread`) are put together by their own modules, called from here — and
every part is given what it needs as it is made: nothing changes another part's configuration
after it was built.

The harness composes and does nothing else: what a run does beyond one pass of the
conversation (structured-output reminders, the fallback model) is the conversation layer's
:class:`~taskloom.conversation.policy.TurnPolicy`; print mode's ``system/init`` payload is
print mode's, and a teammate's process is served by :mod:`taskloom.teams.serve`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._aio import finish_despite_cancel
from taskloom.options import Options as Options  # its home; re-exported for callers
from taskloom.started import (
    Base,
    Started,
    bridge_listener,
    compose,
    engine_observer,
    mcp_servers_config,
    peer_listener,
    session_model,
    session_runtime,
)
from taskloom.tasks.ids import new_uuid

if TYPE_CHECKING:
    from taskloom.agents.dream import Dreamer
    from taskloom.agents.service import AgentService
    from taskloom.engine import Compacted, EngineEvent
    from taskloom.messages import Message
    from taskloom.models.base import Model
    from taskloom.permissions import PermissionPolicy
    from taskloom.plugins import PluginSet
    from taskloom.session import Session
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tasks.types import TaskState
    from taskloom.teams.service import TeamService
    from taskloom.tools.base import Tool

log = logging.getLogger(__name__)


class Harness:
    """One session, built from :class:`Options`; use as ``async with``.

    Raises (from :meth:`start`):
        UsageError: Broken settings, a bad rule, mode or model spec.
        UserError: No model configured, an unknown session to resume, the session in use.
    """

    def __init__(self, options: Options | None = None, **overrides: Any) -> None:
        """Prepare a session; nothing starts before :meth:`start`.

        Args:
            options: The options; ``overrides`` replace single fields of them.
            **overrides: Fields of :class:`Options`, e.g. ``model="sonnet"``.
        """
        base = options if options is not None else Options()
        self.options = opts = Options(**{**base.__dict__, **overrides})
        self.cwd = Path(opts.cwd).absolute()
        # Known now, except for a continued conversation (found when the session starts).
        forked = opts.fork_session and bool(opts.resume or opts.continue_session)
        self._session_id = opts.session_id or (None if forked else opts.resume) or new_uuid()
        self._resuming: str | None = opts.resume
        self._stack = contextlib.AsyncExitStack()
        self._state: Started | None = None
        self._claimed = False
        self._ended = False
        self._dreamer: Dreamer | None = None
        self._dream_warned = False

    @property
    def session_id(self) -> str:
        """The session's id (known before :meth:`start`)."""
        return self._session_id

    @property
    def claimed(self) -> bool:
        """Whether the session exists in the store, claimed by a runtime of this harness.

        Also true when a later step of :meth:`start` failed and gave the session back.
        """
        return self._claimed

    @property
    def started(self) -> Started:
        """Everything the session is made of (after :meth:`start`)."""
        if self._state is None:
            raise RuntimeError("the harness is not started")
        return self._state

    @property
    def runtime(self) -> TaskRuntime:
        """The session's task runtime."""
        return self.started.runtime

    @property
    def session(self) -> Session:
        """The main thread."""
        return self.started.session

    @property
    def model(self) -> Model:
        """The session's own model (:meth:`set_model` may send requests to another)."""
        return self.started.model

    @property
    def plugins(self) -> PluginSet:
        """The session's plugins (``plugin_dirs``, ``enabledPlugins``) and what was skipped."""
        return self.started.plugins

    @property
    def policy(self) -> PermissionPolicy:
        """The session's permission policy."""
        return self.started.policy

    @property
    def agents(self) -> AgentService:
        """The subagent service."""
        return self.started.agents

    @property
    def settings(self) -> dict[str, Any]:
        """The effective settings."""
        return self.started.settings

    @property
    def tools(self) -> list[Tool[Any]]:
        """The main thread's tools."""
        return self.started.tools

    @property
    def team(self) -> TeamService | None:
        """The team the main thread leads or serves in, when teams are on."""
        return self.started.team

    @property
    def coordinator(self) -> bool:
        """Whether the main thread only orchestrates workers."""
        return self.started.coordinator

    @property
    def listen_path(self) -> Path | None:
        """The Unix socket other sessions reach this one at (``uds:<path>``), if listening."""
        listener = self.started.listener
        return listener.path if listener is not None else None

    @property
    def bridge_address(self) -> str | None:
        """Where sessions on the Ray cluster reach this one (``bridge:<id>``), if listening."""
        bridge = self.started.bridge
        return bridge.address if bridge is not None else None

    @property
    def model_name(self) -> str:
        """The id of the model the main thread asks now (:meth:`set_model` changes it)."""
        return self.session.engine.config.model_name or self.started.switch.name

    async def __aenter__(self) -> Harness:
        """Start the session (see :meth:`start`)."""
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """End the session (see :meth:`aclose`)."""
        await self.aclose()

    async def start(self) -> None:
        """Build and start everything the session needs; undone in full if a step fails."""
        if self._state is not None:
            return  # started already
        from taskloom.agents.coordinator import coordinator_enabled
        from taskloom.mcp.startup import session_servers
        from taskloom.models.caching import check_cache_settings
        from taskloom.permissions import PermissionPolicy
        from taskloom.plugins import load_plugins
        from taskloom.settings import find_project_root, load_settings, max_output_tokens

        opts = self.options
        opts.check_session()
        settings = load_settings(
            self.cwd, opts.settings, skip_broken=opts.skip_broken_settings,
            sources=opts.setting_sources,
        )  # fmt: skip
        max_tokens = max_output_tokens(settings, opts.max_output_tokens)
        plugins = load_plugins(opts.plugin_dirs, settings, cwd=self.cwd)
        check_cache_settings(settings)
        coordinator = coordinator_enabled(opts.coordinator, settings)
        model = session_model(opts, settings)
        # Closed last, once the runtime has stopped every agent: the models agents' aliases
        # named and the ones the program chose (added as they are made), then the session's.
        models = contextlib.AsyncExitStack()
        if model is not opts.model:  # a model object passed in stays the caller's
            models.push_async_callback(model.aclose)
        self._stack.push_async_callback(models.aclose)
        try:
            policy = PermissionPolicy.from_settings(
                settings, mode=opts.permission_mode, allowed_tools=list(opts.allowed_tools),
                disallowed_tools=list(opts.disallowed_tools),
                project_root=find_project_root(self.cwd), skip_permissions=opts.skip_permissions,
                add_dirs=opts.add_dirs,
            )  # fmt: skip
            self._find_conversation()
            runtime = session_runtime(
                self._session_id, self.cwd, settings, persist=opts.persist_session
            )
            observer = engine_observer(opts, settings, runtime.session_id, model, self._stack)
            await self._stack.enter_async_context(runtime)
            self._claimed = True
            mcp_config = mcp_servers_config(opts, self.cwd, plugins)
            servers = session_servers(
                mcp_config, cwd=self.cwd, program=opts.mcp_caller, store=runtime.store,
                session_id=runtime.session_id,
            )  # fmt: skip
            mcp = await self._stack.enter_async_context(servers)
            # Before the session: what arrives meanwhile waits in the mailbox.
            listener = await peer_listener(opts, settings, runtime, self._stack)
            bridge = await bridge_listener(opts, settings, runtime, self._stack)
            base = Base(
                opts, self.cwd, settings, max_tokens, coordinator, runtime, model, policy, mcp,
                mcp_config, listener, observer, self._resuming, plugins, bridge,
            )  # fmt: skip
            self._state = state = compose(base, self._stack, models)
            # A resumed session's detached remote agents are followed again.
            state.agents.spawner.take_up_remote(self.cwd)
            if state.team is not None:
                # Panes a crashed session left are swept; a resumed session's teammates (of
                # the process that died) go on.
                await state.team.open()
        except BaseException:
            self._state = None
            await finish_despite_cancel(self._stack.aclose())
            raise

    def _find_conversation(self) -> None:
        """Which recorded conversation this session continues (see ``find_conversation``)."""
        from taskloom.session import find_conversation

        opts = self.options
        found = find_conversation(
            self.cwd.resolve(),  # as sessions are recorded
            self._session_id,
            session_id=opts.session_id,
            resume=opts.resume,
            continue_session=opts.continue_session,
            fork=opts.fork_session,
        )
        if found is not None:
            self._session_id = self._resuming = found

    def write_turn_records(self) -> None:
        """Write now the methods of the records every turn makes.

        A record class's methods are written at its first use (:mod:`taskloom._dataclass`),
        which otherwise falls to the first turn, some milliseconds into its answer: about
        8 ms. A front end that waits for its first prompt may call this first, the ACP
        server does (before it answers ``session/new``). The session model's own records
        (its stream parser's) are written too.
        """
        from taskloom._dataclass import realize, realize_module

        for cls in _turn_records():
            realize(cls)
        realize_module(type(self.started.model).__module__)

    def run(self, prompt: str | Message) -> AsyncGenerator[EngineEvent, None]:
        """Run one prompt on the main thread; typed events, the last is ``Finished``.

        A headless run does not end while a task it owns runs or a notification is pending:
        each delivery starts a new turn. With ``json_schema``, a run that ends without an
        accepted StructuredOutput call is reminded to make one, a few times (see
        :attr:`structured_output`); with ``fallback_model``, a request that failed in a way
        worth it goes on with that model (see :class:`~taskloom.conversation.policy.TurnPolicy`).
        """
        return self.started.turns.run(prompt)

    async def compact(self, instructions: str | None = None) -> Compacted:
        """Compact the main thread's conversation now, between runs (``/compact``).

        The model summarizes the conversation; the session goes on from the summary and its
        last turns (see :mod:`taskloom.context.compaction`). A run's prompt ``/compact
        [instructions]`` does the same.

        Raises:
            CompactionRefused: A PreCompact hook blocked it, or there is nothing to compact.
            ModelError: The summary request failed.
        """
        return await self.started.session.compact(instructions)

    @property
    def structured_output(self) -> dict[str, Any] | None:
        """The answer the last run gave through StructuredOutput (``json_schema``), if any."""
        return self._state.turns.structured_output if self._state is not None else None

    @property
    def wants_structured_output(self) -> bool:
        """Whether runs must answer through StructuredOutput (``json_schema`` was given)."""
        return self.options.json_schema is not None

    def set_model(self, spec: str | None) -> str:
        """Send the main thread's next requests to the model ``spec`` names; returns its id.

        None goes back to the session's own model. Models made here are closed with the
        session.

        Raises:
            UsageError: A malformed spec or unknown provider prefix.
            UserError: The provider is not configured.
        """
        return self.started.switch.choose(spec, self.settings)

    def set_permission_mode(self, mode: str) -> None:
        """Run the main thread's next calls under ``mode`` (``default``, ``plan``, ...).

        Raises:
            UsageError: Not a permission mode.
        """
        self.policy.switch_mode(mode)

    def tasks(self, *, include_evicted: bool = False) -> list[TaskState]:
        """The session's tasks (shells, agents), live."""
        return self.runtime.list(include_evicted=include_evicted)

    async def stop_task(self, task_id: str) -> TaskState:
        """Stop a task and everything it started (the kill is verified); returns its state."""
        return await self.runtime.kill(task_id)

    @property
    def dreamer(self) -> Dreamer:
        """The session's dreams (made, and its module imported, when first asked for)."""
        if self._dreamer is None:
            from taskloom.agents.dream import Dreamer
            from taskloom.agents.memory import memory_project

            agents = self.agents
            self._dreamer = Dreamer(
                self.runtime, agents.builder, agents.spawner.budgets, memory_project(self.cwd)
            )
        return self._dreamer

    def dream(self) -> str:
        """Start a dream now (``/dream``, a ``dream`` request); its task id.

        Raises:
            UsageError: One is already at work, no agent memory to tidy, or a dream setting
                is invalid.
        """
        return self.dreamer.start("manual")

    def session_idle(self, idle: bool) -> None:
        """A front end says the session went idle (True) or a turn starts (False).

        With ``autoDream`` on, a dream starts once the session has stayed idle for
        ``dreamIdleSeconds``; otherwise nothing is armed (nor imported). An invalid dream
        setting is warned of once, and no dream starts by itself.
        """
        if self._dreamer is None and not self.settings.get("autoDream"):
            return
        from taskloom.errors import UsageError

        try:
            if idle:
                self.dreamer.idle()
            else:
                self.dreamer.active(turn=True)
        except UsageError as exc:
            if not self._dream_warned:
                self._dream_warned = True
                log.warning("no dream starts by itself: %s", exc)

    async def send_message(self, to: str, message: str) -> str:
        """Send ``message`` to an agent (by id or name) as the main thread; returns the reply.

        A running agent sees it at its next tool boundary; a finished one is resumed.
        """
        from taskloom.tools.base import ToolContext

        ctx = ToolContext(self.runtime, self.session_id, self.cwd, settings=self.settings)
        return await self.agents.send(to, message, ctx)

    async def end(self, reason: str = "other") -> None:
        """Run the SessionEnd hooks, once (:meth:`aclose` does it if nobody did before).

        Errors of the hooks are not raised: the session is ending whatever they say.
        """
        if self._state is not None and not self._ended:
            self._ended = True
            with contextlib.suppress(Exception):
                await finish_despite_cancel(self._state.session.end(reason))

    async def aclose(self) -> None:
        """End the session: the reverse of :meth:`start`.

        Closes the transcript, the MCP servers, the model and the runtime (its tasks end by
        their exit policy).
        """
        await self.end()
        if self._dreamer is not None:
            self._dreamer.close()  # nothing starts now; a dream at work ends with the tasks
        await finish_despite_cancel(self._stack.aclose())


async def run(prompt: str, **options: Any) -> str:
    """Run one prompt to its end and return the final answer.

    Args:
        prompt: The prompt.
        **options: Fields of :class:`Options` (``model``, ``cwd``, ``allowed_tools``, ...).

    Raises:
        UsageError: Bad options.
        ModelError: The model provider failed.
    """
    from taskloom.engine import Finished

    answer = ""
    async with Harness(**options) as harness:
        try:
            async for event in harness.run(prompt):
                if isinstance(event, Finished):
                    answer = event.result
        finally:
            await harness.end()
    return answer


def _turn_records() -> tuple[type, ...]:
    """The record classes a turn makes.

    Its events, the model's request and stream, a tool call's context, verdict and result,
    the usage counted, and how a turn of the ACP server or of stream-json input ends.
    """
    from taskloom import events, gate
    from taskloom.context.window import Fullness
    from taskloom.conversation.turn_driver import TurnEnd
    from taskloom.hooks.config import ToolCall
    from taskloom.models import base
    from taskloom.tasks.usage import Figures, Tokens
    from taskloom.tools.base import ToolContext, ToolResult

    return (
        events.UserTurn, events.AssistantTurn, events.ToolDone, events.Finished, Fullness,
        base.ModelRequest, base.ToolSpec, base.TextDelta, base.ThinkingDelta, base.ToolUseStart,
        base.ToolInputDelta, base.MessageComplete, ToolContext, ToolCall, gate.Verdict,
        ToolResult, Tokens, Figures, TurnEnd,
    )  # fmt: skip
