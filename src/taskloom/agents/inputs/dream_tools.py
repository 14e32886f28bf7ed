"""Input models of :mod:`taskloom.agents.dream_tools` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class MemoryListInput(ToolInput):
    """Input of :class:`MemoryList`."""


class MemoryReadInput(ToolInput):
    """Input of :class:`MemoryRead`."""

    file_path: str = Field(description="The absolute path of a file in a memory directory.")


class MemoryWriteInput(ToolInput):
    """Input of :class:`MemoryWrite`."""

    file_path: str = Field(description="The absolute path of a file in a memory directory.")
    content: str = Field(description="The complete new content of the file.")
    reason: str = Field(
        min_length=1, description="Why, in a few words (e.g. merged two notes on X)."
    )


class MemoryDeleteInput(ToolInput):
    """Input of :class:`MemoryDelete`."""

    file_path: str = Field(description="The absolute path of a note in a memory directory.")
    reason: str = Field(
        min_length=1,
        description="Why it may go: stale (what makes it so) or merged into which note.",
    )
