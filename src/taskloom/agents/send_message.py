"""SendMessage: steer a running agent, or resume a stopped one, by id or name."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import Field

from taskloom.errors import TaskError, ToolError
from taskloom.tools.base import Tool, ToolContext, ToolInput, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.agents.service import AgentService


class SendMessageInput(ToolInput):
    """Input of :class:`SendMessageTool`."""

    to: str = Field(description="The agent's id or the name it was given.")
    message: str | dict[str, Any] = Field(description="The message (text).")
    summary: str | None = Field(default=None, description="A 5-10 word preview.")


#: :class:`SendMessageInput`'s closed schema written out (see ``Tool.static_schema``), so that
#: offering the tool does not build the model; tests check it is the generated one.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`SendMessageTool`.",
    "properties": {
        "to": {"description": "The agent's id or the name it was given.", "type": "string"},
        "message": {
            "anyOf": [{"type": "string"}, {"additionalProperties": True, "type": "object"}],
            "description": "The message (text).",
        },
        "summary": {"type": "string", "description": "A 5-10 word preview."},
    },
    "required": ["to", "message"],
    "type": "object",
}


class SendMessageTool(Tool[SendMessageInput]):
    """Messages between agents."""

    name = "SendMessage"
    description = (
        "Send a message to an agent you started, by its id or name. A running agent sees it "
        "at its next tool boundary; a finished one is resumed in the background with it, "
        "keeping its context, and you are notified again when it finishes."
    )
    Input = SendMessageInput
    static_schema = (SendMessageInput, INPUT_SCHEMA)
    kind = "other"

    def __init__(self, service: AgentService) -> None:
        """Deliver through ``service``."""
        self.service = service

    async def call(self, params: SendMessageInput, ctx: ToolContext) -> ToolResult:
        """Queue or resume."""
        message = params.message
        text = message if isinstance(message, str) else json.dumps(message)
        try:
            reply = await self.service.send(params.to, text, ctx, summary=params.summary)
        except (ToolError, TaskError) as exc:
            return tool_error(str(exc))
        return ToolResult(reply, data={"to": params.to})
