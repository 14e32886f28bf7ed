"""The permission gate of one tool call: the policy, then who may answer an ``ask``.

A call the policy allows runs; one it denies gets the denial. One that needs approval goes, in
order, to the PermissionRequest hooks (a hook may allow it, with a changed input, or deny it),
then to the prompter (the program driving the session, or the lead of a team), and with
neither, headless, it is denied with the rule that asked — never a wait without a bound.
While the prompter is asked, Notification hooks (``notification_type: permission_prompt``)
are told, as Claude Code tells them. They are side effects (a desktop notice, a log line): the
answer does not wait for them, and they are not cut off when it comes; each runs to its end or
its own timeout. The session's end waits for those still running, at most
:data:`NOTICES_CLOSE_WAIT_S`, then stops them.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.engine_config import EngineConfig
    from taskloom.hooks import HookOutcome, ToolCall
    from taskloom.permissions import PermissionPolicy, PermissionPrompter, PermissionRequest
    from taskloom.tasks.runtime import TaskRuntime

log = logging.getLogger(__name__)

#: The ``notification_type`` of the Notification hooks run while a call waits for approval.
PERMISSION_PROMPT = "permission_prompt"

#: Runs one hook event: (event, matcher target, payload) -> the outcome, None if no hook ran.
HookRunner = Callable[..., Awaitable["HookOutcome | None"]]
#: Seconds the session's end waits for Notification hooks still running before stopping them.
NOTICES_CLOSE_WAIT_S = 10.0


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
    hook_allowed: bool = False,
) -> Verdict:
    """Decide one call (see the module docstring).

    ``hook_allowed``: a PreToolUse hook allowed it; the rules and the prompt are skipped, but
    a read-only agent's refusal of what would change files still holds.
    """
    if policy is None:
        return Verdict(params=params, raw=raw)
    from taskloom.permissions import PromptError

    request = _request(tool, params, ctx, raw)
    if hook_allowed:
        refused = policy.read_only_refusal(request)
        return Verdict(tool_error(refused)) if refused else Verdict(params=params, raw=raw)
    decision = policy.decide(request)
    if decision.behavior == "ask":
        from taskloom.hooks import ToolCall

        hooked = await run_hook(
            "PermissionRequest", tool.name, call=ToolCall(request, policy.project_root),
            tool_name=tool.name, tool_input=raw, permission_suggestions=[],
        )  # fmt: skip
        if hooked is not None and (hooked.blocked or hooked.permission_decision == "deny"):
            why = hooked.permission_reason or hooked.block_reason.strip()
            return Verdict(
                tool_error(why or f"Permission to use {tool.name} was denied by a hook.")
            )
        if hooked is not None and hooked.permission_decision == "allow":
            return _changed(tool, params, raw, hooked.updated_input)
    if decision.behavior == "ask" and prompter is not None:
        # Notification hooks hear that someone is asked, alongside the question (see above).
        _notices(ctx.runtime).start(
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
        if not answer.allow:
            denied = tool.refused_message(params, answer.message)
            return Verdict(tool_error(denied), interrupt=answer.interrupt)
        if answer.mode is not None:  # e.g. a plan approved with edits accepted from now on
            policy.switch_mode(answer.mode)
        return _changed(tool, params, raw, answer.updated_input)
    if decision.behavior == "ask" and headless:
        decision = policy.headless(decision)
    if decision.behavior == "allow":
        return Verdict(params=params, raw=raw)
    return Verdict(tool_error(tool.denied_message(params, decision.reason, decision.rule)))


def _request(
    tool: Tool[Any], params: Any, ctx: ToolContext, raw: dict[str, Any]
) -> PermissionRequest:
    """The call as the permission rules see it."""
    from taskloom.permissions import PermissionRequest

    tool_name, kind = tool.permission_tool(params)
    return PermissionRequest(
        tool_name=tool_name,
        kind=kind,
        target=tool.permission_target(params, ctx),
        cwd=ctx.rules_base or ctx.cwd,  # a `cd` does not move the rules
        input=raw,
        approval=tool.call_approval(params),
        declared_read_only=tool.declared_read_only,
    )


async def fire(
    config: EngineConfig,
    runtime: TaskRuntime,
    event: str,
    target: str | None,
    call: ToolCall | None,
    payload: dict[str, Any],
) -> HookOutcome | None:
    """Run an engine's hooks of ``event`` (None when none is configured for it).

    ``call`` is the tool call of a tool event, which hooks' ``if`` rules must match. Hooks
    that run in the background go on in the session's :class:`~taskloom.hooks.BackgroundHooks`;
    what they say is for the engine's owner.
    """
    hooks = config.hooks
    if not hooks or not hooks.matching(event, target, call):
        return None
    from taskloom.hooks import Background, background_hooks, run_hooks

    if config.agent_id is not None:  # the main thread's payloads name no agent
        payload.setdefault("agent_id", config.agent_id)
        payload.setdefault("agent_type", config.metadata.get("agent_type"))
    policy = config.permissions
    return await run_hooks(
        hooks,
        event,
        payload,
        target=target,
        cwd=config.cwd,
        session_id=config.session_id,
        transcript_path=config.transcript_path,
        permission_mode=str(policy.mode) if policy is not None else "default",
        listener=config.observer,
        call=call,
        background=Background(background_hooks(runtime), config.owner),
    )


def hook_call(
    tool: Tool[Any],
    params: Any,
    ctx: ToolContext,
    raw: dict[str, Any],
    policy: PermissionPolicy | None,
) -> ToolCall:
    """The call as hooks' ``if`` rules see it: as the permission rules do."""
    from taskloom.hooks import ToolCall

    request = _request(tool, params, ctx, raw)
    return ToolCall(request, policy.project_root if policy is not None else request.cwd)


