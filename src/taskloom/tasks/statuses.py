"""The ``<task-statuses>`` context: which of a model's tasks still run, when that changed.

A model that started background work loses track of it: it waits for a task that has ended,
or starts one again that still runs. :class:`TaskBoard` follows the tasks one owner (the main
thread or an agent) has running and, when they changed in a way the model was not told, hands
the engine one ``<task-statuses>`` block for its next request: every task of the owner still
running, with its id, kind and description.

It is not sent on every request (it would cost tokens for nothing), only on news:

- a task runs that the model has not seen start (a resumed agent, one started for it, one
  that ran before a restart). A task started by one of the tool calls whose results go in the
  same message is not news: its result said so;
- a task ended (its ``<task-notification>`` goes in the same message) while others still run:
  the block says which. When none still runs, the notification says all.

An end with no notification was the model's own doing (its TaskStop, a foreground call that
waited): its result told. Teammates are members of the team, not tasks of the lead: they are
not listed (the team's idle notices tell of them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from taskloom.quoting import quote
from taskloom.tasks.types import TaskState, TaskType

if TYPE_CHECKING:
    from taskloom.tasks.notifications import Notification
    from taskloom.tasks.runtime import TaskRuntime

#: The element's name (its tag is escaped in the descriptions it quotes).
TAG = "task-statuses"

#: How each task type is named in the block.
_KINDS = {
    TaskType.LOCAL_BASH: "shell",
    TaskType.LOCAL_AGENT: "agent",
    TaskType.REMOTE_AGENT: "remote agent",
    TaskType.MONITOR_MCP: "monitor",
    TaskType.LOCAL_WORKFLOW: "workflow",
}
#: Not tasks of their owner's, for the model: members of its team, and the session's dreams
#: (its housekeeping, whose end the model is not told of).
_NOT_LISTED = frozenset({TaskType.IN_PROCESS_TEAMMATE, TaskType.DREAM})
#: The longest description shown (a prompt given as a description must not cost much).
_DESCRIPTION_CHARS = 120


class TaskBoard:
    """What one owner's model last knew of its running tasks, and the block when that is stale.

    Attributes:
        shown: The ids of the tasks the model knows are running.
    """

    def __init__(self, runtime: TaskRuntime, owner: str) -> None:
        """Follow the tasks ``owner`` has in ``runtime``; the model is taken to know of none."""
        self.runtime = runtime
        self.owner = owner
        self.shown: set[str] = set()

    def block(
        self, delivered: Iterable[Notification] = (), answered: Iterable[str] = ()
    ) -> str | None:
        """The ``<task-statuses>`` block for the next request, or None when nothing is news.

        Args:
            delivered: The notifications going to the model in the same message.
            answered: The ids of the tool calls whose results go in the same message.
        """
        ended = {n.task_id for n in delivered if n.kind == "terminal"} & self.shown
        calls = set(answered)
        running = [s for s in self.runtime.live(self.owner) if s.type not in _NOT_LISTED]
        untold = [s for s in running if s.id not in self.shown and s.tool_use_id not in calls]
        # An end told by its notification is news for the others only: what still runs.
        news = bool(untold) or bool(ended and running)
        self.shown = {s.id for s in running}
        return render(running) if news else None


def render(running: Iterable[TaskState]) -> str:
    """The block: the owner's tasks still running (there is at least one)."""
    lines = [
        f"<{TAG}>",
        "Your background tasks still running (you are notified when each ends; do not "
        "start one again):",
        *(_line(s) for s in running),
        f"</{TAG}>",
    ]
    return "\n".join(lines)


def _line(state: TaskState) -> str:
    kind = _KINDS.get(state.type, str(state.type))
    text = " ".join(state.description.split())
    if len(text) > _DESCRIPTION_CHARS:
        text = text[: _DESCRIPTION_CHARS - 1] + "…"
    return f"- {state.id} ({kind}): {quote(text)}"
