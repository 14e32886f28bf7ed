"""Language model providers behind one protocol (see :mod:`taskloom.models.base`)."""

from taskloom.models.base import (
    MessageComplete,
    Model,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolSpec,
    ToolUseStart,
)

__all__ = [
    "MessageComplete",
    "Model",
    "ModelRequest",
    "StreamEvent",
    "TextDelta",
    "ThinkingDelta",
    "ToolInputDelta",
    "ToolSpec",
    "ToolUseStart",
]
