"""Transcripts: one JSON line per message, enough to resume a session.

Each line: ``{"type": "user"|"assistant", "uuid", "parentUuid", "sessionId", "timestamp",
"message": {...}}`` (the Claude Code shape), plus ``"origin"`` for user messages (``prompt``,
``tool_results``, ``notifications``). Lines are appended and flushed one by one, so a crash
loses at most the message being written; a torn last line is ignored on load.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from taskloom.messages import Message, ToolResultBlock
from taskloom.settings import ensure_private_dir

log = logging.getLogger(__name__)


class TranscriptWriter:
    """Appends messages to a transcript file."""

    def __init__(self, path: Path, session_id: str) -> None:
        """Open ``path`` for appending (created 0600 in a private directory)."""
        self.path = path
        self.session_id = session_id
        ensure_private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        self._file = os.fdopen(fd, "a", encoding="utf-8")
        self._last_uuid: str | None = None

    def append(self, message: Message, **extra: Any) -> str:
        """Write one message; returns its uuid."""
        line_id = str(uuid.uuid4())
        record = {
            "type": message.role,
            "uuid": line_id,
            "parentUuid": self._last_uuid,
            "sessionId": self.session_id,
            "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            **extra,
            "message": message.full(),
        }
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()
        self._last_uuid = line_id
        return line_id

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def load_messages(path: Path) -> list[Message]:
    """Read a transcript back into a conversation that a model will accept.

    A torn last line is dropped. If the session stopped between a tool call and its result,
    the missing results are filled in as errors saying the call was interrupted.
    """
    messages: list[Message] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return messages
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            messages.append(Message.model_validate(record["message"]))
        except (ValueError, KeyError) as exc:
            log.warning("%s:%d: unreadable transcript line skipped (%s)", path, number, exc)
    return _close_open_calls(messages)


def _close_open_calls(messages: list[Message]) -> list[Message]:
    if not messages or messages[-1].role != "assistant":
        return messages
    calls = messages[-1].tool_uses()
    if not calls:
        return messages
    results = [
        ToolResultBlock(
            tool_use_id=c.id,
            content="<tool_use_error>Interrupted: the session stopped before this call "
            "finished.</tool_use_error>",
            is_error=True,
        )
        for c in calls
    ]
    return [*messages, Message(role="user", content=list(results))]
