"""What a started :class:`~taskloom.harness.Harness` holds, and how its parts are put together.

:meth:`Harness.start <taskloom.harness.Harness.start>` starts what has a life of its own (the
settings read, the model, the permission policy, the runtime, the MCP servers, the listener;
the helpers here make some of them: :func:`session_model`, :func:`engine_observer`,
:func:`mcp_servers_config`, :func:`session_runtime`, :func:`peer_listener`) and then calls
:func:`compose` for the rest: the team, the agent service, the main thread's tools, its session
and the run policy. Each part is given what it needs as it is made; the team and the agents ask
for each other (and for the tools offered), so what is made later is passed as a function that
returns it once it exists. The one exception is a part's end: a part made later that must be
stopped by one made earlier registers its closer there (the agent service's Ray cluster with
the runtime, through ``TaskRuntime.on_close``, since it must go once the runtime has stopped
the tasks but before it closes the store). The result is one frozen :class:`Started`: a
harness is either not started or has every part.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from taskloom._dataclass import dataclass

if TYPE_CHECKING:
    from taskloom.agents.bridge import BridgeListener
    from taskloom.agents.peers import PeerListener
    from taskloom.agents.service import AgentService
    from taskloom.conversation.policy import TurnPolicy
    from taskloom.engine import EngineObserver
    from taskloom.hooks import HookConfig
    from taskloom.mcp.manager import McpManager
    from taskloom.models.base import Model
    from taskloom.models.switch import ModelSwitch
    from taskloom.options import Options
    from taskloom.permissions import PermissionPolicy, PermissionPrompter
    from taskloom.plugins import PluginSet
    from taskloom.session import Session
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.teams.member import TeammateProcess
    from taskloom.teams.service import TeamService
    from taskloom.tools.base import Tool

T = TypeVar("T")


@dataclass(frozen=True)
class Started:
    """Every part of a started session, made once, whole, by :func:`compose`."""

    settings: dict[str, Any]
    #: The cap on each model response, in tokens.
    max_output_tokens: int
    #: Whether the main thread only orchestrates workers.
    coordinator: bool
    runtime: TaskRuntime
    #: The session's own model; ``switch`` passes each request to the one chosen now.
    model: Model
    switch: ModelSwitch
    policy: PermissionPolicy
    mcp: McpManager | None
    #: Where other sessions reach this one, when it listens.
    listener: PeerListener | None
    agents: AgentService
    #: The team the main thread leads, or serves in (``join_team``); None: teams are off.
    team: TeamService | None
    #: What runs the teammate, when this process is a teammate's own (``join_team``).
    teammate: TeammateProcess | None
    #: The main thread's tools.
    tools: list[Tool[Any]]
    #: The main thread.
    session: Session
    #: How a prompt is run to its end on the main thread (reminders, the fallback model).
    turns: TurnPolicy
    #: The session's plugins, and what of them was skipped.
    plugins: PluginSet
    #: Where sessions on the Ray cluster reach this one (``bridge:``), when it listens there.
    bridge: BridgeListener | None = None


class _Later(Generic[T]):
    """A part made after one that needs it: given as a function, answered once it exists."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._value: T | None = None

    def set(self, value: T) -> T:
        self._value = value
        return value

    def __call__(self) -> T:
        if self._value is None:
            raise RuntimeError(f"{self._what} is asked for before it is built")
        return self._value


@dataclass(frozen=True)
class Base:
    """What :meth:`Harness.start <taskloom.harness.Harness.start>` made before the rest."""

    options: Options
    cwd: Path
    settings: dict[str, Any]
    max_output_tokens: int
    coordinator: bool
    runtime: TaskRuntime
    model: Model
    policy: PermissionPolicy
    mcp: McpManager | None
    #: The MCP servers' configuration (an agent's own servers start from it).
    mcp_config: dict[str, Any]
    listener: PeerListener | None
    #: What hears the engines (the caller's observer, and telemetry when it is on).
    observer: EngineObserver | None
    #: The conversation the session resumes, if any.
    resuming: str | None
    #: The session's plugins (``--plugin-dir``, ``enabledPlugins``).
    plugins: PluginSet
    #: Its ``bridge:`` listener on the Ray cluster, if any.
    bridge: BridgeListener | None = None


def session_model(options: Options, settings: dict[str, Any]) -> Model:
    """The session's model: the object passed in, or the one its spec (or the settings) name.

    Raises:
        UsageError: A malformed spec or unknown provider prefix.
        UserError: No model configured, or its provider is not.
    """
    from taskloom.models.resolve import resolve_model

    spec = options.model
    if spec is not None and not isinstance(spec, str):
        return spec
    return resolve_model(spec, settings)


def engine_observer(
    options: Options,
    settings: dict[str, Any],
    session_id: str,
    model: Model,
    stack: contextlib.AsyncExitStack,
) -> EngineObserver | None:
    """What hears the engines: the caller's observer, and telemetry (closed with ``stack``)."""
    from taskloom.telemetry import Tee, start_telemetry

    first = options.observer
    telemetry = start_telemetry(settings, session_id, model.name)
    if telemetry is None:
        return first
    stack.push_async_callback(telemetry.aclose)
    return Tee(first, telemetry) if first is not None else telemetry


