"""Canonical messages: Anthropic-shaped content blocks, usage, and their (de)serialisation.

Every provider adapter converts to and from these; the engine, transcripts and the
``stream-json`` output use them as they are (the JSON form is the Anthropic Messages form).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

#: Key under which an adapter passes on a tool input that was not a JSON object.
INVALID_INPUT_KEY = "__invalid_input__"


class _Block(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextBlock(_Block):
    """Plain text."""

    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(_Block):
    """The model's visible reasoning (kept and sent back as the provider requires)."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


class ToolUseBlock(_Block):
    """A tool call made by the model."""

    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    #: Why this call must not run (set by taskloom, see :mod:`taskloom.untrusted`): the
    #: engine answers it with this as a tool error. Never serialised, so never sent.
    defect: str | None = Field(default=None, exclude=True)


class ToolResultBlock(_Block):
    """The result of a tool call, sent back in a user message."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[TextBlock] = ""
    is_error: bool = False

    def text(self) -> str:
        """The result as one string."""
        if isinstance(self.content, str):
            return self.content
        return "".join(b.text for b in self.content)


ContentBlock = Annotated[
    TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock, Field(discriminator="type")
]


class Usage(BaseModel):
    """Token counts of one model response (Anthropic field names)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def context_tokens(self) -> int:
        """Everything the model read: input plus cache reads and writes."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


class Message(BaseModel):
    """One conversation message.

    Assistant messages from a model carry ``id``, ``model``, ``stop_reason`` and ``usage``;
    ``sanitized`` lists what taskloom changed in the model's output before using it (kept in
    transcripts and ``stream-json``, not part of :meth:`wire`).
    """

    model_config = ConfigDict(extra="allow")

    role: Literal["user", "assistant"]
    content: list[ContentBlock]
    id: str | None = None
    model: str | None = None
    stop_reason: str | None = None
    usage: Usage | None = None
    sanitized: list[str] | None = None

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message holding one text block."""
        return cls(role="user", content=[TextBlock(text=text)])

    def text(self) -> str:
        """The concatenated text blocks (no tool blocks, no thinking)."""
        return "".join(b.text for b in self.content if isinstance(b, TextBlock))

    def tool_uses(self) -> list[ToolUseBlock]:
        """The tool calls in this message, in order."""
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    def wire(self) -> dict[str, Any]:
        """The Anthropic wire form (role and content only, no ``None`` fields)."""
        return {
            "role": self.role,
            "content": [b.model_dump(exclude_none=True) for b in self.content],
        }

    def full(self) -> dict[str, Any]:
        """The full JSON form, as printed in ``stream-json`` and kept in transcripts."""
        data = self.model_dump(exclude_none=True)
        if self.role == "assistant":
            data = {"id": self.id, "type": "message", **data}
        return data


MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)
