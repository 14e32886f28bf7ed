"""The Agent tool: delegate a task to a subagent, in the foreground or the background."""

from __future__ import annotations

import copy
import os
import re
from typing import TYPE_CHECKING, Any

from taskloom.errors import ToolError, quoted
from taskloom.tools import responses
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.agents.inputs.agent_tool import AgentInput
    from taskloom.agents.service import AgentService, SpawnResult
    from taskloom.tasks.usage import Latest

DESCRIPTION = """Launch a subagent to handle a task on its own, with its own context window.

- Give a short `description` (3-5 words) and a complete, self-contained `prompt`: the agent
  sees nothing of this conversation. Say exactly what to return.
- `subagent_type` picks a specialised agent (default general-purpose); see the list below.
- Launch independent agents in ONE message to run them in parallel. With
  `run_in_background: true` you get its id at once and are notified (with its answer) when it
  ends; keep working meanwhile instead of waiting.
- To continue an agent (running or finished), use SendMessage with its id or name.
- Its answer is not shown to the user: relay what matters."""

COORDINATOR_DESCRIPTION = """Start a worker: an agent with its own context window that runs in the
background on one self-contained piece of the task.

- Give a short `description` (3-5 words) and a complete `prompt`: the worker sees nothing of
  this conversation, so the prompt is its whole specification (files, the change, how to
  check it, what to report).
- `subagent_type` defaults to `worker`; the read-only types only look.
- Every worker runs in the background: you get its id at once and a <task-notification> with
  its report when it ends. Start independent workers in ONE message to run them in parallel.
- Continue a worker with SendMessage (its id or `name`); stop one with TaskStop."""

#: Said with forks on: when to fork instead of starting a fresh agent type.
FORK_GUIDANCE = """Forking: leave out `subagent_type` to fork yourself. A fork inherits this
conversation and shares your prompt cache; it runs in the background and reports back.
- Fork when the intermediate tool output is not worth keeping in your context: the question
  is "will I need this output again", not how big the task is.
- Fork open-ended research. Research that splits into independent questions: launch parallel
  forks in ONE message. A fork beats a fresh agent for this: it knows what you know.
- Start a fresh agent (name its `subagent_type`) when the task needs that type's tools or
  prompt, or a context without yours; its prompt must then say everything.
- A fork may not fork again."""


#: The Agent call's budget fields, offered when the setting ``agentBudgets`` is on.
BUDGET_FIELDS = ("max_tokens_budget", "max_tool_calls", "max_seconds")


def background_disabled(settings: dict[str, Any]) -> bool:
    """Background agents switched off by env or setting."""
    env = os.environ.get("TASKLOOM_DISABLE_BACKGROUND_TASKS", "")
    return env.lower() in ("1", "true", "yes") or settings.get("enableRunInBackground") is False


#: :class:`AgentInput`'s closed schema written out (see ``Tool.static_schema``), so that
#: offering the tool does not build the model; tests check it is the generated one.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`AgentTool`.",
    "properties": {
        "description": {
            "description": "A short (3-5 word) description of the task.",
            "type": "string",
        },
        "prompt": {"description": "The task for the agent to perform.", "type": "string"},
        "subagent_type": {"type": "string", "description": "The agent type to use."},
        "model": {
            "enum": ["sonnet", "opus", "haiku"],
            "type": "string",
            "description": "Model override for this agent.",
        },
        "run_in_background": {
            "type": "boolean",
            "description": "Run in the background; you are notified when it ends.",
        },
        "name": {"type": "string", "description": "A name to address it by (SendMessage)."},
        "team_name": {"type": "string", "description": "Team to spawn a teammate into."},
        "mode": {
            "enum": ["acceptEdits", "bypassPermissions", "default", "dontAsk", "plan"],
            "type": "string",
            "description": "Permission mode for the agent.",
        },
        "isolation": {
            "enum": ["worktree", "remote"],
            "type": "string",
            "description": "Run in an isolated git worktree, or remotely.",
        },
        "cwd": {"type": "string", "description": "Absolute working directory."},
        "max_tokens_budget": {
            "minimum": 1,
            "type": "integer",
            "description": "Token budget of the agent and the agents it starts.",
        },
        "max_tool_calls": {
            "minimum": 1,
            "type": "integer",
            "description": "Tool-call budget of the agent and the agents it starts.",
        },
        "max_seconds": {
            "exclusiveMinimum": 0,
            "type": "number",
            "description": "Wall-time budget of the agent and its agents, seconds.",
        },
    },
    "required": ["description", "prompt"],
    "type": "object",
}