def mcp_servers_config(
    options: Options, cwd: Path, plugins: PluginSet | None = None
) -> dict[str, Any]:
    """The session's MCP servers' configuration: ``.mcp.json``, the plugins', then the flags'.

    ``--strict-mcp-config`` leaves out the plugins' servers too, as every other configuration.

    Raises:
        UsageError: A configuration that cannot be read.
    """
    from taskloom.mcp.config import load_flag_configs, load_mcp_config

    config = {} if options.strict_mcp_config else load_mcp_config(cwd)
    if plugins is not None and not options.strict_mcp_config:
        config.update(plugins.mcp_servers())
    config.update(load_flag_configs(options.mcp_config))
    return config


def session_runtime(
    session_id: str, cwd: Path, settings: dict[str, Any], *, persist: bool = True
) -> TaskRuntime:
    """The session's task runtime (not started), its usage ledger priced by ``modelPrices``.

    Reports from other processes (remote workers, pane teammates) carry tokens, not dollars:
    the ledger prices them. ``persist=False`` (``--no-session-persistence``): its agents keep
    no transcripts either.
    """
    from taskloom.models.pricing import pricer
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tasks.usage import UsageLedger

    ledger = UsageLedger(pricer(settings.get("modelPrices")))
    return TaskRuntime(
        session_id=session_id, cwd=str(cwd.resolve()), usage=ledger, keep_transcripts=persist
    )


async def peer_listener(
    options: Options,
    settings: dict[str, Any],
    runtime: TaskRuntime,
    stack: contextlib.AsyncExitStack,
) -> PeerListener | None:
    """What other sessions message this one through (``listen``, or the setting), if any."""
    listen = options.listen
    if not (listen if listen is not None else settings.get("listen") is True):
        return None
    from taskloom.agents.peers import PeerListener, socket_path

    path = socket_path(runtime.session_id, runtime.home)
    listener = PeerListener(runtime.mailbox, runtime.session_id, path)
    return await stack.enter_async_context(listener)


async def bridge_listener(
    options: Options,
    settings: dict[str, Any],
    runtime: TaskRuntime,
    stack: contextlib.AsyncExitStack,
) -> BridgeListener | None:
    """What sessions on the Ray cluster message this one through, if any.

    Only a listening session (as for :func:`peer_listener`) with a cluster configured
    (``RAY_ADDRESS``, the setting ``remote.address``): Ray is loaded on this path alone.

    Raises:
        UserError: The cluster cannot be reached, or another session holds the address.
    """
    listen = options.listen
    if not (listen if listen is not None else settings.get("listen") is True):
        return None
    import os

    from taskloom.remote.cluster import Cluster, configured_address

    if configured_address(settings, os.environ) is None:
        return None
    from taskloom.agents.bridge import BridgeListener
    from taskloom.settings import session_dir

    cluster = Cluster(
        settings,
        recorder=runtime.recorder,
        log_path=session_dir(runtime.session_id, runtime.home) / "ray.log",
    )
    cwd = runtime.cwd or os.getcwd()
    bridge = BridgeListener(runtime.mailbox, runtime.session_id, cwd, cluster)
    try:
        return await stack.enter_async_context(bridge)
    except BaseException:
        await cluster.close()  # what it reached, or started, goes with it
        raise


