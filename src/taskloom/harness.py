"""The composition root: one place that builds a session from :class:`Options`.

Print mode, the demo and library users all start here::

    async with Harness(Options(model="sonnet", cwd=".")) as h:
        async for event in h.run("fix the failing test"):
            ...

:meth:`Harness.start` reads the settings, resolves the model, builds the permission policy,
starts the task runtime (which claims the session) and the MCP servers, loads hooks and agent
definitions, assembles the tools and the main session, in that order; :meth:`Harness.aclose`
undoes it in reverse. Nothing is built anywhere else — the agents' part
(:mod:`taskloom.agents.compose`), the team's (:mod:`taskloom.teams.compose`) and the main
thread's configuration (:mod:`taskloom.main_thread`) are put together by their own modules,
called from here — and nothing changes another part's configuration after it was built.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._aio import finish_despite_cancel
from taskloom.errors import ModelError, UsageError
from taskloom.options import Options as Options  # its home; re-exported for callers
from taskloom.settings import DEFAULT_MAX_OUTPUT_TOKENS
from taskloom.tasks.runtime import TaskRuntime

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from taskloom.agents.peers import PeerListener
    from taskloom.agents.service import AgentService
    from taskloom.engine import EngineEvent, EngineObserver
    from taskloom.hooks import HookConfig
    from taskloom.mcp.manager import McpManager
    from taskloom.messages import Message
    from taskloom.models.base import Model
    from taskloom.models.switch import ModelSwitch
    from taskloom.permissions import PermissionPolicy, PermissionPrompter
    from taskloom.session import Session
    from taskloom.tasks.types import TaskState
    from taskloom.teams.member import TeammateProcess
    from taskloom.teams.service import TeamService
    from taskloom.tools.base import Tool
    from taskloom.tools.structured import StructuredOutput
    from taskloom.tools.worktree_tools import WorktreeSession


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
        self.options = Options(**{**base.__dict__, **overrides})
        self.cwd = Path(self.options.cwd).absolute()
        # The runtime opens the store: made in start(), so a harness that never starts (or
        # fails on its settings) holds nothing open.
        opts = self.options
        # Known now, except for a continued conversation (found when the session starts).
        forked = opts.fork_session and bool(opts.resume or opts.continue_session)
        self._session_id = opts.session_id or (None if forked else opts.resume) or str(uuid.uuid4())
        self._resuming: str | None = opts.resume
        self._runtime: TaskRuntime | None = None
        self.settings: dict[str, Any] = {}
        #: The cap on each model response, in tokens (known once started).
        self.max_output_tokens = DEFAULT_MAX_OUTPUT_TOKENS
        self.tools: list[Tool[Any]] = []
        self._stack = contextlib.AsyncExitStack()
        self._session: Session | None = None
        self._model: Model | None = None
        self._owns_model = True
        self._policy: PermissionPolicy | None = None
        self._service: AgentService | None = None
        self._mcp: McpManager | None = None
        self._hooks: HookConfig | None = None
        self._place: WorktreeSession | None = None
        self._mcp_config: dict[str, Any] = {}
        self._ended = False
        self._claimed = False
        self._structured: StructuredOutput | None = None
        self._switch: ModelSwitch | None = None
        #: Whether the main thread only orchestrates workers (known once started).
        self.coordinator = False
        #: The team the main thread leads, when teams are on (known once started).
        self.team: TeamService | None = None
        self._listener: PeerListener | None = None
        self._member: TeammateProcess | None = None  # this process runs one teammate
        #: What hears the engines (the caller's observer, and telemetry when it is on).
        self._observer: EngineObserver | None = self.options.observer

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
    def runtime(self) -> TaskRuntime:
        """The session's task runtime (after :meth:`start`)."""
        if self._runtime is None:
            raise RuntimeError("the harness is not started")
        return self._runtime

    @property
    def session(self) -> Session:
        """The main thread (after :meth:`start`)."""
        if self._session is None:
            raise RuntimeError("the harness is not started")
        return self._session

    @property
    def model(self) -> Model:
        """The main thread's model (after :meth:`start`)."""
        if self._model is None:
            raise RuntimeError("the harness is not started")
        return self._model

    @property
    def policy(self) -> PermissionPolicy:
        """The session's permission policy (after :meth:`start`)."""
        if self._policy is None:
            raise RuntimeError("the harness is not started")
        return self._policy

    @property
    def agents(self) -> AgentService:
        """The subagent service (after :meth:`start`)."""
        if self._service is None:
            raise RuntimeError("the harness is not started")
        return self._service

    async def __aenter__(self) -> Harness:
        """Start the session (see :meth:`start`)."""
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """End the session (see :meth:`aclose`)."""
        await self.aclose()

    async def start(self) -> None:
        """Build and start everything the session needs; undone in full if a step fails."""
        if self._runtime is not None:
            return  # started already
        from taskloom.models.resolve import resolve_model
        from taskloom.permissions import PermissionPolicy
        from taskloom.settings import find_project_root, load_settings, max_output_tokens

        opts = self.options
        self._check_session_options()
        self.settings = load_settings(
            self.cwd,
            opts.settings,
            skip_broken=opts.skip_broken_settings,
            sources=opts.setting_sources,
        )
        self.max_output_tokens = max_output_tokens(self.settings, opts.max_output_tokens)
        from taskloom.agents.coordinator import coordinator_enabled

        self.coordinator = coordinator_enabled(opts.coordinator, self.settings)
        spec = opts.model
        self._model = spec if spec is not None and not isinstance(spec, str) else None
        # A model object passed in stays the caller's (it may serve another harness next).
        self._owns_model = self._model is None
        if self._model is None:
            self._model = resolve_model(spec if isinstance(spec, str) else None, self.settings)
        # From here on every step is undone if a later one fails, the model's close included.
        self._stack.push_async_callback(self._close_model)
        try:
            self._policy = PermissionPolicy.from_settings(
                self.settings,
                mode=opts.permission_mode,
                allowed_tools=list(opts.allowed_tools),
                disallowed_tools=list(opts.disallowed_tools),
                project_root=find_project_root(self.cwd),
                skip_permissions=opts.skip_permissions,
                add_dirs=opts.add_dirs,
            )
            self._find_conversation()
            runtime = TaskRuntime(session_id=self._session_id, cwd=str(self.cwd.resolve()))
            # Once the runtime has stopped every task (remote agents too): the Ray cluster,
            # while the store still records what it stops.
            runtime.on_close(self._close_remote)
            self._start_telemetry(runtime.session_id)  # closed after the runtime: every span ends
            await self._stack.enter_async_context(runtime)
            self._runtime, self._claimed = runtime, True
            self._mcp = await self._stack.enter_async_context(self._mcp_servers())
            if self._listens():
                # Before the session: what arrives meanwhile waits in the mailbox.
                from taskloom.agents.peers import PeerListener, socket_path

                path = socket_path(runtime.session_id, runtime.home)
                listener = PeerListener(runtime.mailbox, runtime.session_id, path)
                self._listener = await self._stack.enter_async_context(listener)
            self._build_session()
            # A resumed session's detached remote agents are followed again.
            self.agents.spawner.take_up_remote(self.cwd)
            if self.team is not None:
                # Panes a crashed session left are swept; a resumed session's teammates (of
                # the process that died) go on.
                await self.team.open()
        except BaseException:
            self._runtime = None
            await finish_despite_cancel(self._stack.aclose())
            raise

    def _session_spent(self, why: str) -> None:
        """The session's budget ran out: the main thread makes no more requests, nor waits."""
        if self._session is not None:
            self._session.engine.halt(why)

    def _start_telemetry(self, session_id: str) -> None:
        from taskloom.telemetry import Tee, start_telemetry

        telemetry = start_telemetry(self.settings, session_id, self.model.name)
        if telemetry is not None:
            self._stack.push_async_callback(telemetry.aclose)
            first = self.options.observer
            self._observer = Tee(first, telemetry) if first is not None else telemetry

    def _build_session(self) -> None:
        from taskloom.agents.compose import agent_service
        from taskloom.hooks import HookConfig
        from taskloom.main_thread import main_config, main_tools
        from taskloom.models.switch import ModelSwitch
        from taskloom.session import Session
        from taskloom.tools.worktree_tools import WorktreeSession

        opts, policy, runtime = self.options, self.policy, self.runtime
        hooks = HookConfig.from_settings(self.settings)
        if opts.hooks is not None:
            hooks = hooks.merged(opts.hooks)
        self._hooks = hooks
        team = self.team = self._team_service()
        service = self._service = agent_service(
            runtime, opts, self.settings, cwd=self.cwd, model=self.model, policy=policy,
            hooks=hooks, tools=self._subagent_tools, max_tokens=self.max_output_tokens,
            prompter=self._prompter, observer=self._observer, coordinator=self.coordinator,
            mcp=self._mcp, mcp_config=self._mcp_config, listen_path=self.listen_path, team=team,
            spent=self._session_spent,
        )  # fmt: skip
        place = self._place = WorktreeSession(cwd=self.cwd)
        if team is not None:
            # Before the runtime closes: its teammates stop, verified, and the team goes.
            self._stack.push_async_callback(team.close)
        if opts.json_schema is not None:
            from taskloom.tools.structured import StructuredOutput, check_schema

            self._structured = StructuredOutput(check_schema(opts.json_schema))
        self.tools = main_tools(
            service, place, hooks, profile=self._profile, coordinator=self.coordinator,
            lead=team if self._member is None else None, only=opts.builtin_tools,
            structured=self._structured, mcp=self._mcp, extra=opts.tools, policy=policy,
        )  # fmt: skip
        self._switch = ModelSwitch(self.model)  # the program may choose another (set_model)
        config = main_config(
            runtime, opts, service, model=self._switch, tools=self.tools, cwd=self.cwd,
            settings=self.settings, max_tokens=self.max_output_tokens, policy=policy,
            hooks=hooks, place=place, prompter=self._prompter, observer=self._observer,
            coordinator=self.coordinator, mcp=self._mcp,
        )  # fmt: skip
        if self._resuming:
            self._session = Session.resume(runtime, config, persist=opts.persist_session)
        else:
            self._session = Session(runtime, config, persist=opts.persist_session)
        self._stack.callback(self._session.close)

    def _listens(self) -> bool:
        """Whether other sessions may message this one (``listen``, or the setting)."""
        if self.options.listen is not None:
            return self.options.listen
        return self.settings.get("listen") is True

    @property
    def listen_path(self) -> Path | None:
        """The Unix socket other sessions reach this one at (``uds:<path>``), if listening."""
        return self._listener.path if self._listener is not None else None

    def _check_session_options(self) -> None:
        opts = self.options
        if opts.session_id is not None:
            try:
                uuid.UUID(opts.session_id)
            except ValueError:
                raise UsageError(f"--session-id {opts.session_id!r} is not a UUID") from None
            if (opts.resume or opts.continue_session) and not opts.fork_session:
                raise UsageError(
                    "--session-id can be used with --resume or --continue only together "
                    "with --fork-session"
                )
        if opts.fork_session and not (opts.resume or opts.continue_session):
            raise UsageError("--fork-session needs --resume or --continue")

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

    @property
    def _profile(self) -> str:
        return str(self.settings.get("toolProfile") or "claude")

    def _team_service(self) -> TeamService | None:
        """The session's team: led (teams on), or served in (``join_team``); None: neither."""
        from taskloom.prompts import main_system_prompt
        from taskloom.teams.compose import session_team

        team, self._member = session_team(
            self.runtime,
            self.options,
            self.settings,
            lambda: self.agents,
            cwd=self.cwd,
            base_prompt=lambda: main_system_prompt(self.cwd, self.options.append_system_prompt),
            # The lead's own set (a coordinator's has no worker tools: its workers' set).
            tools=lambda: self.tools if not self.coordinator else self._subagent_tools(),
        )
        return team

    @property
    def _prompter(self) -> PermissionPrompter | None:
        """Who answers calls that need approval: the caller's, or a teammate's lead."""
        return self._member.prompter if self._member is not None else self.options.prompter

    async def serve_teammate(self) -> int:
        """Run the teammate of ``Options.join_team`` until it ends; the exit code.

        Raises:
            UsageError: This session is not a teammate's process.
        """
        await self.start()
        if self._member is None:
            raise UsageError("serve_teammate: this session was not started with join_team")
        return await self._member.serve()

    def _subagent_tools(self) -> list[Tool[Any]]:
        """Every tool a subagent could be given (filtered per agent; Agent only when nesting)."""
        from taskloom.agents.compose import subagent_tools

        return subagent_tools(self.agents, self._mcp, self._profile)

    def _mcp_servers(self) -> contextlib.AbstractAsyncContextManager[McpManager | None]:
        """The session's MCP servers (``.mcp.json`` and the flags), run for the session."""
        from taskloom.mcp.config import load_flag_configs, load_mcp_config
        from taskloom.mcp.startup import session_servers

        opts, runtime = self.options, self.runtime
        config = {} if opts.strict_mcp_config else load_mcp_config(self.cwd)
        config.update(load_flag_configs(opts.mcp_config))
        self._mcp_config = config
        return session_servers(
            config,
            cwd=self.cwd,
            program=opts.mcp_caller,
            store=runtime.store,
            session_id=runtime.session_id,
        )

    async def _close_remote(self) -> None:
        if self._service is not None:
            await self._service.spawner.close_remote()

    async def _close_model(self) -> None:
        # Last, once the runtime has stopped every agent: the models their aliases named
        # (``model: haiku`` in an agent file), then the session's own.
        if self._service is not None:
            await self._service.builder.aclose()
        if self._switch is not None:
            await self._switch.close_chosen()
        if self._model is not None and self._owns_model:
            await self._model.aclose()

    async def run(self, prompt: str | Message) -> AsyncGenerator[EngineEvent, None]:
        """Run one prompt on the main thread; typed events, the last is ``Finished``.

        A headless run does not end while a task it owns runs or a notification is pending:
        each delivery starts a new turn. With ``json_schema``, a run that ends without an
        accepted StructuredOutput call is reminded to make one, a few times (see
        :attr:`structured_output`).
        """
        from taskloom.engine import Finished

        structured = self._structured
        if structured is not None:
            structured.value = None
        reminders = 0
        next_input: str | Message | None = prompt
        while True:
            finished: Finished | None = None
            try:
                async for event in self.session.run(next_input):
                    if isinstance(event, Finished):
                        finished = event
                    yield event
            except ModelError as exc:
                if not self._fall_back(exc):
                    raise
                next_input = None  # the conversation goes on where the request failed
                continue
            if structured is None or structured.value is not None or finished is None:
                return
            from taskloom.tools.structured import MAX_REMINDERS, REMINDER

            if finished.reason != "end_turn" or reminders >= MAX_REMINDERS:
                return
            reminders += 1
            next_input = REMINDER

    def _fall_back(self, exc: ModelError) -> bool:
        """Switch to ``fallback_model`` after a failure worth it; whether it switched."""
        spec = self.options.fallback_model
        if spec is None or not exc.retryable or self._switch is None:
            return False  # a request the provider refuses would be refused there too
        if self._switch.on(spec):
            return False  # on the fallback already
        before = self._switch.name
        chosen = self.set_model(spec)
        log.warning(
            "model %s failed (%s); going on with the fallback model %s", before, exc, chosen
        )
        return True

    @property
    def structured_output(self) -> dict[str, Any] | None:
        """The answer the last run gave through StructuredOutput (``json_schema``), if any."""
        return self._structured.value if self._structured is not None else None

    @property
    def wants_structured_output(self) -> bool:
        """Whether runs must answer through StructuredOutput (``json_schema`` was given)."""
        return self._structured is not None

    def init_info(self) -> dict[str, Any]:
        """What the session offers, as print mode's ``system/init`` event tells it."""
        from taskloom.mcp.startup import server_status

        mcp = self._mcp.status() if self._mcp is not None else {}
        return {
            "cwd": str(self.cwd),
            "session_id": self.session_id,
            "tools": [t.name for t in self.tools],
            "mcp_servers": [server_status(n, s) for n, s in mcp.items()],
            "model": self.session.engine.config.model_name or self._current_model().name,
            "permissionMode": str(self.policy.mode),
            "agents": sorted(self.agents.catalog.names()),
            # Ours: where other sessions reach this one (``SendMessage`` to ``uds:<path>``).
            **({"peer_socket": str(self.listen_path)} if self.listen_path is not None else {}),
        }

    def set_model(self, spec: str | None) -> str:
        """Send the main thread's next requests to the model ``spec`` names; returns its id.

        None goes back to the session's own model. Models made here are closed with the
        session.

        Raises:
            UsageError: A malformed spec or unknown provider prefix.
            UserError: The provider is not configured.
        """
        if self._switch is None:
            raise RuntimeError("the harness is not started")
        return self._switch.choose(spec, self.settings)

    def _current_model(self) -> Model:
        return self._switch.current if self._switch is not None else self.model

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
        if self._session is not None and not self._ended:
            self._ended = True
            with contextlib.suppress(Exception):
                await finish_despite_cancel(self._session.end(reason))

    async def aclose(self) -> None:
        """End the session: the reverse of :meth:`start`.

        Closes the transcript, the MCP servers, the model and the runtime (its tasks end by
        their exit policy).
        """
        await self.end()
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