class AgentTool(Tool["AgentInput"]):
    """Spawns subagents through an :class:`~taskloom.agents.service.AgentService`."""

    name = "Agent"
    aliases = ("Task",)  # its name before Claude Code 2.1, still in models' habits
    description = DESCRIPTION
    input_model = "taskloom.agents.inputs.agent_tool:AgentInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "other"
    concurrency_safe = True

    def __init__(
        self,
        service: AgentService,
        *,
        enable_run_in_background: bool = True,
        teammate: bool = False,
        in_process_teammate: bool = False,
        coordinator: bool = False,
    ) -> None:
        """Serve ``service``; the flags shape the schema (the background and teammate rules).

        ``coordinator``: every agent runs in the background (the field is not offered, and
        ignored if sent), and forks are not offered.
        """
        self.service = service
        self.coordinator = coordinator
        self.enable_run_in_background = enable_run_in_background and not background_disabled(
            service.settings
        )
        self.teammate = teammate
        self.in_process_teammate = in_process_teammate
        #: The agent types this Agent tool may start (None: any); see :meth:`restricted`.
        self.allowed_types: tuple[str, ...] | None = None

    def restricted(self, types: tuple[str, ...]) -> AgentTool:
        """This tool for an agent that may start only ``types`` (its ``Agent(a, b)`` entries).

        Its description lists only those types, and a spawn of another type is refused.
        """
        tool = copy.copy(self)
        tool.allowed_types = types
        return tool

    @property
    def forks(self) -> bool:
        """Whether leaving out ``subagent_type`` forks the caller (forks on, not a coordinator)."""
        from taskloom.agents.fork import fork_enabled

        # A coordinator's default is its workers' type: leaving it out starts a worker.
        default = self.service.builder.default_type == "general-purpose"
        return default and fork_enabled(self.service.settings)

    @property
    def _hidden(self) -> set[str]:
        hidden: set[str] = set()
        if self.service.settings.get("agentBudgets") is not True:
            hidden |= set(BUDGET_FIELDS)
        if self.coordinator:
            return hidden  # run_in_background is dropped from its schema, and ignored
        if not self.enable_run_in_background or self.in_process_teammate:
            hidden.add("run_in_background")
        if self.teammate or self.in_process_teammate:
            hidden |= {"name", "team_name", "mode"}
        return hidden

    def input_schema(self) -> dict[str, Any]:
        """The schema, without the fields this context does not offer."""
        schema = super().input_schema()
        for name in self._hidden | ({"run_in_background"} if self.coordinator else set()):
            schema["properties"].pop(name, None)
        return schema

    def spec(self) -> Any:
        """Offered with the list of agent types."""
        from taskloom.models.base import ToolSpec

        allowed = self.allowed_types
        lines = [
            f"- {d.agent_type}: {d.when_to_use}"
            for d in sorted(self.service.catalog.active.values(), key=lambda d: d.agent_type)
            if allowed is None or d.agent_type in allowed
        ]
        description = COORDINATOR_DESCRIPTION if self.coordinator else self.description
        if self.forks and not self.coordinator:
            description = description.replace(
                "(default general-purpose)", "(leave it out to fork yourself: see Forking)"
            )
            description += "\n\n" + FORK_GUIDANCE
        text = f"{description}\n\nAvailable agent types:\n" + "\n".join(lines)
        return ToolSpec(self.name, text, self.input_schema())

    def _refused_type(self, params: AgentInput) -> str | None:
        """Why this agent may not start the type asked for, if it may not."""
        allowed = self.allowed_types
        if allowed is None or (params.subagent_type is None and self.forks):
            return None  # any type; or a fork, a copy of the caller itself
        kind = params.subagent_type or self.service.builder.default_type
        if kind in allowed:
            return None
        listed = ", ".join(allowed)
        return (
            f"Agent type '{kind}' is not one this agent may start: its definition allows "
            f"only Agent({listed}). Available agents: {listed}"
        )

    def validate(self, raw: Any) -> AgentInput | ToolResult:
        """Refuse fields this context does not offer, even when forced."""
        if isinstance(raw, dict):
            forced = sorted(k for k in self._hidden if raw.get(k) is not None)
            if forced:
                return tool_error(
                    f"InputValidationError: Agent: {', '.join(forced)}: not available here"
                    + (" (background agents are disabled)" if "run_in_background" in forced else "")
                )
        return super().validate(raw)

    def permission_target(self, params: AgentInput, ctx: ToolContext) -> str | None:
        """``Agent(Explore)`` rules match the agent type."""
        return params.subagent_type or self.service.builder.default_type

    def denied_message(self, params: AgentInput, reason: str, rule: Any) -> str:
        """Claude Code's wording when an ``Agent(X)`` rule refuses a type."""
        if rule is not None and getattr(rule, "content", None):
            kind = params.subagent_type or self.service.builder.default_type
            return (
                f"Agent type '{kind}' has been denied by permission rule "
                f"'Agent({rule.content})' from settings."
            )
        return reason

    async def call(self, params: AgentInput, ctx: ToolContext) -> ToolResult:
        """Spawn and report."""
        from taskloom.agents.service import SpawnRequest

        refused = self._refused_type(params) or _fan_out(ctx, self.service.settings)
        if refused is not None:
            return tool_error(refused)
        teams = self.service.teams
        if teams is not None and params.name and teams.is_lead(ctx):
            if params.cwd is not None:
                return tool_error(
                    "A teammate works in the lead's directory (or, with isolation "
                    '"worktree", its own worktree): no cwd.'
                )
            try:
                # A teammate counts among the session's agents (maxConcurrentAgents).
                slot = self.service.spawner.limits.admit(ctx.owner)
                try:
                    text = await teams.spawn(
                        name=params.name,
                        prompt=params.prompt,
                        team_name=params.team_name,
                        model=params.model,
                        mode=params.mode,
                        agent_type=params.subagent_type or "general-purpose",
                        cwd=str(ctx.cwd),
                        isolation=params.isolation,
                    )
                finally:
                    slot.release()
            except ToolError as exc:
                return tool_error(str(exc))
            return teammate_spawned(text, params)
        if params.team_name:
            return tool_error(
                "team_name spawns a teammate, and agent teams are off in this session (turn "
                "them on with --teams or the setting agentTeams). Spawn a subagent without "
                "team_name."
            )
        if params.cwd is not None and not os.path.isabs(params.cwd):
            return tool_error(f"cwd must be an absolute path, got {quoted(params.cwd)}")
        request = SpawnRequest(
            description=params.description,
            prompt=params.prompt,
            subagent_type=params.subagent_type,
            model=params.model,
            run_in_background=self.coordinator or bool(params.run_in_background),
            name=params.name,
            mode=params.mode,
            cwd=params.cwd,
            isolation=params.isolation,
            max_tokens_budget=params.max_tokens_budget,
            max_tool_calls=params.max_tool_calls,
            max_seconds=params.max_seconds,
        )
        try:
            result = await self.service.spawn(request, ctx)
        except ToolError as exc:
            return tool_error(str(exc))
        return render(result, ctx.runtime.usage.latest(result.agent_id), can_read=can_read(ctx))


