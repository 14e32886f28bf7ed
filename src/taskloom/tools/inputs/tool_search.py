"""Input models of :mod:`taskloom.tools.tool_search` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput

#: How many matches a keyword search returns when ``max_results`` is not given.
DEFAULT_MAX_RESULTS = 5


class ToolSearchInput(ToolInput):
    """Input of :class:`ToolSearchTool`."""

    query: str = Field(
        description='What to look for among the deferred tools: "select:<tool_name>" (several '
        "separated by commas) to fetch tools by name, or keywords to search."
    )
    max_results: int = Field(
        default=DEFAULT_MAX_RESULTS,
        ge=1,
        description=f"The most tools a keyword search returns (default {DEFAULT_MAX_RESULTS}).",
    )