class _Notices:
    """A session's Notification hooks still running: each to its end, the rest stopped at close.

    Args:
        runtime: The session's runtime, whose end waits for them (see :meth:`close`).
    """

    def __init__(self, runtime: TaskRuntime) -> None:
        self._running: set[asyncio.Task[HookOutcome | None]] = set()
        runtime.on_close(self.close)

    def start(self, run: Awaitable[HookOutcome | None]) -> None:
        """Run the hooks of ``run`` on their own: no one waits for them, nor stops them."""

        async def alone() -> HookOutcome | None:
            return await run

        task = asyncio.get_running_loop().create_task(alone(), name="notification hooks")
        self._running.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[HookOutcome | None]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Their outcome decides nothing: a failure of theirs is only logged.
            log.error("Notification hooks failed", exc_info=task.exception())

    async def close(self) -> None:
        """Wait for those still running, at most :data:`NOTICES_CLOSE_WAIT_S`; stop the rest.

        Stopping one kills its process trees (see :func:`taskloom.hooks.run_hooks`).
        """
        if not self._running:
            return
        running = list(self._running)
        _, late = await asyncio.wait(running, timeout=NOTICES_CLOSE_WAIT_S)
        for task in late:
            task.cancel()
        if late:
            log.warning("%d Notification hook run(s) stopped at the session's end", len(late))
            await asyncio.wait(late)


#: Each session's running Notification hooks (a runtime is one session's).
_BY_RUNTIME: weakref.WeakKeyDictionary[TaskRuntime, _Notices] = weakref.WeakKeyDictionary()


def read_denied(policy: PermissionPolicy | None, cwd: Path) -> Callable[[str], bool] | None:
    """What tells a tool which paths the rules deny reading (None: no rules, none is).

    Tools that read files on their own (Grep and Glob skip such files) ask it per path.
    """
    if policy is None:
        return None
    from taskloom.permissions import PermissionRequest

    def denied(path: str) -> bool:
        request = PermissionRequest("Read", "read", path, cwd, {"file_path": path})
        return policy.decide(request).behavior == "deny"

    return denied


def _notices(runtime: TaskRuntime) -> _Notices:
    """The running Notification hooks of ``runtime``'s session."""
    found = _BY_RUNTIME.get(runtime)
    if found is None:
        found = _BY_RUNTIME[runtime] = _Notices(runtime)
    return found


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