def compose(
    base: Base, stack: contextlib.AsyncExitStack, models: contextlib.AsyncExitStack
) -> Started:
    """The team, the agents, the tools, the main session and its run policy.

    Args:
        base: What was started before.
        stack: The session's: what is made here and must be closed goes on it (the team
            before the runtime, the transcript).
        models: Closed once the runtime has stopped every agent: the models the agents'
            aliases named and those the program chose are added to it.
    """
    from taskloom.agents.compose import agent_service, subagent_tools
    from taskloom.hooks.config import HookConfig
    from taskloom.prompts import main_system_prompt
    from taskloom.teams.mode import teams_enabled

    opts, cwd, runtime, settings = base.options, base.cwd, base.runtime, base.settings
    profile = str(settings.get("toolProfile") or "claude")
    hooks = HookConfig.from_settings(settings)
    if settings.get("disableAllHooks") is not True:  # it turns the plugins' hooks off too
        hooks = hooks.merged(base.plugins.hook_config())
    if opts.hooks is not None:
        hooks = hooks.merged(opts.hooks)
    agents: _Later[AgentService] = _Later("the agent service")
    tools: _Later[list[Tool[Any]]] = _Later("the main thread's tools")
    session: _Later[Session] = _Later("the main session")

    def worker_tools() -> list[Tool[Any]]:
        return subagent_tools(agents(), base.mcp, profile)

    team: TeamService | None = None
    member: TeammateProcess | None = None
    if opts.join_team is not None or teams_enabled(opts.teams, settings):
        # Only a session with a team loads the teams' machinery (and their tools' models).
        from taskloom.teams.compose import session_team

        team, member = session_team(
            runtime, opts, settings, agents, cwd=cwd,
            base_prompt=lambda: main_system_prompt(
                cwd, opts.append_system_prompt, instructions=agents().builder.instructions.text()
            ),
            # The lead's own set (a coordinator's has no worker tools: its workers' set).
            tools=lambda: tools() if not base.coordinator else worker_tools(),
        )  # fmt: skip
    prompter = member.prompter if member is not None else opts.prompter
    service = agent_service(
        runtime, opts, settings, cwd=cwd, model=base.model, policy=base.policy, hooks=hooks,
        tools=worker_tools, max_tokens=base.max_output_tokens, prompter=prompter,
        observer=base.observer, coordinator=base.coordinator, mcp=base.mcp,
        mcp_config=base.mcp_config, team=team,
        plugin_agents=base.plugins.agents(), plugin_roots=base.plugins.skill_roots(),
        listen_path=base.listener.path if base.listener is not None else None,
        # The session's budget ran out: the main thread makes no more requests.
        spent=lambda why: session().engine.halt(why),
    )  # fmt: skip
    agents.set(service)
    if base.bridge is not None:
        service.messenger.bridge_address = base.bridge.address
        # One connection to Ray per process: the remote agents take the listener's over.
        base.bridge.shared = service.spawner.remote.share(base.bridge.cluster)
    models.push_async_callback(service.builder.aclose)
    # Once the runtime has stopped every task: the Ray cluster of remote agents, while the
    # store still records what it stops.
    runtime.on_close(service.spawner.close_remote)
    if team is not None:
        # Before the runtime closes: its teammates stop, verified, and the team goes.
        stack.push_async_callback(team.close)
    return _main_thread(
        base, stack, models, service, hooks=hooks, profile=profile, prompter=prompter,
        team=team, member=member, tools=tools, session=session,
    )  # fmt: skip


def _main_thread(
    base: Base,
    stack: contextlib.AsyncExitStack,
    models: contextlib.AsyncExitStack,
    service: AgentService,
    *,
    hooks: HookConfig,
    profile: str,
    prompter: PermissionPrompter | None,
    team: TeamService | None,
    member: TeammateProcess | None,
    tools: _Later[list[Tool[Any]]],
    session: _Later[Session],
) -> Started:
    """The main thread's tools, model switch, session and run policy; the whole."""
    from taskloom.conversation.policy import TurnPolicy
    from taskloom.main_thread import main_config, main_tools
    from taskloom.models.switch import ModelSwitch
    from taskloom.session import Session
    from taskloom.tools.worktree_tools import WorktreeSession

    opts, policy, mcp = base.options, base.policy, base.mcp
    structured = None
    if opts.json_schema is not None:
        from taskloom.tools.structured import StructuredOutput, check_schema

        structured = StructuredOutput(check_schema(opts.json_schema))
    place = WorktreeSession(cwd=base.cwd)
    offered = tools.set(
        main_tools(
            service, place, hooks, profile=profile, coordinator=base.coordinator,
            lead=team if member is None else None, only=opts.builtin_tools,
            structured=structured, mcp=mcp, extra=opts.tools, policy=policy,
        )
    )  # fmt: skip
    switch = ModelSwitch(base.model)  # the program may choose another (set_model)
    models.push_async_callback(switch.close_chosen)
    config = main_config(
        base.runtime, opts, service, model=switch, tools=offered, cwd=base.cwd,
        settings=base.settings, max_tokens=base.max_output_tokens, policy=policy, hooks=hooks,
        place=place, prompter=prompter, observer=base.observer, coordinator=base.coordinator,
        mcp=mcp, lead=team is not None and member is None,
    )  # fmt: skip
    # ``/name args`` prompts run the session's custom commands and skills.
    commands = service.builder.skills
    if base.resuming:
        main = Session.resume(base.runtime, config, persist=opts.persist_session, commands=commands)
    else:
        main = Session(base.runtime, config, persist=opts.persist_session, commands=commands)
    session.set(main)
    stack.callback(main.close)
    turns = TurnPolicy(
        main.run, switch, base.settings, structured=structured, fallback=opts.fallback_model
    )
    return Started(
        settings=base.settings, max_output_tokens=base.max_output_tokens,
        coordinator=base.coordinator, runtime=base.runtime, model=base.model, switch=switch,
        policy=policy, mcp=mcp, listener=base.listener, agents=service, team=team,
        teammate=member, tools=offered, session=main, turns=turns, plugins=base.plugins,
        bridge=base.bridge,
    )  # fmt: skip


__all__ = [
    "Base",
    "Started",
    "bridge_listener",
    "compose",
    "engine_observer",
    "mcp_servers_config",
    "peer_listener",
    "session_model",
    "session_runtime",
]
