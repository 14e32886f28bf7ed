"""What an engine run tells: its typed events, and the observer that hears them as they happen.

:class:`~taskloom.engine.Engine` yields :data:`EngineEvent` values; an :class:`EngineObserver`
(``EngineConfig.observer``) also hears the model's stream and every subagent's messages.
Importing these does not import the engine's loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

from taskloom._dataclass import dataclass
from taskloom.messages import Message, ToolUseBlock
from taskloom.tasks.notifications import Notification
from taskloom.tools.base import ToolResult

if TYPE_CHECKING:
    from taskloom.hooks import HookResult
    from taskloom.models.base import ModelRequest, StreamEvent


class EngineObserver(Protocol):
    """What :attr:`EngineConfig.observer` is told, as it happens; its calls must not block.

    It hears the main thread (``agent_id`` None) and every agent, and is a hook listener
    too (see :class:`taskloom.hooks.HookListener`).

    Attributes:
        partial_messages: Whether it wants the model's deltas (else only the whole answer).
    """

    partial_messages: bool

    def model_event(self, agent_id: str | None, event: ModelRequest | StreamEvent) -> None:
        """A request as it is sent, then its stream: deltas if wanted, the whole message."""
        ...

    def agent_message(self, agent_id: str, event: AssistantTurn | UserTurn) -> None:
        """A message entered a subagent's conversation (told by its run)."""
        ...

    def hook_started(self, hook_id: str, event: str, name: str) -> None:
        """A hook started (see :class:`taskloom.hooks.HookListener`)."""
        ...

    def hook_finished(self, hook_id: str, event: str, name: str, result: HookResult | None) -> None:
        """A hook ended (see :class:`taskloom.hooks.HookListener`)."""
        ...


class Meter(Protocol):
    """What an agent's budgets count of its engine, and what they have to tell its model."""

    def admit_tool_call(self) -> str | None:
        """Admit a tool call about to start; why it may not (a budget used up), if so.

        The call is counted when the session's usage ledger is charged with it.
        """

    def reminder(self) -> str | None:
        """A note for the model's next request (once), if there is one (time to wrap up)."""


@dataclass(frozen=True, slots=True)
class UserTurn:
    """A user message entered the conversation (the prompt, tool results, notifications).

    Attributes:
        message: The message.
        origin: ``prompt``, ``tool_results`` or ``notifications``.
        notifications: The notifications it delivers, if any.
    """

    message: Message
    origin: Literal["prompt", "tool_results", "notifications", "messages"]
    notifications: tuple[Notification, ...] = ()


@dataclass(frozen=True, slots=True)
class AssistantTurn:
    """The model answered."""

    message: Message


@dataclass(frozen=True, slots=True)
class ToolDone:
    """One tool call finished (before the results go back to the model)."""

    call: ToolUseBlock
    result: ToolResult


@dataclass(frozen=True, slots=True)
class Finished:
    """The run is over.

    Attributes:
        reason: ``end_turn`` when the model was done, ``max_turns`` at the turn limit.
        result: The text of the last assistant message.
    """

    reason: Literal["end_turn", "max_turns"]
    result: str


@dataclass(frozen=True, slots=True)
class Compacted:
    """The conversation was compacted: from here on it is ``messages``.

    Attributes:
        trigger: ``auto`` (the context window filled up, or the API said the prompt was
            too long) or ``manual`` (``/compact``, the SDK's compact request).
        pre_tokens: How many tokens the context held before.
        messages: The whole conversation now: the summary (a user message), then the last
            turns kept as they were.
    """

    trigger: Literal["manual", "auto"]
    pre_tokens: int
    messages: tuple[Message, ...]


EngineEvent = UserTurn | AssistantTurn | ToolDone | Finished | Compacted
