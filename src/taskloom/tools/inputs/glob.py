"""Input models of :mod:`taskloom.tools.glob` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class GlobInput(ToolInput):
    """Input of :class:`Glob`."""

    pattern: str = Field(description='The glob pattern to match files against, e.g. "**/*.py".')
    path: str | None = Field(
        default=None,
        description="The directory to search in; defaults to the current working directory. "
        "Omit it for the default rather than passing null or an empty string.",
    )
