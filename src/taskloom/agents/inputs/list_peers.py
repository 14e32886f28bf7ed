"""Input models of :mod:`taskloom.agents.list_peers` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class ListPeersInput(ToolInput):
    """Input of :class:`ListPeersTool`."""

    include_self: bool = Field(
        default=False,
        description="Whether to include the current session in the list. Defaults to false.",
    )
