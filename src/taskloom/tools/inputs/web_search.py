"""Input models of :mod:`taskloom.tools.web_search` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class WebSearchInput(ToolInput):
    """WebSearch's input."""

    query: str = Field(min_length=2, description="The search query to use")
    allowed_domains: list[str] | None = Field(
        default=None, description="Only include search results from these domains"
    )
    blocked_domains: list[str] | None = Field(
        default=None, description="Never include search results from these domains"
    )
