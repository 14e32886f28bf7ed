"""TodoWrite: the task list an agent keeps for itself, as Claude Code's.

Each agent has its own list (the main thread one, each subagent one): a call replaces the whole
list, and a list whose items are all completed is cleared. The list lives beside the
conversation (:attr:`taskloom.engine.Engine.todos`), not only in it: a compaction writes it
into the summary message (:func:`TodoList.summary`), a resumed conversation finds it again in
its last TodoWrite call or that summary (:meth:`TodoList.from_messages`), and the REPL's panel
shows the main thread's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.messages import Message, TextBlock, ToolUseBlock
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.tools.inputs.todo import Status, TodoItem, TodoWriteInput


#: What the model is told after each call (Claude Code's words).
MODIFIED = (
    "Todos have been modified successfully. Ensure that you continue to use the todo list to "
    "track your progress. Please proceed with the current tasks if applicable"
)
#: How the list starts in a compaction's summary message (and is found there on a resume).
SUMMARY_HEAD = (
    "Your todo list (TodoWrite) when the conversation was summarized; keep it up to date:"
)

DESCRIPTION = """\
Use this tool to create and manage a structured task list for your current session. It helps \
you track progress and organize multi-step work, and it shows the user how the work is going.

When to use it:
- A task needs 3 or more distinct steps, or careful planning
- The user gives several tasks at once (a numbered or comma-separated list)
- New instructions arrive: capture them as todos
- Before you start a task, mark it in_progress; as soon as it is done, mark it completed
  (do not batch completions), and add any follow-up tasks you discover

When not to use it: a single, straightforward task, a trivial one, or a purely \
conversational or informational request.

Each call replaces the whole list. Each todo has:
- content: what needs to be done, in the imperative ("Run the tests")
- activeForm: the same in the present continuous, shown while it runs ("Running the tests")
- status: pending, in_progress or completed

Keep exactly one task in_progress at a time. Mark a task completed only when it is fully \
done: with tests failing, an implementation partial or an error unresolved, keep it \
in_progress and add a task for what blocks it. Remove tasks that are no longer relevant."""


@dataclass(frozen=True, slots=True)
class Todo:
    """One item of an agent's list.

    Attributes:
        content: What needs to be done.
        status: ``pending``, ``in_progress`` or ``completed``.
        active_form: What is being done, while it runs.
    """

    content: str
    status: Status
    active_form: str

    def as_json(self) -> dict[str, str]:
        """The item as the model wrote it (Claude Code's field names)."""
        return {"content": self.content, "status": self.status, "activeForm": self.active_form}


@dataclass(slots=True)
class TodoList:
    """One agent's todo list (see the module docstring).

    Attributes:
        items: The list, in the model's order; empty when there is none.
    """

    items: list[Todo] = field(default_factory=list)

    def replace(self, todos: Sequence[TodoItem]) -> list[Todo]:
        """Take ``todos`` as the whole list (cleared when all are completed); the old list."""
        old = self.items
        new = [Todo(t.content, t.status, t.activeForm) for t in todos]
        self.items = [] if all(t.status == "completed" for t in new) else new
        return old

    @property
    def active(self) -> Todo | None:
        """The first item in progress, if any."""
        return next((t for t in self.items if t.status == "in_progress"), None)

    def summary(self) -> str | None:
        """The list for a compaction's summary message (None when empty)."""
        if not self.items:
            return None
        return f"{SUMMARY_HEAD}\n{json.dumps([t.as_json() for t in self.items])}"

    @classmethod
    def from_messages(cls, messages: Sequence[Message]) -> TodoList:
        """The list a conversation left: its last TodoWrite call, or its compaction summary."""
        for message in reversed(messages):
            for block in reversed(message.content):
                raw: Any = None
                if isinstance(block, ToolUseBlock) and block.name == TodoWriteTool.name:
                    raw = block.input
                elif isinstance(block, TextBlock) and block.text.startswith(SUMMARY_HEAD):
                    try:
                        raw = {"todos": json.loads(block.text[len(SUMMARY_HEAD) :])}
                    except ValueError:
                        continue
                if raw is None:
                    continue
                # Only a conversation with a list imports the model (and pydantic).
                from pydantic import ValidationError

                from taskloom.tools.inputs.todo import TodoWriteInput

                try:
                    parsed = TodoWriteInput.model_validate(raw)
                except ValidationError:
                    continue  # a call the tool refused left the list as it was
                found = cls()
                found.replace(parsed.todos)
                return found
        return cls()


#: :class:`TodoWriteInput`'s closed schema written out (see ``Tool.static_schema``): offered at
#: every start-up, it is not generated then.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "TodoWrite's input.",
    "properties": {
        "todos": {
            "description": "The updated todo list",
            "items": {
                "additionalProperties": False,
                "description": "One todo.",
                "properties": {
                    "content": {
                        "description": "What needs to be done (imperative form)",
                        "minLength": 1,
                        "type": "string",
                    },
                    "status": {
                        "description": "pending, in_progress or completed",
                        "enum": ["pending", "in_progress", "completed"],
                        "type": "string",
                    },
                    "activeForm": {
                        "description": "The task in the present continuous, shown while it runs",
                        "minLength": 1,
                        "type": "string",
                    },
                },
                "required": ["content", "status", "activeForm"],
                "type": "object",
            },
            "type": "array",
        }
    },
    "required": ["todos"],
    "type": "object",
}


class TodoWriteTool(Tool["TodoWriteInput"]):
    """Replaces the calling agent's todo list."""

    name = "TodoWrite"
    description = DESCRIPTION
    input_model = "taskloom.tools.inputs.todo:TodoWriteInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "other"

    async def call(self, params: TodoWriteInput, ctx: ToolContext) -> ToolResult:
        """Replace the list; the model is told so, hooks see the old and new lists."""
        todos: TodoList | None = getattr(ctx.engine, "todos", None)
        if todos is None:
            return tool_error("TodoWrite needs an agent to keep the list: none runs this call")
        old = todos.replace(params.todos)
        # Claude Code's hooks see the list as written, even one cleared for being all done.
        data = {
            "oldTodos": [t.as_json() for t in old],
            "newTodos": [t.model_dump() for t in params.todos],
        }
        return ToolResult(MODIFIED, data=data, response=data)


__all__ = ["MODIFIED", "SUMMARY_HEAD", "Todo", "TodoList", "TodoWriteTool"]
