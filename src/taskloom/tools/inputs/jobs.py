"""Input models of :mod:`taskloom.tools.jobs` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class JobIdInput(ToolInput):
    """A job id."""

    job_id: str = Field(description="The job id returned when the job started.")


class JobListInput(ToolInput):
    """No input."""
