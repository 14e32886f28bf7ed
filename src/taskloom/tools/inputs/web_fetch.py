"""Input models of :mod:`taskloom.tools.web_fetch` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class WebFetchInput(ToolInput):
    """WebFetch's input."""

    url: str = Field(description="The URL to fetch content from")
    prompt: str = Field(description="The prompt to run on the fetched content")
