"""Input models of :mod:`taskloom.tools.read` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools._pdf import MAX_PAGES_PER_CALL, MAX_PAGES_WITHOUT_RANGE
from taskloom.tools._text import DEFAULT_LIMIT
from taskloom.tools.inputs import ToolInput


class ReadInput(ToolInput):
    """Input of :class:`Read`."""

    file_path: str = Field(description="The absolute path of the file to read.")
    offset: int | None = Field(
        default=None,
        ge=0,
        description="The 1-based line number to start reading at. Only give it for files too "
        "long to read at once.",
    )
    limit: int | None = Field(
        default=None,
        ge=1,
        description=f"How many lines to read (default {DEFAULT_LIMIT}). Only give it for files "
        "too long to read at once.",
    )
    pages: str | None = Field(
        default=None,
        description=f'PDF files only: the pages to read, e.g. "3", "1-5" or "2,4-6" (1-based; '
        f"at most {MAX_PAGES_PER_CALL} a call). Required for a PDF of more than "
        f"{MAX_PAGES_WITHOUT_RANGE} pages.",
    )
