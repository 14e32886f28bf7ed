"""What a remote agent's worker process prints of its agent's progress (one JSON line each).

An engine observer: each message of the agent's conversation becomes a ``progress`` event
with the lines a local agent writes to its output file (its text, ``→ Running: …`` per
call) and
its usage so far, read from its task and its session's usage ledger (for the parent's
ledger and budgets, which count cumulative tokens and cost).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from taskloom.agents.activity import describe_activity
from taskloom.engine import AssistantTurn, UserTurn
from taskloom.tasks.narrow import as_agent
from taskloom.tasks.usage import report_fields

if TYPE_CHECKING:
    from taskloom.hooks import HookResult
    from taskloom.models.base import ModelRequest, StreamEvent
    from taskloom.tasks.runtime import TaskRuntime


class ProgressOut:
    """Prints the agent's progress through ``emit`` (see the module docstring)."""

    def __init__(self, emit: Callable[[dict[str, Any]], None]) -> None:
        """Print each event with ``emit``."""
        self.emit = emit
        #: Whole messages are enough: no deltas.
        self.partial_messages = False
        #: The worker's runtime, once its session started (usage is read from it).
        self.runtime: TaskRuntime | None = None

    def model_event(self, agent_id: str | None, event: ModelRequest | StreamEvent) -> None:
        """Nothing: the messages are shown, not the stream (the engine charges the ledger)."""

    def agent_message(self, agent_id: str, event: AssistantTurn | UserTurn) -> None:
        """A message of an agent's conversation: its lines, and the agent's usage so far."""
        if not isinstance(event, AssistantTurn):
            return
        text = event.message.text().strip()
        lines = [text] if text else []
        # As a local agent's output file has them (``→ Running: pytest -q``).
        lines += [f"→ {describe_activity(c.name, c.input)}" for c in event.message.tool_uses()]
        progress: dict[str, Any] = {"type": "progress", "lines": lines}
        # The worker's agent is a subagent of its session (``local_agent``).
        agent = as_agent(self.runtime.get(agent_id) if self.runtime is not None else None)
        if agent is not None:
            progress.update(
                total_tokens=agent.total_tokens,
                input_tokens=agent.input_tokens,
                output_tokens=agent.output_tokens,
                tool_uses=agent.tool_uses,
            )
        if self.runtime is not None:  # every response of its session so far, per model
            progress.update(report_fields(self.runtime.usage.report_of()))
        self.emit(progress)

    def hook_started(self, hook_id: str, event: str, name: str) -> None:
        """Not shown."""

    def hook_finished(self, hook_id: str, event: str, name: str, result: HookResult | None) -> None:
        """Not shown."""

    def flush(self) -> None:
        """Nothing is held back (each event is printed as it comes)."""


__all__ = ["ProgressOut"]
