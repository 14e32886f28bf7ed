"""The task events stream-json prints, in the shapes the Agent SDKs type them.

- ``system/task_started`` when a task is registered;
- ``system/task_updated`` when its status or its kind's fields change, with ``patch`` (what
  the SDKs read) and our own fields beside it;
- ``system/task_progress`` when an agent's progress changes: ``usage`` (``total_tokens``,
  ``tool_uses``, ``duration_ms``), as the SDKs show a running subagent's row;
- ``system/task_notification`` when a task's end is delivered to the main thread, with the
  SDKs' words for its status (``completed``, ``failed``, ``stopped``). A stall or a monitor's
  event is no end: it has no such event (the model is told of it all the same).
"""

from __future__ import annotations

from typing import Any

from taskloom.tasks.kinds import kind_of
from taskloom.tasks.notifications import summarize
from taskloom.tasks.types import TaskState


def task_patch(state: Any) -> dict[str, Any]:
    """What changed in a task, as the SDKs type ``task_updated.patch``.

    ``status`` is the task's own (a stopped task is ``killed`` here, as in Claude Code's);
    ``end_time`` (milliseconds since the epoch) and ``error`` come once it has ended.
    """
    patch: dict[str, Any] = {
        "status": state.status.value,
        "is_backgrounded": state.is_backgrounded,
    }
    if state.end_time is not None:
        patch["end_time"] = int(state.end_time * 1000)
    error = getattr(state, "error", None) or state.stopped_reason
    if error and state.terminal:
        patch["error"] = str(error)
    return patch


def notified_status(status: str | None) -> str | None:
    """A task's status as ``task_notification`` says it: a stopped (killed) task is ``stopped``.

    The SDKs type it ``completed | failed | stopped``; the model-facing notification keeps the
    task's own status (see docs/contracts.md, Notifications).
    """
    return "stopped" if status == "killed" else status


def _without_clock(fields: Any) -> Any:
    """``fields`` less every ``duration_ms`` in them: a running task's grows at each look."""
    if isinstance(fields, dict):
        return {k: _without_clock(v) for k, v in fields.items() if k != "duration_ms"}
    return fields


class TaskEvents:
    """Turns what happens to tasks into event objects, each change once."""

    def __init__(self) -> None:
        self._said: dict[str, Any] = {}
        self._progress: dict[str, Any] = {}

    def of(self, kind: str, state: TaskState) -> list[dict[str, Any]]:
        """The events for a task's registration (``registered``) or change (``updated``)."""
        if kind == "registered":
            return [
                {
                    "type": "system",
                    "subtype": "task_started",
                    "task_id": state.id,
                    "task_type": state.type.value,
                    "description": state.description,
                    "tool_use_id": state.tool_use_id,
                    "output_file": state.output_file or None,
                    "is_backgrounded": state.is_backgrounded,
                }
            ]
        if kind != "updated":
            return []
        fields = kind_of(state).event_fields(state)  # exit_code, progress, ...
        # Printed when what it says changed: its status or its kind's fields (its agents'
        # work too), not the clock its duration reads.
        said = (state.status.value, _without_clock(fields))
        if self._said.get(state.id) == said:
            return []
        self._said[state.id] = said
        event: dict[str, Any] = {
            "type": "system",
            "subtype": "task_updated",
            "task_id": state.id,
            "task_type": state.type.value,
            "patch": task_patch(state),
        }
        event.update(fields)  # ours, beside the SDK's patch
        return [event, *self._progress_of(state, fields.get("progress"))]

    def _progress_of(self, state: TaskState, progress: Any) -> list[dict[str, Any]]:
        """A running agent's ``task_progress``, when its counts moved."""
        if not isinstance(progress, dict) or state.terminal:
            return []
        counts = (progress.get("total_tokens"), progress.get("tool_use_count"))
        if self._progress.get(state.id) == counts:
            return []
        self._progress[state.id] = counts
        event: dict[str, Any] = {
            "type": "system",
            "subtype": "task_progress",
            "task_id": state.id,
            "tool_use_id": state.tool_use_id,
            "description": state.description,
            "usage": {
                "total_tokens": progress.get("total_tokens") or 0,
                "tool_uses": progress.get("tool_use_count") or 0,
                "duration_ms": progress.get("duration_ms") or 0,
            },
        }
        activities = progress.get("recent_activities") or []
        if activities:
            event["summary"] = str(activities[-1])
        return [event]


def notification_event(state: TaskState | None, note: Any) -> dict[str, Any] | None:
    """``task_notification`` for a delivered notification of a task's end, else None."""
    if state is None or not state.terminal or note.kind != "terminal":
        return None
    return {
        "type": "system",
        "subtype": "task_notification",
        "task_id": note.task_id,
        "tool_use_id": state.tool_use_id,
        "status": notified_status(state.status.value),
        "output_file": state.output_file or None,
        "summary": summarize(state),
        "kind": note.kind,
    }
