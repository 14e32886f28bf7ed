"""The Workflow tool: run one prompt template over many items, one subagent per item, as a task.

The model gives a list of items, a prompt template, an agent type, a concurrency and an
optional reduce step; the workflow runs in the background as one ``local_workflow`` task
(:mod:`taskloom.agents.workflow`), and its owner is notified once, when every agent has ended.
Or the model gives a Python script that runs the agents itself
(:mod:`taskloom.agents.workflow_script`): the call is then decided by the permission rules as a
Bash command (:data:`SCRIPT_COMMAND`).

Two settings bound it (each a whole number; anything else makes the call a tool error naming
the setting):

- ``workflowMaxConcurrency`` (default 16, at most 256): the most agents one workflow runs at
  once, and its default concurrency. The session's ``maxConcurrentAgents`` applies on top.
- ``workflowMaxAgents`` (default 1,000): the most agents one workflow runs (its items, plus
  one for a reduce step). A larger workflow is refused before anything starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from taskloom.errors import ToolError
from taskloom.tools.base import Tool, ToolContext, ToolKind, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.agents.inputs.workflow_tool import WorkflowInput
    from taskloom.agents.service import AgentService
    from taskloom.agents.workflow import WorkflowSpec

MAX_CONCURRENCY = "workflowMaxConcurrency"
#: The command line Bash permission rules see for a workflow script (``Bash(python:*)``).
SCRIPT_COMMAND = "python workflow-script.py"
MAX_AGENTS = "workflowMaxAgents"
#: Each setting's default, and the highest value it may be given (None: no ceiling).
DEFAULTS: dict[str, tuple[int, int | None]] = {MAX_CONCURRENCY: (16, 256), MAX_AGENTS: (1000, None)}

DESCRIPTION = """Run a workflow: one subagent per item of a list, all from one prompt template,
as one background task. Use it for the same work over many items (files, URLs, cases) where
each item is independent; for a few different tasks use Agent.

- `items`: the work items (strings, numbers or JSON objects), one agent each.
- `prompt`: each agent's prompt, a template: {item} is its item, {index} its number (from 1),
  {total} how many there are; an object item's fields are {item[key]}. Write {{ and }} for
  literal braces. Each agent sees nothing else: say exactly what to return.
- `subagent_type`, `concurrency` (the most agents at once, default 16), and `reduce`: the
  prompt of one last agent, given every result, to combine them.
- Or `script` instead of `items`/`prompt`/`reduce`: a Python script, run as a command (it
  needs the permission `python` would), that drives the agents itself with
  `from taskloom.workflow_client import spawn, wait, gather, send`: spawn(prompt,
  subagent_type=None) -> handle; wait(handle) -> answer (raises AgentFailed); gather(*handles)
  -> answers; send(handle, text). What it prints is in the notification; exiting non-zero
  fails the workflow with its stderr.
- You get the workflow's task id at once, and ONE notification when every agent has ended,
  with each one's answer and output file. TaskOutput shows its progress (done/total);
  TaskStop stops it and all its agents. A failed agent is reported, not fatal."""


#: :class:`WorkflowInput`'s closed schema written out (see ``Tool.static_schema``), so that
#: offering the tool does not build the model; tests check it is the generated one.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`WorkflowTool`.",
    "properties": {
        "description": {
            "description": "A short (3-5 word) description of the workflow.",
            "type": "string",
        },
        "items": {
            "items": {},
            "minItems": 1,
            "type": "array",
            "description": "The work items, one agent each (strings, numbers, objects).",
        },
        "prompt": {
            "type": "string",
            "description": "Each agent's prompt: a template with {item}, {index}.",
        },
        "script": {
            "type": "string",
            "description": "Instead of items and prompt: a Python script that runs the agents.",
        },
        "subagent_type": {"type": "string", "description": "The agents' type."},
        "concurrency": {
            "minimum": 1,
            "type": "integer",
            "description": "The most agents running at once (default 16).",
        },
        "reduce": {
            "type": "string",
            "description": "The prompt of a last agent given every result to combine.",
        },
    },
    "required": ["description"],
    "type": "object",
}


def setting(settings: Mapping[str, Any], key: str) -> int:
    """The workflow setting ``key`` (one of :data:`DEFAULTS`), or its default.

    Raises:
        ToolError: The value is not a whole number in its range.
    """
    default, ceiling = DEFAULTS[key]
    raw = settings.get(key)
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1 or (ceiling and raw > ceiling):
        top = f" to {ceiling}" if ceiling else " or more"
        raise ToolError(
            f"Not started: the setting {key} must be a whole number from 1{top}, got {raw!r}; "
            f"fix it in the settings file."
        )
    return raw


class _Item:
    """An item as a template sees it: ``{item}`` is its text, ``{item[key]}`` a field's."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __str__(self) -> str:
        return shown(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __getitem__(self, key: Any) -> Any:
        return self.value[key]


def shown(item: Any) -> str:
    """An item as text: a string as it is, anything else as JSON."""
    return item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)


