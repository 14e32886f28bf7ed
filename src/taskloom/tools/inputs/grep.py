"""Input models of :mod:`taskloom.tools.grep` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.grep_search import Mode
from taskloom.tools.inputs import ToolInput


class GrepInput(ToolInput):
    """Input of :class:`Grep`."""

    pattern: str = Field(description="The regular expression to search file contents for.")
    path: str | None = Field(
        default=None,
        description="File or directory to search (default: current working directory).",
    )
    glob: str | None = Field(
        default=None,
        description='Only search files matching this glob, e.g. "*.js" or "src/**/*.{ts,tsx}"; '
        'several separated by spaces; "!pattern" excludes.',
    )
    type: str | None = Field(
        default=None, description='File type to search, e.g. "py", "js", "rust", "go", "md".'
    )
    output_mode: Mode = Field(
        default="files_with_matches",
        description='"files_with_matches" (default) lists matching files, newest first; '
        '"content" shows matching lines; "count" shows matches per file.',
    )
    case_insensitive: bool = Field(default=False, alias="-i", description="Ignore case.")
    line_numbers: bool = Field(
        default=True, alias="-n", description="Show line numbers (content mode only; default true)."
    )
    after: int | None = Field(
        default=None, alias="-A", ge=0, description="Lines to show after each match (content mode)."
    )
    before: int | None = Field(
        default=None,
        alias="-B",
        ge=0,
        description="Lines to show before each match (content mode).",
    )
    around: int | None = Field(
        default=None,
        alias="-C",
        ge=0,
        description="Lines to show before and after each match (content mode); same as context.",
    )
    context: int | None = Field(
        default=None,
        ge=0,
        description="Lines to show before and after each match (content mode); same as -C.",
    )
    only_matching: bool = Field(
        default=False,
        alias="-o",
        description="Show only the matched part of each matching line, one per output line "
        "(content mode).",
    )
    multiline: bool = Field(
        default=False,
        description="Let a match span lines: . matches newlines and the pattern may contain "
        "\\n. Default false: each line is matched on its own.",
    )
    head_limit: int | None = Field(
        default=None,
        ge=0,
        description="Show at most N lines / files / counts (like | head -N). Default 250; "
        "0 for no limit.",
    )
    offset: int = Field(
        default=0,
        ge=0,
        description="Skip the first N lines / files / counts, to page with head_limit.",
    )
