"""Asking someone outside the session whether a tool call may run.

A call the policy answers with ``ask`` is a denial in a headless run, unless the session has a
:class:`PermissionPrompter`: the program driving it (``claude-agent-sdk``'s ``can_use_tool``
callback, over the stream-json protocol) or a terminal. Its answer allows the call, maybe with
a changed input, or denies it with a message for the model.
"""

from __future__ import annotations

from typing import Any, Protocol

from taskloom._dataclass import dataclass
from taskloom.errors import TaskloomError
from taskloom.permissions.rules import Decision, PermissionRequest


@dataclass(frozen=True, slots=True)
class PromptAnswer:
    """What the one asked decided.

    Attributes:
        allow: Whether the call may run.
        message: Why not, for the model (a denial).
        updated_input: The input to run the call with instead (an allowance), if changed.
        interrupt: Stop the turn as well (a denial).
        mode: The permission mode to go on in, from now on (an allowance: Claude Code's
            ``setMode`` update, e.g. ``acceptEdits`` as a plan is approved), if any.
    """

    allow: bool
    message: str = ""
    updated_input: dict[str, Any] | None = None
    interrupt: bool = False
    mode: str | None = None


class PermissionPrompter(Protocol):
    """Answers the calls that need approval."""

    async def ask(
        self,
        request: PermissionRequest,
        decision: Decision,
        *,
        tool_use_id: str,
        agent_id: str | None,
    ) -> PromptAnswer:
        """Decide on ``request``, which the policy answered with ``decision`` (an ``ask``).

        Raises:
            PromptError: No answer could be had (the asker is gone, or did not answer in time).
        """
        ...


class PromptError(TaskloomError):
    """A permission prompt got no answer; the call is denied with this message."""