def render_prompts(template: str, items: list[Any]) -> tuple[str, ...]:
    """Each item's prompt.

    Raises:
        ToolError: The template does not fit an item (an unknown name, a missing field, a
            lone brace); the error names the item.
    """
    import string

    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f]
    except ValueError as exc:
        raise ToolError(f"Not started: the prompt template is malformed: {exc}.") from exc
    dotted = next((f for f in fields if "." in f.split("[", 1)[0] or "]." in f), None)
    if dotted is not None:
        # str.format would follow attributes into Python objects (``{item.__init__}``).
        raise ToolError(
            f"Not started: the prompt template's {{{dotted}}} reads an attribute; use "
            f"{{item}}, {{index}}, {{total}} or {{item[key]}}."
        )
    total = len(items)
    prompts = []
    for index, item in enumerate(items, 1):
        try:
            prompts.append(template.format(item=_Item(item), index=index, total=total))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            what = f"{type(exc).__name__}: {exc}"
            raise ToolError(
                f"Not started: the prompt template does not fit item {index} "
                f"({shown(item)[:200]}): {what}. Use {{item}}, {{index}}, {{total}} or "
                f"{{item[key]}}, and {{{{ }}}} for literal braces."
            ) from exc
    return tuple(prompts)


def plan(params: WorkflowInput, settings: Mapping[str, Any]) -> WorkflowSpec:
    """What the call asks for, checked against the workflow settings.

    Raises:
        ToolError: Over a limit (naming it and the setting), or a template that does not fit.
    """
    from taskloom.agents.workflow import WorkflowSpec

    most_agents = setting(settings, MAX_AGENTS)
    most_at_once = setting(settings, MAX_CONCURRENCY)
    items, template = _form(params)
    agents = len(items) + (1 if params.reduce is not None else 0)
    if agents > most_agents:
        raise ToolError(
            f"Not started: this workflow would run {agents} agents, more than the "
            f"{most_agents} one workflow may run (setting {MAX_AGENTS}, default "
            f"{DEFAULTS[MAX_AGENTS][0]}). Split the items into smaller workflows, or raise "
            f"{MAX_AGENTS} in the settings."
        )
    concurrency = params.concurrency or most_at_once
    if concurrency > most_at_once:
        raise ToolError(
            f"Not started: concurrency {concurrency} is more than the {most_at_once} agents one "
            f"workflow may run at once (setting {MAX_CONCURRENCY}, default "
            f"{DEFAULTS[MAX_CONCURRENCY][0]}, at most {DEFAULTS[MAX_CONCURRENCY][1]})."
        )
    return WorkflowSpec(
        description=params.description,
        prompts=render_prompts(template, items) if items else (),
        items=tuple(shown(i) for i in items),
        agent_type=params.subagent_type,
        concurrency=concurrency,
        reduce=params.reduce,
        script=params.script,
    )


