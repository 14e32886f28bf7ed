"""Input models of :mod:`taskloom.tools.structured` (imported on first use)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class StructuredValue(ToolInput):
    """Input of :class:`StructuredOutput`: whatever JSON object the schema accepts."""

    value: dict[str, Any] = Field(default_factory=dict)