def _fan_out(ctx: ToolContext, settings: dict[str, Any]) -> str | None:
    """Why this call is refused by the fan-out guard (:mod:`taskloom.agents.limits`), or None."""
    from taskloom.agents.limits import fan_out_refusal

    if ctx.engine is None:  # not a model's call: no turn to count
        return None
    try:
        return fan_out_refusal(ctx.engine.messages, ctx.tool_use_id, settings)
    except ToolError as exc:
        return str(exc)


#: The teammate's id in the team's spawn result (``agent_id: <name>@<team>``).
_TEAMMATE_ID = re.compile(r"^agent_id: (\S+)$", re.MULTILINE)


def teammate_spawned(text: str, params: AgentInput) -> ToolResult:
    """A teammate's spawn: the team's text, and ``teammate_id`` and ``team_name`` as data.

    The ids come from the team's own words (``agent_id: alice@t1``): the team the teammate
    joined is the lead's, whatever ``team_name`` asked for.
    """
    found = _TEAMMATE_ID.search(text)
    teammate_id = found.group(1) if found else None
    name, _, team = (teammate_id or "").rpartition("@")
    data: dict[str, Any] = {
        "status": "teammate_spawned",
        "teammate_id": teammate_id,
        "agentId": teammate_id,
        "name": name or params.name,
        "team_name": team or params.team_name,
        "prompt": params.prompt,
    }
    return ToolResult(text, data=data)


