"""The permission gate of one tool call: the policy, then who may answer an ``ask``.

A call the policy allows runs; one it denies gets the denial. One that needs approval goes, in
order, to the PermissionRequest hooks (a hook may allow it, with a changed input, or deny it),
then to the prompter (the program driving the session, or the lead of a team), and with
neither, headless, it is denied with the rule that asked — never a wait without a bound.
While the prompter is asked, Notification hooks (``notification_type: permission_prompt``)
are told, as Claude Code tells them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.hooks import HookOutcome
    from taskloom.permissions import PermissionPolicy, PermissionPrompter

log = logging.getLogger(__name__)

#: The ``notification_type`` of the Notification hooks run while a call waits for approval.
PERMISSION_PROMPT = "permission_prompt"

#: Runs one hook event: (event, matcher target, payload) -> the outcome, None if no hook ran.
HookRunner = Callable[..., Awaitable["HookOutcome | None"]]


@dataclass
class Verdict:
    """What the gate decided.

    Attributes:
        result: The denial (a tool error) when the call may not run, else None.
        params: The (possibly changed) validated input when it may.
        raw: The (possibly changed) raw input when it may.
        interrupt: The prompter asked to stop the turn, too.
    """

    result: ToolResult | None = None
    params: Any = None
    raw: dict[str, Any] | None = None
    interrupt: bool = False


async def permit(
    tool: Tool[Any],
    params: Any,
    ctx: ToolContext,
    raw: dict[str, Any],
    *,
    policy: PermissionPolicy | None,
    prompter: PermissionPrompter | None,
    headless: bool,
    run_hook: HookRunner,
    agent_id: str | None,
) -> Verdict:
    """Decide one call (see the module docstring)."""
    if policy is None:
        return Verdict(params=params, raw=raw)
    from taskloom.permissions import PermissionRequest, PromptError

    request = PermissionRequest(
        tool_name=tool.name,
        kind=tool.kind,
        target=tool.permission_target(params, ctx),
        cwd=ctx.rules_base or ctx.cwd,  # a `cd` does not move the rules
        input=raw,
    )
    decision = policy.decide(request)
    if decision.behavior == "ask":
        hooked = await run_hook(
            "PermissionRequest", tool.name, tool_name=tool.name, tool_input=raw,
            permission_suggestions=[],
        )  # fmt: skip
        if hooked is not None and (hooked.blocked or hooked.permission_decision == "deny"):
            why = hooked.permission_reason or hooked.block_reason.strip()
            return Verdict(
                tool_error(why or f"Permission to use {tool.name} was denied by a hook.")
            )
        if hooked is not None and hooked.permission_decision == "allow":
            return _changed(tool, params, raw, hooked.updated_input)
    if decision.behavior == "ask" and prompter is not None:
        # Notification hooks hear that someone is asked; once answered, no one needs telling.
        notify: asyncio.Future[HookOutcome | None] = asyncio.ensure_future(
            run_hook(
                "Notification",
                PERMISSION_PROMPT,
                message=f"taskloom needs your permission to use {tool.name}",
                notification_type=PERMISSION_PROMPT,
            )
        )
        try:
            answer = await prompter.ask(
                request, decision, tool_use_id=ctx.tool_use_id, agent_id=agent_id
            )
        except PromptError as exc:
            return Verdict(tool_error(f"Permission to use {tool.name} was not given: {exc}"))
        finally:
            await _settle(notify)
        if not answer.allow:
            denied = answer.message or f"Permission to use {tool.name} was denied."
            return Verdict(tool_error(denied), interrupt=answer.interrupt)
        return _changed(tool, params, raw, answer.updated_input)
    if decision.behavior == "ask" and headless:
        decision = policy.headless(decision)
    if decision.behavior == "allow":
        return Verdict(params=params, raw=raw)
    return Verdict(tool_error(tool.denied_message(params, decision.reason, decision.rule)))


async def _settle(notify: asyncio.Future[HookOutcome | None]) -> None:
    """End the Notification hooks of a question that is answered: done, or cancelled now.

    Cancelling kills their process trees (see :func:`taskloom.hooks.run_hooks`); their
    outcome decides nothing, so a failure of theirs is only logged.
    """
    if not notify.done():
        notify.cancel()
    try:
        await notify
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():  # the call itself is cancelled
            raise
    except Exception:  # a hook's failure must not decide the call
        log.exception("Notification hooks failed")


def _changed(
    tool: Tool[Any], params: Any, raw: dict[str, Any], updated: dict[str, Any] | None
) -> Verdict:
    """Allowed, with the input the approver gave (validated again), if it gave one."""
    if updated is None or updated == raw:
        return Verdict(params=params, raw=raw)
    changed = tool.validate(updated)
    if isinstance(changed, ToolResult):
        return Verdict(changed)
    return Verdict(params=changed, raw=updated)
