"""What the REPL prints of a conversation: streamed text, tool calls, results, notifications.

A :class:`TranscriptView` turns the main thread's stream and events into lines, each a
``(style, text)`` pair for the terminal's scrollback. The assistant's text arrives in pieces:
whole lines go to the scrollback as they complete, the line still being written is kept in
:attr:`TranscriptView.partial` for the live area below it. Tool calls are one line each
(``→ Bash(pytest -q)``), their results too (``← 12 passed``, ``✗`` for an error).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from taskloom.messages import Message, TextBlock, ToolUseBlock
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.types import TaskState
from taskloom.tools.base import ToolResult

Line = tuple[str, str]

#: The input field a tool call line shows, by tool.
_SHOWN_FIELD = {
    "Bash": "command",
    "Read": "file_path",
    "Write": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "NotebookEdit": "notebook_path",
    "Glob": "pattern",
    "Grep": "pattern",
    "WebFetch": "url",
    "WebSearch": "query",
    "Agent": "description",
    "Task": "description",
    "SendMessage": "to",
    "TaskOutput": "task_id",
    "TaskStop": "task_id",
}
#: Widest a call's argument or a result's first line is shown.
_SHOWN_WIDTH = 100


class TranscriptView:
    """The main thread's conversation as lines (see the module docstring).

    Args:
        emit: Called with the lines that are complete, in order.
    """

    def __init__(self, emit: Callable[[list[Line]], None]) -> None:
        self._emit = emit
        self.partial = ""
        #: Whether the answer being streamed has shown text already (deltas came).
        self._streamed = False

    def prompt(self, text: str) -> None:
        """The user's prompt, echoed as it was sent."""
        lines = text.splitlines() or [""]
        self._emit([("prompt", f"> {lines[0]}"), *(("prompt", f"  {line}") for line in lines[1:])])

    def delta(self, text: str) -> None:
        """A piece of the assistant's text."""
        self._streamed = True
        self.partial += text
        if "\n" in self.partial:
            *done, self.partial = self.partial.split("\n")
            self._emit([("assistant", line) for line in done])

    def answer(self, message: Message) -> None:
        """The assistant's whole answer: what was not streamed, then one line per tool call."""
        out: list[Line] = []
        if self._streamed:
            if self.partial:
                out.append(("assistant", self.partial))
        else:
            text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
            out += [("assistant", line) for line in text.splitlines() if text.strip()]
        self.partial, self._streamed = "", False
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                out.append(("tool", f"→ {call_line(block.name, block.input)}"))
        if out:
            self._emit(out)

    def result(self, call: ToolUseBlock, result: ToolResult) -> None:
        """A tool call's result, as its first line."""
        lines = [line for line in result.content.strip().splitlines() if line.strip()]
        first = _cut(lines[0].strip()) if lines else "(no output)"
        more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
        if result.is_error:
            self._emit([("error", f"  ✗ {first}{more}")])
        else:
            self._emit([("result", f"  ← {first}{more}")])

    def arrived(self, message: Message, notified: bool) -> None:
        """Messages that started a turn of their own (a teammate's, another session's).

        With ``notified``, the message's last text is the notifications, shown already when
        they landed.
        """
        texts = [b.text for b in message.content if isinstance(b, TextBlock)]
        if notified and texts:
            texts.pop()
        lines = [t.strip().splitlines()[0] for t in texts if t.strip()]
        if lines:
            self._emit([("note", f"✉ {_cut(line)}") for line in lines])

    def flush(self) -> None:
        """The turn stopped: whatever was being streamed goes to the scrollback as it is."""
        if self.partial:
            self._emit([("assistant", self.partial)])
        self.partial, self._streamed = "", False

    def note(self, text: str, style: str = "note") -> None:
        """A line of the REPL's own (a notification, a command's answer, an error)."""
        self._emit([(style, line) for line in (text.splitlines() or [""])])


def call_line(name: str, params: dict[str, Any]) -> str:
    """A tool call in a few words: ``Bash(pytest -q)``, ``Read(src/app.py)``."""
    key = _SHOWN_FIELD.get(name)
    value = params.get(key) if key else None
    if value is None:
        value = next((v for v in params.values() if isinstance(v, str) and v), None)
    if value is None:
        return name
    return f"{name}({_cut(' '.join(str(value).split()))})"


def landed(state: TaskState) -> str:
    """The line shown when a task of the main thread ends (its notification landed)."""
    summary = kind_of(state).summary(state)
    where = f" · output: {state.output_file}" if state.output_file else ""
    return f"● {state.id}: {summary}{where}"


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN_WIDTH else text[: _SHOWN_WIDTH - 1] + "…"


__all__ = ["Line", "TranscriptView", "call_line", "landed"]