def can_read(ctx: ToolContext) -> bool:
    """Whether the caller has a tool to read a background agent's output file (Read, Bash)."""
    engine = ctx.engine
    return engine is None or any(name in engine.tools for name in ("Read", "Bash"))


def render(
    result: SpawnResult, latest: Latest | None = None, *, can_read: bool = True
) -> ToolResult:
    """The Agent tool's answer, as text for the model and data for scripts.

    Args:
        result: What the spawn reported.
        latest: The agent's latest response, as the session's ledger counted it (its hooks'
            ``usage`` and ``resolvedModel``, as Claude Code gives them).
        can_read: Whether the caller can read the output file (``canReadOutputFile``).
    """
    data: dict[str, Any] = {
        "status": result.status,
        "agentId": result.agent_id,
        "agentType": result.agent_type,
        "description": result.description,
        "prompt": result.prompt,
        "outputFile": result.output_file,
    }
    how = (
        f"agentId: {result.agent_id} (use SendMessage with to: '{result.agent_id}' to continue it)"
    )
    if result.status == "async_launched":
        data["canReadOutputFile"] = can_read
        text = (
            f"Async agent launched successfully.\n{how}\n"
            "The agent is working in the background. You will be notified automatically when "
            "it completes; do not wait for it or duplicate its work.\n"
            + (
                f"output_file: {result.output_file} (its progress, and its answer when done)"
                if can_read
                else "Its answer comes in that notification (you have no tool to read its "
                "output file)."
            )
        )
        if result.extra.get("cluster"):  # a remote agent's first: where it runs, what it cost
            text += f"\ncluster: {result.extra['cluster']}"
            data["cluster"] = result.extra["cluster"]
        response = responses.agent_launched(
            result.agent_id,
            result.description,
            result.prompt,
            result.output_file,
            can_read_output_file=can_read,
        )
        return ToolResult(text, data=data, response=response)
    if result.extra:
        data.update(result.extra)
    data.update(
        content=result.content,
        totalToolUseCount=result.total_tool_uses,
        totalTokens=result.total_tokens,
        totalDurationMs=result.duration_ms,
    )
    text = (
        f"{result.content}\n\n{how}\n<usage>total_tokens: {result.total_tokens}\n"
        f"tool_uses: {result.total_tool_uses}\nduration_ms: {result.duration_ms}</usage>"
    )
    used = latest.usage if latest is not None else None
    kept = result.extra.get("worktreePath")
    response = responses.agent_completed(
        result.agent_id,
        result.agent_type,
        result.prompt,
        result.content,
        duration_ms=result.duration_ms,
        total_tokens=result.total_tokens,
        tool_uses=result.total_tool_uses,
        usage=used.dump() if used is not None else None,
        model=latest.model if latest is not None else None,
        worktree=(kept, result.extra.get("worktreeBranch")) if kept else None,
    )
    return ToolResult(text, data=data, response=response)
