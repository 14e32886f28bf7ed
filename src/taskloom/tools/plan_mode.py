"""EnterPlanMode and ExitPlanMode: plan mode entered and left by the model, as in Claude Code.

In plan mode the permission policy refuses edits and commands (:mod:`taskloom.permissions`).
EnterPlanMode asks for approval (a rule or bypassPermissions may give it) and switches the
session to plan mode. ExitPlanMode presents the plan: only someone asked can approve it (the
REPL's user, or the program's ``can_use_tool``; nobody in a headless run, where the call is
denied and plan mode stays). Approved, the session goes back to the mode plan mode was entered
from (default if none) — or the mode the approval named (``acceptEdits``); refused, the model
is told to keep planning. Both are the main thread's: subagents and teammates never get them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.tools.inputs.plan_mode import EnterPlanModeInput, ExitPlanModeInput

ENTERED = (
    "Entered plan mode. You should now focus on exploring the codebase and designing an "
    "implementation approach."
)
#: What follows :data:`ENTERED` in the result (Claude Code's words).
PLAN_STEPS = """\
In plan mode, you should:
1. Thoroughly explore the codebase to understand existing patterns
2. Identify similar features and architectural approaches
3. Consider multiple approaches and their trade-offs
4. Use AskUserQuestion if you need to clarify the approach
5. Design a concrete implementation strategy
6. When ready, use ExitPlanMode to present your plan for approval

Remember: DO NOT write or edit any files yet. This is a read-only exploration and planning \
phase."""
APPROVED = (
    "User has approved your plan. You can now start coding. Start with updating your todo "
    "list if applicable"
)
#: A subagent's plan goes back to its caller (Claude Code's words).
APPROVED_FOR_AGENT = (
    "User has approved the plan. There is nothing else needed from you now. Please respond "
    'with "ok"'
)

ENTER_DESCRIPTION = """\
Requests permission to enter plan mode for complex tasks requiring exploration and design.

Use it before starting a non-trivial implementation when the right approach is not obvious: \
a new feature, several valid approaches, changes touching many files, architectural \
decisions, or unclear requirements. Do not use it for simple tasks (a typo, a small fix, a \
clearly specified single change) or for pure research.

In plan mode you explore and design without editing files or running commands that change \
anything, then present the plan with ExitPlanMode for the user's approval. The user must \
consent to entering plan mode."""

EXIT_DESCRIPTION = """\
Use this tool when you are in plan mode and have finished planning an implementation, to \
present the plan to the user for approval. Plan mode ends once the user approves it.

Only use it when the task requires planning the implementation steps of a task that needs \
writing code. For research tasks (gathering information, searching files, reading files, \
understanding the codebase) do not use it.

Before using it, make sure the plan is clear and unambiguous; if requirements are unclear, \
use AskUserQuestion first. Do not ask for approval any other way (e.g. "Is this plan \
okay?"): this tool is how the plan is approved."""


#: :class:`EnterPlanModeInput`'s closed schema written out (see ``Tool.static_schema``): offered at
#: every start-up, it is not generated then.
ENTER_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "EnterPlanMode takes no input.",
    "properties": {},
    "type": "object",
}


#: :class:`ExitPlanModeInput`'s closed schema written out (see ``Tool.static_schema``): offered at
#: every start-up, it is not generated then.
EXIT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "ExitPlanMode's input.",
    "properties": {
        "plan": {
            "description": "The plan you came up with, that you want to run by "
            "the user for approval. Supports markdown. The plan "
            "should be pretty concise.",
            "type": "string",
        }
    },
    "required": ["plan"],
    "type": "object",
}


class EnterPlanModeTool(Tool["EnterPlanModeInput"]):
    """Switches the session to plan mode, once approved."""

    name = "EnterPlanMode"
    description = ENTER_DESCRIPTION
    input_model = "taskloom.tools.inputs.plan_mode:EnterPlanModeInput"
    static_schema = (input_model, ENTER_SCHEMA)
    kind = "read"
    approval = "ask"
    concurrency_safe = True

    async def call(self, params: EnterPlanModeInput, ctx: ToolContext) -> ToolResult:
        """Go into plan mode; the model is told what plan mode asks of it."""
        if ctx.agent_id is not None:
            return tool_error("EnterPlanMode tool cannot be used in agent contexts")
        policy = _policy(ctx)
        if policy is None:
            return tool_error("EnterPlanMode has no permission mode to switch in this call")
        if ctx.engine is not None and ctx.engine.config.prompter is None:
            # Nobody could approve the plan (ExitPlanMode): plan mode would never end.
            return tool_error(
                "EnterPlanMode is not available in this non-interactive session: nobody could "
                "approve the plan to leave plan mode. Present your plan in your answer instead."
            )
        policy.switch_mode("plan")
        return ToolResult(f"{ENTERED}\n\n{PLAN_STEPS}", data={"message": ENTERED})


class ExitPlanModeTool(Tool["ExitPlanModeInput"]):
    """Presents the plan; approved, leaves plan mode (see the module docstring)."""

    name = "ExitPlanMode"
    description = EXIT_DESCRIPTION
    input_model = "taskloom.tools.inputs.plan_mode:ExitPlanModeInput"
    static_schema = (input_model, EXIT_SCHEMA)
    kind = "read"
    approval = "person"

    def denied_message(self, params: ExitPlanModeInput, reason: str, rule: Any) -> str:
        """Nobody could be asked (non-interactive, or dontAsk): plan mode stays."""
        if rule is not None:
            return reason
        return (
            "Nobody can approve the plan in this session (it runs non-interactively with no "
            "one to ask, or in dontAsk mode), so plan mode stays on. End your turn with the "
            "plan as your answer."
        )

    def refused_message(self, params: ExitPlanModeInput, message: str) -> str:
        """The plan was not approved: the model keeps planning."""
        said = f" The user said:\n{message}\n\n" if message else " "
        return (
            f"The user did not approve the plan and wants you to keep planning.{said}You are "
            "still in plan mode: do not edit files or run commands that change anything. "
            "Revise the plan, then present it again with ExitPlanMode."
        )

    async def call(self, params: ExitPlanModeInput, ctx: ToolContext) -> ToolResult:
        """The plan is approved (the gate asked): plan mode ends."""
        if ctx.agent_id is not None:
            return ToolResult(APPROVED_FOR_AGENT, data={"plan": params.plan, "isAgent": True})
        policy = _policy(ctx)
        # Left already when the approval named the mode to go on in (acceptEdits).
        if policy is not None:
            policy.leave_plan()
        data = {"plan": params.plan, "isAgent": False}
        if not params.plan.strip():
            return ToolResult(
                "User has approved exiting plan mode. You can now proceed.", data=data
            )
        return ToolResult(f"{APPROVED}\n\n## Approved Plan:\n{params.plan}", data=data)


def _policy(ctx: ToolContext) -> Any:
    """The calling agent's permission policy (None outside an engine, or with none)."""
    config = getattr(ctx.engine, "config", None)
    return getattr(config, "permissions", None)


__all__ = ["APPROVED", "ENTERED", "EnterPlanModeTool", "ExitPlanModeTool"]