def _form(params: WorkflowInput) -> tuple[list[Any], str]:
    """The items and template of a list workflow (none for a script one).

    Raises:
        ToolError: Neither form is given whole, or both are.
    """
    if params.script is not None:
        if params.items is not None or params.prompt is not None or params.reduce is not None:
            raise ToolError(
                "Not started: give either `script`, or `items` and `prompt` (and `reduce`), "
                "not both: a script runs its agents itself."
            )
        return [], ""
    if params.items is None or params.prompt is None:
        missing = " and ".join(n for n in ("items", "prompt") if getattr(params, n) is None)
        raise ToolError(f"Not started: {missing} missing: give `items` and `prompt`, or `script`.")
    return params.items, params.prompt


class WorkflowTool(Tool["WorkflowInput"]):
    """Runs workflows of subagents through an :class:`~taskloom.agents.service.AgentService`."""

    name = "Workflow"
    description = DESCRIPTION
    input_model = "taskloom.agents.inputs.workflow_tool:WorkflowInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "other"
    concurrency_safe = True

    def __init__(self, service: AgentService) -> None:
        """Spawn through ``service``'s spawner."""
        self.service = service

    def permission_tool(self, params: WorkflowInput) -> tuple[str, ToolKind]:
        """A script is code the model wrote: it is decided as its Bash command would be."""
        if params.script is not None:
            return "Bash", "execute"
        return self.name, self.kind

    def permission_target(self, params: WorkflowInput, ctx: ToolContext) -> str | None:
        """``Workflow(Explore)`` rules match the agent type, as ``Agent(Explore)`` ones do.

        A script's call is matched by Bash rules as :data:`SCRIPT_COMMAND`.
        """
        if params.script is not None:
            return SCRIPT_COMMAND
        return params.subagent_type or self.service.builder.default_type

    async def call(self, params: WorkflowInput, ctx: ToolContext) -> ToolResult:
        """Check the workflow, start it in the background and say where it is."""
        from taskloom.agents.workflow import WorkflowRun, caller_policy, refused_agent_type

        try:
            spec = plan(params, self.service.settings)
            self.service.definition(spec.agent_type)  # an unknown type: refused now
        except ToolError as exc:
            return tool_error(str(exc))
        agent_type = spec.agent_type or self.service.builder.default_type
        refused = refused_agent_type(caller_policy(self.service, ctx), agent_type, ctx.cwd)
        if refused is not None and spec.script is None:  # a script's types: at each spawn
            return tool_error(f"Not started: {refused}")
        if spec.script is not None:
            from taskloom.agents.workflow_script import ScriptRun

            most = setting(self.service.settings, MAX_AGENTS)
            run: WorkflowRun = ScriptRun(self.service, spec, ctx, most)
        else:
            run = WorkflowRun(self.service.spawner, spec, ctx)
        task_id = run.start()
        what = (
            f"its script runs (its agents: {agent_type} unless it names a type, at most "
            f"{most} in all)"
            if spec.script is not None
            else f"{spec.total} agents ({agent_type})"
        )
        text = (
            f"Workflow launched: {what}, at most {spec.concurrency} at once.\n"
            f"task_id: {task_id} (TaskOutput shows its progress, done/total; TaskStop stops it "
            "and all its agents)\n"
            "You will be notified once, when every agent has ended, with each one's answer and "
            "output file; do not wait for it or duplicate its work.\n"
            f"output_file: {run.output_file} (one line per agent as each ends)"
        )
        data = {
            "status": "workflow_launched",
            "taskId": task_id,
            "agents": spec.total,
            "concurrency": spec.concurrency,
            "agentType": agent_type,
            "outputFile": run.output_file,
        }
        return ToolResult(text, data=data)


__all__ = [
    "DEFAULTS",
    "MAX_AGENTS",
    "MAX_CONCURRENCY",
    "SCRIPT_COMMAND",
    "WorkflowTool",
    "plan",
    "render_prompts",
    "setting",
]
