"""The Skill tool: the model loads a skill (or a described custom command) by its name.

Claude Code's name and input (``skill``, optional ``args``). Its description lists what may be
invoked, by name and description only; the body is read when invoked. The result says
``Launching skill: <name>``, then the instructions (a skill's start with its base directory,
where its other files are), its ``!`shell command``` patterns replaced by their output
(:mod:`taskloom.tools.prompt_shell`; one refused or failing makes the call an error). From then
on, for the rest of the calling agent's turn, the skill's ``allowed-tools`` are allowed without
asking (:meth:`PermissionPolicy.grant`), and its ``model``, if it names one, answers the main
thread's next requests (:meth:`ModelSwitch.choose_for_turn`; a subagent keeps its own). A skill
that grants tools asks first, as any tool that asks does (an allow rule ``Skill(name)`` or
``Skill`` answers); one that grants none runs. A deny rule ``Skill(name)`` refuses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskloom.errors import TaskloomError
from taskloom.models.base import ToolSpec
from taskloom.models.switch import ModelSwitch
from taskloom.permissions.rules import Approval
from taskloom.skills.catalog import PromptCommand, SkillCatalog
from taskloom.skills.expand import allow_rules, instructions
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error
from taskloom.tools.prompt_shell import (
    PromptShellError,
    ShellPlace,
    has_commands,
    run_prompt_commands,
)

if TYPE_CHECKING:
    from taskloom.tools.inputs.skill import SkillInput

#: The longest description of one skill in the listing, in characters.
MAX_LISTED_DESCRIPTION = 250

DESCRIPTION = """\
Execute a skill within the main conversation

When users ask you to perform tasks, check if any of the available skills match. Skills \
provide specialized capabilities and domain knowledge.

When users reference a "slash command" or "/<something>" (e.g., "/commit", "/review-pr"), \
they are referring to a skill. Use this tool to invoke it.

How to invoke:
- Use this tool with the skill name and optional arguments
- Examples:
  - `skill: "pdf"` - invoke the pdf skill
  - `skill: "commit", args: "-m 'Fix bug'"` - invoke with arguments
  - `skill: "review-pr", args: "123"` - invoke with arguments
  - `skill: "ms-office-suite:pdf"` - invoke using fully qualified name

Important:
- Available skills are listed below
- When a skill matches the user's request, this is a BLOCKING REQUIREMENT: invoke the \
relevant Skill tool BEFORE generating any other response about the task
- NEVER mention a skill without actually calling this tool
- Do not invoke a skill that is already running
- Do not use this tool for built-in CLI commands (like /help, /clear, etc.)
- If you see a <command-name> tag in the current conversation turn, the skill has ALREADY \
been loaded - follow the instructions directly instead of calling this tool again"""


#: :class:`SkillInput`'s closed schema written out (see ``Tool.static_schema``).
SKILL_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "The Skill tool's input.",
    "properties": {
        "skill": {
            "description": 'The skill name. E.g., "commit", "review-pr", or "pdf"',
            "type": "string",
        },
        "args": {"type": "string", "description": "Optional arguments for the skill"},
    },
    "required": ["skill"],
    "type": "object",
}


def listing(commands: list[PromptCommand]) -> str:
    """The skills the model may invoke, one a line: ``- name: description``."""
    lines = []
    for command in commands:
        text = " ".join(command.description.split())
        if len(text) > MAX_LISTED_DESCRIPTION:
            text = text[: MAX_LISTED_DESCRIPTION - 1] + "…"
        lines.append(f"- {command.name}: {text}")
    return "\n".join(lines)


class SkillTool(Tool["SkillInput"]):
    """Loads a skill's instructions and allows its tools for the turn (see the module).

    Args:
        catalog: The session's skills and custom commands.
    """

    name = "Skill"
    description = DESCRIPTION
    input_model = "taskloom.tools.inputs.skill:SkillInput"
    static_schema = (input_model, SKILL_SCHEMA)
    kind = "read"
    #: The instructions are the point of the call: never cut to a preview.
    max_result_chars = None

    def __init__(self, catalog: SkillCatalog) -> None:
        self.catalog = catalog

    def spec(self) -> ToolSpec:
        """Offered with the skills it may load listed after the description."""
        offered = listing(self.catalog.for_model())
        text = f"{DESCRIPTION}\n\nThe following skills are available for use with this tool:\n\n"
        return ToolSpec(self.name, text + offered, self.input_schema())

    def _find(self, name: str) -> PromptCommand | None:
        found = self.catalog.get(name.strip())
        return found if found is not None and found.model_invocable else None

    def call_approval(self, params: SkillInput) -> Approval:
        """A skill that allows tools asks first; one that allows none goes by the rules."""
        found = self._find(params.skill)
        return "ask" if found is not None and found.allowed_tools else "rules"

    def permission_target(self, params: SkillInput, ctx: ToolContext) -> str | None:
        """The skill's name: ``Skill(name)`` rules match it."""
        return params.skill.strip().removeprefix("/")

    async def call(self, params: SkillInput, ctx: ToolContext) -> ToolResult:
        """Load the skill: its instructions are the result; its tools allowed for the turn."""
        name = params.skill.strip().removeprefix("/")
        found = self.catalog.get(name)
        if found is None:
            return tool_error(f"Unknown skill: {name}")
        if not found.model_invocable:
            return tool_error(
                f"Skill {name} cannot be used with Skill tool due to disable-model-invocation"
            )
        config = ctx.engine.config if ctx.engine is not None else None  # None: no engine
        policy = config.permissions if config is not None else None
        text = instructions(found, params.args or "", ctx.runtime.session_id)
        if has_commands(text):
            place = ShellPlace(
                runtime=ctx.runtime,
                owner=ctx.owner,
                cwd=ctx.cwd,
                rules_base=ctx.rules_base or ctx.cwd,
                policy=policy,
                settings=ctx.settings,
                agent_id=ctx.agent_id,
            )
            try:
                text = await run_prompt_commands(text, found, place)
            except PromptShellError as exc:
                return tool_error(str(exc))
        switch = config.model if config is not None else None
        if found.model and isinstance(switch, ModelSwitch):
            try:  # the rest of this turn asks the skill's model
                switch.choose_for_turn(found.model, ctx.settings)
            except TaskloomError as exc:
                return tool_error(f"Skill {name} ({found.path}): model {found.model}: {exc}")
        if found.allowed_tools and policy is not None:
            policy.grant(allow_rules(found))
        data: dict[str, Any] = {"success": True, "commandName": name}
        if found.allowed_tools:
            data["allowedTools"] = list(found.allowed_tools)
        if found.model:
            data["model"] = found.model
        return ToolResult(f"Launching skill: {name}\n\n{text}", data=data)


__all__ = ["SKILL_SCHEMA", "SkillTool", "listing"]
