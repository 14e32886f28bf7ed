"""Readable one-line descriptions of what an agent is doing ("Reading src/app.py")."""

from __future__ import annotations

from typing import Any

_FORMS = {
    "Read": ("Reading", "file_path"),
    "Write": ("Writing", "file_path"),
    "Edit": ("Editing", "file_path"),
    "Glob": ("Finding files", "pattern"),
    "Grep": ("Searching for", "pattern"),
    "Bash": ("Running:", "command"),
    "TaskOutput": ("Reading output of", "task_id"),
    "TaskStop": ("Stopping", "task_id"),
    "Agent": ("Delegating:", "description"),
    "SendMessage": ("Messaging", "to"),
    "WebFetch": ("Fetching", "url"),
}


def describe_activity(tool: str, params: dict[str, Any], width: int = 80) -> str:
    """``Reading src/app.py``, ``Running: pytest -q``, or the tool's name."""
    verb, key = _FORMS.get(tool, (tool, ""))
    value = params.get(key) if key else None
    if not isinstance(value, str) or not value:
        return verb if tool in _FORMS else tool
    value = " ".join(value.split())
    if len(value) > width:
        value = value[: width - 1] + "…"
    return f"{verb} {value}"
