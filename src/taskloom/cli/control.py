"""Control requests to the program driving a stream-json session, and their answers.

taskloom asks the program (``claude-agent-sdk``) with ``{"type": "control_request",
"request_id": ID, "request": {"subtype": ...}}`` and the program answers with a
``control_response`` carrying the same id. Every wait is bounded: a program that does not
answer in time (``TASKLOOM_CONTROL_TIMEOUT`` seconds, default 300) is told the request is
cancelled (``control_cancel_request``), and the asker gets an error. At the end of stdin every
outstanding request fails at once: no answer can come any more.

The requests: ``can_use_tool`` (:class:`StdioPrompter`), ``hook_callback``
(:class:`SdkHookCaller`) and ``mcp_message`` (:class:`SdkMcpCaller`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable
from typing import Any

from taskloom.errors import TaskloomError
from taskloom.hooks import CallerGone
from taskloom.permissions import (
    Decision,
    PermissionMode,
    PermissionRequest,
    PromptAnswer,
    PromptError,
)

DEFAULT_TIMEOUT_S = 300.0


class ControlError(TaskloomError):
    """The program answered a control request with an error, or not at all."""


def control_timeout() -> float:
    """``TASKLOOM_CONTROL_TIMEOUT`` (seconds), else 300."""
    raw = os.environ.get("TASKLOOM_CONTROL_TIMEOUT")
    try:
        return DEFAULT_TIMEOUT_S if raw is None else max(0.1, float(raw))
    except ValueError:
        return DEFAULT_TIMEOUT_S


class ControlChannel:
    """The requests this side sends, each waiting for its answer by id."""

    def __init__(self, write: Callable[[dict[str, Any]], None]) -> None:
        """Send requests with ``write`` (one protocol object a line on stdout)."""
        self._write = write
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._closed: str | None = None

    async def request(self, subtype: str, **fields: Any) -> dict[str, Any]:
        """Ask the program; its answer's ``response`` object.

        Raises:
            ControlError: An error answer, no answer in time, or the input has ended.
        """
        if self._closed is not None:
            raise ControlError(self._closed)
        request_id = f"taskloom_{next(self._ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._write(
            {
                "type": "control_request",
                "request_id": request_id,
                "request": {"subtype": subtype, **fields},
            }
        )
        timeout = control_timeout()
        try:
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            self._cancel(request_id)
            raise ControlError(
                f"the program did not answer the {subtype} request in {timeout:g} s"
            ) from None
        except asyncio.CancelledError:
            self._cancel(request_id)
            raise
        finally:
            self._pending.pop(request_id, None)

    def resolve(self, message: dict[str, Any]) -> bool:
        """Hand a ``control_response`` to the request waiting for it; False if none waits."""
        response = message.get("response")
        if not isinstance(response, dict):
            return False
        future = self._pending.get(str(response.get("request_id")))
        if future is None or future.done():
            return False
        if response.get("subtype") == "success":
            body = response.get("response")
            future.set_result(body if isinstance(body, dict) else {})
        else:
            future.set_exception(ControlError(str(response.get("error") or "error")))
        return True

    @property
    def closed(self) -> bool:
        """Whether the program's input has ended (no request can be answered any more)."""
        return self._closed is not None

    def close(self, reason: str) -> None:
        """Fail every outstanding request, and every later one, with ``reason``."""
        self._closed = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ControlError(reason))

    def _cancel(self, request_id: str) -> None:
        if self._closed is None:
            self._write({"type": "control_cancel_request", "request_id": request_id})


class SdkHookCaller:
    """The program's hook functions, called with ``hook_callback`` requests."""

    def __init__(self, channel: ControlChannel) -> None:
        """Call over ``channel``."""
        self.channel = channel

    async def call(
        self, callback_id: str, data: dict[str, Any], tool_use_id: str | None
    ) -> dict[str, Any]:
        """Call the function registered as ``callback_id``; its output.

        Raises:
            CallerGone: The program's input has ended: it can no longer answer.
            ControlError: An error answer, or no answer in time.
        """
        try:
            return await self.channel.request(
                "hook_callback", callback_id=callback_id, input=data, tool_use_id=tool_use_id
            )
        except ControlError as exc:
            if self.channel.closed:
                raise CallerGone(str(exc)) from exc
            raise


class SdkMcpCaller:
    """The program's own MCP servers (``"type": "sdk"``), reached with ``mcp_message`` requests.

    Implements :class:`taskloom.mcp.program.McpMessageCaller`.
    """

    def __init__(self, channel: ControlChannel) -> None:
        """Send over ``channel``."""
        self.channel = channel

    async def send(self, server: str, message: dict[str, Any]) -> dict[str, Any]:
        """Send one JSON-RPC message to ``server`` (its ``--mcp-config`` key); the reply.

        Raises:
            ControlError: An error answer, none in time, or an answer without ``mcp_response``.
        """
        answer = await self.channel.request("mcp_message", server_name=server, message=message)
        reply = answer.get("mcp_response")
        if not isinstance(reply, dict):
            raise ControlError(f"mcp_message for {server!r} answered without an mcp_response")
        return reply


class StdioPrompter:
    """Permission prompts as ``can_use_tool`` requests (``--permission-prompt-tool stdio``)."""

    def __init__(self, channel: ControlChannel) -> None:
        """Ask over ``channel``."""
        self.channel = channel

    async def ask(
        self,
        request: PermissionRequest,
        decision: Decision,
        *,
        tool_use_id: str,
        agent_id: str | None,
    ) -> PromptAnswer:
        """Ask the program's ``can_use_tool`` callback about one call."""
        fields: dict[str, Any] = {
            "tool_name": request.tool_name,
            "input": request.input,
            "tool_use_id": tool_use_id,
            "permission_suggestions": _suggestions(decision),
            "blocked_path": None,
            "decision_reason": decision.reason,
        }
        if agent_id is not None:
            fields["agent_id"] = agent_id
        try:
            answer = await self.channel.request("can_use_tool", **fields)
        except ControlError as exc:
            raise PromptError(str(exc)) from exc
        if answer.get("behavior") == "allow":
            updated = answer.get("updatedInput")
            return PromptAnswer(
                True,
                updated_input=updated if isinstance(updated, dict) else None,
                mode=_set_mode(answer.get("updatedPermissions")),
            )
        if answer.get("behavior") == "deny":
            return PromptAnswer(
                False,
                message=str(answer.get("message") or ""),
                interrupt=bool(answer.get("interrupt")),
            )
        raise PromptError(f"can_use_tool answered {answer!r}: expected behavior allow or deny")


def _set_mode(updates: Any) -> str | None:
    """The mode a ``setMode`` entry of the answer's ``updatedPermissions`` switches to, if any.

    Raises:
        PromptError: It names no permission mode.
    """
    if not isinstance(updates, list):
        return None
    mode = None
    for update in updates:
        if isinstance(update, dict) and update.get("type") == "setMode":
            mode = update.get("mode")
            if not isinstance(mode, str) or mode not in {m.value for m in PermissionMode}:
                raise PromptError(f"can_use_tool answered setMode {mode!r}: not a permission mode")
    return mode


def _suggestions(decision: Decision) -> list[dict[str, Any]]:
    """The rule that would allow the call, as Claude Code offers it: added for the session."""
    rule = decision.suggestion
    if not rule:
        return []
    name, _, rest = rule.partition("(")
    entry: dict[str, Any] = {"toolName": name}
    if rest.endswith(")"):
        entry["ruleContent"] = rest[:-1]
    return [{"type": "addRules", "rules": [entry], "behavior": "allow", "destination": "session"}]
