"""Running the command hooks of one event and folding their answers into one outcome.

Each hook is ``sh -c COMMAND``, a short-lived program run by
:func:`~taskloom.process.run.run_program`: in its own session, tagged with a private
``TASKLOOM_TASK_ID`` recorded in the store before it starts (so a hook still running when
taskloom is SIGKILLed is stopped by the next session's orphan sweep). The event JSON goes to
stdin; stdout and stderr come back on separate pipes, each kept up to
:data:`MAX_CAPTURE_BYTES` (a hook whose output was cut is reported). Nothing of a hook outlives
it: at its timeout the tree is killed (and the kill verified), and after a normal exit whatever
still carries its tag is killed the same way, daemonised (``setsid``, pipes closed) or not —
hooks are short checks, not a way to start daemons. A kill that cannot be verified keeps the
hook's store record, so the next orphan sweep tries again, and is said in its stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Coroutine, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any, Literal, Protocol

from taskloom._dataclass import dataclass
from taskloom.errors import TaskloomError
from taskloom.hooks.background import Background, async_request
from taskloom.hooks.config import (
    CallbackHook,
    CallerGone,
    CommandHook,
    HookCaller,
    HookConfig,
    HookEvent,
    ToolCall,
)
from taskloom.process.run import FirstLine, ProgramError, run_program
from taskloom.tasks.ids import new_uuid

_log = logging.getLogger("taskloom.hooks")

#: Bytes of stdout (and, separately, of stderr) kept per hook.
MAX_CAPTURE_BYTES = 1024 * 1024
#: Seconds between SIGTERM and SIGKILL when a hook's tree is killed.
KILL_GRACE_S = 1.0
_SHELL = "/bin/sh"

PermissionDecision = Literal["allow", "deny", "ask"]
_RANK: dict[str, int] = {"allow": 0, "ask": 1, "deny": 2}
# Events whose input has no permission_mode in Claude Code.
_NO_PERMISSION_MODE = frozenset(
    {HookEvent.SESSION_START, HookEvent.SESSION_END, HookEvent.SUBAGENT_START}
)
# Events where plain (non-JSON) stdout of a successful hook is context for the model.
# (PreCompact's is added to the summary's instructions, as Claude Code does.)
_STDOUT_IS_CONTEXT = frozenset(
    {
        HookEvent.USER_PROMPT_SUBMIT,
        HookEvent.SESSION_START,
        HookEvent.SUBAGENT_START,
        HookEvent.PRE_COMPACT,
    }
)


@dataclass(frozen=True, slots=True)
class HookResult:
    """What one hook did.

    Attributes:
        command: The command line.
        exit_code: Its exit status (negative: killed by that signal); None if it never started.
        stdout: Captured standard output (at most :data:`MAX_CAPTURE_BYTES`).
        stderr: Captured standard error (same bound), or why the hook could not start.
        timed_out: Whether it was killed at its timeout.
        duration: Seconds from start to the end of its process tree.
        cut: What of its output was left out past the cap ('' when nothing was).
        backgrounded: It went on in the background (its first stdout line said
            ``{"async": true}``): it answers nothing here.
    """

    command: str
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration: float
    cut: str = ""
    backgrounded: bool = False


@dataclass(slots=True)
class HookOutcome:
    """The combined answer of every hook run for one event.

    Attributes:
        blocked: A hook exited with 2 or answered ``decision: block``. For PreToolUse the tool
            call is refused; for Stop / SubagentStop the agent keeps going with
            ``block_reason`` as its next input; for UserPromptSubmit the prompt is dropped.
        block_reason: The blocking hooks' stderr (exit 2) or JSON ``reason``, one per line.
        permission_decision: The strictest ``permissionDecision`` given: deny, then ask,
            then allow; None when no hook gave one.
        permission_reason: The reason that came with the winning decision.
        updated_input: Replacement tool input (later hooks' keys override earlier ones).
        additional_context: Text for the model (``additionalContext``, or plain stdout of
            UserPromptSubmit, SessionStart and SubagentStart hooks).
        stop: A hook answered ``continue: false``: end the agent's turn loop.
        stop_reason: The ``stopReason`` that came with it (shown to the user).
        system_messages: ``systemMessage`` texts for the user.
        errors: Non-blocking failures (other exit codes, timeouts, bad JSON).
        results: One result per hook that ran, in configuration order.
    """

    blocked: bool = False
    block_reason: str = ""
    permission_decision: PermissionDecision | None = None
    permission_reason: str = ""
    updated_input: dict[str, Any] | None = None
    additional_context: list[str] = field(default_factory=list)
    stop: bool = False
    stop_reason: str = ""
    system_messages: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    results: list[HookResult] = field(default_factory=list)


class HookListener(Protocol):
    """Told of each hook as it starts and as it ends (``--include-hook-events``)."""

    def hook_started(self, hook_id: str, event: str, name: str) -> None:
        """Hook ``hook_id`` of ``event`` started; ``name`` is ``event:target`` or ``event``."""
        ...

    def hook_finished(self, hook_id: str, event: str, name: str, result: HookResult | None) -> None:
        """Hook ``hook_id`` ended with ``result`` (None: it was cancelled)."""
        ...


async def run_hooks(
    config: HookConfig,
    event: HookEvent | str,
    payload: Mapping[str, Any],
    *,
    target: str | None,
    cwd: Path,
    session_id: str,
    transcript_path: str | None,
    permission_mode: str | None = None,
    listener: HookListener | None = None,
    call: ToolCall | None = None,
    background: Background | None = None,
) -> HookOutcome:
    """Run every hook matching ``event`` and ``target`` in parallel and combine their answers.

    Args:
        config: The configured hooks.
        event: The event being fired.
        payload: Event fields added to the hook's stdin JSON (tool_name, tool_input,
            agent_id, agent_type, prompt...); the common fields below take precedence.
        target: The tool name (tool events) or agent type (Subagent events) for matchers.
        cwd: The hooks' working directory, also ``TASKLOOM_PROJECT_DIR`` and
            ``CLAUDE_PROJECT_DIR`` in their environment.
        session_id: Passed in the stdin JSON.
        transcript_path: Passed in the stdin JSON.
        permission_mode: The mode in effect, passed in the stdin JSON of the events that have
            it in Claude Code (all but SessionStart, SessionEnd and SubagentStart).
        listener: Told of each hook as it starts and ends.
        call: The tool call of a tool event, which hooks' ``if`` rules must match.
        background: Where ``async`` hooks, and hooks that say so on their first line, go
            on (see :mod:`taskloom.hooks.background`); without it they run to their end.

    Returns:
        The combined outcome; an empty one, with nothing spawned, when no hook matches.
    """
    hooks = config.matching(event, target, call)
    if not hooks:
        return HookOutcome()
    name = HookEvent(event)
    fields = hook_input(name, payload, session_id, transcript_path, cwd, permission_mode)
    data = json.dumps(fields).encode()
    env = {**os.environ, "TASKLOOM_PROJECT_DIR": str(cwd), "CLAUDE_PROJECT_DIR": str(cwd)}
    if background is not None:
        for h in hooks:
            if isinstance(h, CommandHook) and h.background:
                run = asyncio.ensure_future(_run_one(h.command, h.timeout, data, cwd, env))
                background.hooks.adopt(run, h, name, background.owner)
        hooks = [h for h in hooks if not (isinstance(h, CommandHook) and h.background)]
    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(
                _heard(
                    listener,
                    str(name),
                    f"{name}:{target}" if target else str(name),
                    _run_sync(h, name, data, cwd, env, background)
                    if isinstance(h, CommandHook)
                    else _call_one(config.caller, h, json.loads(data)),  # a copy each
                )
            )
            for h in hooks
        ]
    return _aggregate(name, [t.result() for t in tasks if not t.result().backgrounded])


def hook_input(
    event: HookEvent,
    payload: Mapping[str, Any],
    session_id: str,
    transcript_path: str | None,
    cwd: Path,
    permission_mode: str | None,
) -> dict[str, Any]:
    """The JSON object a hook of ``event`` reads (a callback gets the same, decoded).

    The common fields come first, as Claude Code orders them, then the event's own
    (``payload``); a common field wins over a payload field of the same name.
    """
    common: dict[str, Any] = {
        "session_id": session_id,
        "transcript_path": transcript_path,
        "cwd": str(cwd),
    }
    if permission_mode is not None and event not in _NO_PERMISSION_MODE:
        common["permission_mode"] = permission_mode
    common["hook_event_name"] = str(event)
    fields = {**common, **payload}
    fields.update(common)
    # Round-tripped through JSON: a callback gets exactly what a command reads.
    decoded: dict[str, Any] = json.loads(json.dumps(fields, default=str))
    return decoded


async def _heard(
    listener: HookListener | None, event: str, name: str, run: Coroutine[Any, Any, HookResult]
) -> HookResult:
    """Run one hook, telling ``listener`` (if any) of its start and end."""
    if listener is None:
        return await run
    hook_id = new_uuid()
    listener.hook_started(hook_id, event, name)
    try:
        result = await run
    except asyncio.CancelledError:
        listener.hook_finished(hook_id, event, name, None)
        raise
    listener.hook_finished(hook_id, event, name, result)
    return result


#: The events whose hook functions gate what happens: unanswerable, they block (CallerGone).
_GATES = frozenset({"PreToolUse", "PermissionRequest", "UserPromptSubmit"})


async def _call_one(
    caller: HookCaller | None, hook: CallbackHook, data: dict[str, Any]
) -> HookResult:
    """Call a program's hook function; its answer is read as a command's JSON output."""
    started = time.monotonic()
    name = hook.key
    if caller is None:  # registered without a program to call: nothing can answer
        return HookResult(name, None, "", "no program to call it", False, 0.0)
    tool_use_id = data.get("tool_use_id")
    try:
        async with asyncio.timeout(hook.timeout):
            output = await caller.call(
                hook.callback_id, data, tool_use_id if isinstance(tool_use_id, str) else None
            )
    except TimeoutError:
        if hook.block_on_failure:
            why = f"hook {name} did not answer within {hook.timeout:g} s"
            return HookResult(name, 2, "", why, False, time.monotonic() - started)
        return HookResult(name, None, "", "", True, time.monotonic() - started)
    except CallerGone as exc:
        if hook.block_on_failure or data.get("hook_event_name") in _GATES:
            why = f"hook {name} could not be asked ({exc}): blocked, as its rules cannot be checked"
            return HookResult(name, 2, "", why, False, time.monotonic() - started)
        return HookResult(name, None, "", str(exc), False, time.monotonic() - started)
    except TaskloomError as exc:
        if hook.block_on_failure:  # exit 2's meaning: blocked, with the reason
            return HookResult(name, 2, "", f"hook {name} failed: {exc}", False, 0.0)
        return HookResult(name, None, "", str(exc), False, time.monotonic() - started)
    return HookResult(name, 0, json.dumps(output), "", False, time.monotonic() - started)


async def _run_sync(
    hook: CommandHook,
    event: HookEvent,
    data: bytes,
    cwd: Path,
    env: Mapping[str, str],
    background: Background | None,
) -> HookResult:
    """Run a command hook, waiting for it unless its first line sends it to the background."""
    if background is None:
        return await _run_one(hook.command, hook.timeout, data, cwd, env)
    watch = FirstLine()
    run = asyncio.ensure_future(_run_one(hook.command, hook.timeout, data, cwd, env, watch))
    try:
        waits: list[asyncio.Future[Any]] = [run, watch.line]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        run.cancel()
        await asyncio.wait([run])  # its tree killed (run_program) before the caller goes on
        raise
    seconds = None if run.done() else async_request(watch.line.result())
    if seconds is None:
        return await run
    if seconds:
        watch.extend(seconds)
    background.hooks.adopt(run, hook, event, background.owner)
    return HookResult(hook.command, None, "", "", False, 0.0, backgrounded=True)


async def _run_one(
    command: str,
    timeout: float,
    data: bytes,
    cwd: Path,
    env: Mapping[str, str],
    first_line: FirstLine | None = None,
) -> HookResult:
    """Run one command hook to its end (or its timeout); what it did."""
    timed_out = False
    try:
        run = await run_program(
            [_SHELL, "-c", command],
            timeout=timeout,
            cwd=cwd,
            env=env,
            stdin=data,
            max_stdout=MAX_CAPTURE_BYTES,
            max_stderr=MAX_CAPTURE_BYTES,
            prefix="hook",
            grace=KILL_GRACE_S,
            first_line=first_line,
        )
    except ProgramError as exc:
        if exc.result is None:
            return HookResult(command, None, "", f"cannot start hook: {exc.reason}", False, 0.0)
        run, timed_out = exc.result, True
    stderr = run.stderr.decode(errors="replace")
    if run.survivors:
        stderr += f"\n[taskloom] processes survived the kill: {list(run.survivors)}"
    return HookResult(
        command,
        run.exit_code,
        run.stdout.decode(errors="replace"),
        stderr,
        timed_out,
        run.duration,
        run.cut_note(),
    )


def _aggregate(event: HookEvent, results: list[HookResult]) -> HookOutcome:
    out = HookOutcome(results=results)
    reasons: list[str] = []
    for r in results:
        if r.cut:  # whatever it answered, it was not read whole
            _error(out, r, r.cut)
        if r.timed_out:
            _error(out, r, f"timed out after {r.duration:.1f}s")
        elif r.exit_code is None:
            _error(out, r, r.stderr)
        elif r.exit_code == 2:
            out.blocked = True
            reasons.append(r.stderr.strip() or f"blocked by hook {r.command!r}")
        elif r.exit_code != 0:
            _error(out, r, f"exit code {r.exit_code}: {r.stderr.strip()}")
        else:
            _apply_output(out, event, r, reasons)
    out.block_reason = "\n".join(reasons)
    return out


def _error(out: HookOutcome, result: HookResult, message: str) -> None:
    text = f"hook {result.command!r}: {message}"
    _log.warning("%s", text)
    out.errors.append(text)


def _apply_output(out: HookOutcome, event: HookEvent, r: HookResult, reasons: list[str]) -> None:
    """Fold a successful hook's stdout into ``out``: JSON when it starts with ``{``.

    A first line ``{"async": true}`` (a hook that would have gone on in the background, run to
    its end where nothing holds it there) is not its answer: the JSON after it is.
    """
    text = r.stdout.strip()
    first, newline, rest = text.partition("\n")
    if newline and async_request(first.encode()) is not None:
        text = rest.strip()
    if not text.startswith("{"):
        if text and event in _STDOUT_IS_CONTEXT:
            out.additional_context.append(text)
        return
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        _error(out, r, f"invalid JSON output: {exc}")
        return
    if data.get("continue") is False:
        out.stop = True
        out.stop_reason = out.stop_reason or _text(data.get("stopReason"))
    decision = data.get("decision")
    if decision == "block":
        out.blocked = True
        reasons.append(_text(data.get("reason")) or f"blocked by hook {r.command!r}")
    elif decision == "approve" and event is HookEvent.PRE_TOOL_USE:
        _decide(out, "allow", _text(data.get("reason")))  # the older PreToolUse spelling
    if message := _text(data.get("systemMessage")):
        out.system_messages.append(message)
    specific = data.get("hookSpecificOutput")
    if not isinstance(specific, dict):
        return
    permission = specific.get("permissionDecision")
    if permission in _RANK:
        _decide(out, permission, _text(specific.get("permissionDecisionReason")))
    elif permission is not None:
        _error(out, r, f"unknown permissionDecision {permission!r} ignored")
    answer = specific.get("decision")  # PermissionRequest: {behavior, message, updatedInput}
    if event is HookEvent.PERMISSION_REQUEST and isinstance(answer, dict):
        behavior = answer.get("behavior")
        if behavior in ("allow", "deny"):
            _decide(out, behavior, _text(answer.get("message")))
        if isinstance(answer.get("updatedInput"), dict):
            out.updated_input = {**(out.updated_input or {}), **answer["updatedInput"]}
    updated = specific.get("updatedInput")
    if isinstance(updated, dict):
        out.updated_input = {**(out.updated_input or {}), **updated}
    if context := _text(specific.get("additionalContext")):
        out.additional_context.append(context)


def _decide(out: HookOutcome, decision: PermissionDecision, reason: str) -> None:
    """Keep the strictest decision (deny > ask > allow) with its reason."""
    current = out.permission_decision
    if current is None or _RANK[decision] > _RANK[current]:
        out.permission_decision = decision
        out.permission_reason = reason


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
