"""ListPeers, and ``taskloom peers``: the sessions SendMessage can reach, by their addresses.

Two kinds of address: ``uds:<socket path>`` for a session of this machine that listens
(``--listen``; its socket answers), and ``bridge:<session id>`` for one listening on the Ray
cluster, when one is configured (``RAY_ADDRESS``, the setting ``remote.address``; Ray is
loaded, and the cluster reached, only then). Claude Code's tool of the same name lists the
same two kinds; its result has the same lines (``address (name) @ cwd``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.errors import ToolError
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.agents.inputs.list_peers import ListPeersInput
    from taskloom.agents.service import AgentService
    from taskloom.remote.cluster import Cluster


@dataclass(frozen=True)
class Peer:
    """A session SendMessage can reach.

    Attributes:
        address: What ``to`` is for it (``uds:<path>`` or ``bridge:<session id>``).
        session_id: Its session id.
        cwd: Its working directory, when known.
        host: The machine it runs on, when known (``bridge:`` peers).
    """

    address: str
    session_id: str
    cwd: str = ""
    host: str = ""

    def line(self) -> str:
        """How it is listed: ``address (session id[ on host]) @ cwd``."""
        name = f"{self.session_id} on {self.host}" if self.host else self.session_id
        return f"{self.address} ({name})" + (f" @ {self.cwd}" if self.cwd else "")


async def find_peers(
    home: Path | None,
    settings: Mapping[str, Any],
    env: Mapping[str, str],
    cluster: Callable[[], Cluster] | None,
) -> tuple[list[Peer], str | None]:
    """Every session listening here, and on the configured cluster; why bridge: is missing.

    Args:
        home: The taskloom home whose sessions are probed (None: the default).
        settings: The effective settings (``remote.address``).
        env: The environment (``RAY_ADDRESS``).
        cluster: The session's cluster (reached if it was not yet); None: none is used.

    Returns:
        The peers, ``uds:`` ones first, and a note when the cluster's could not be listed
        (None when they were, or when no cluster is configured).
    """
    from taskloom.agents.peers import listening_sessions

    found = [Peer(f"uds:{path}", sid) for sid, path in await listening_sessions(home)]
    from taskloom.remote.cluster import configured_address

    if cluster is None or configured_address(settings, env) is None:
        return found, None
    from taskloom.agents.bridge import bridge_peers

    try:
        on_cluster = await bridge_peers(cluster())
    except ToolError as exc:
        return found, str(exc)
    found += [Peer(p.address, p.session_id, p.cwd, p.host) for p in on_cluster]
    return found, None


#: :class:`ListPeersInput`'s closed schema written out (see ``Tool.static_schema``), so that
#: offering the tool does not import the model; tests check it is the generated one.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`ListPeersTool`.",
    "properties": {
        "include_self": {
            "default": False,
            "description": "Whether to include the current session in the list. Defaults to false.",
            "type": "boolean",
        }
    },
    "type": "object",
}


class ListPeersTool(Tool["ListPeersInput"]):
    """The sessions this one can message (see the module docstring)."""

    name = "ListPeers"
    description = (
        "List the other taskloom sessions that can receive messages via SendMessage, by their "
        'addresses: "uds:<socket path>" for sessions on this machine, "bridge:<session id>" '
        "for sessions on the Ray cluster. Only sessions running with --listen are listed. Use "
        "an address as SendMessage's to."
    )
    input_model = "taskloom.agents.inputs.list_peers:ListPeersInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "read"
    concurrency_safe = True

    def __init__(self, service: AgentService) -> None:
        """List for the session ``service`` serves."""
        self.service = service

    async def call(self, params: ListPeersInput, ctx: ToolContext) -> ToolResult:
        """Probe this machine's sockets, and the cluster's actors."""
        import os

        messenger = self.service.messenger
        own = messenger.own_addresses()
        try:
            peers, note = await find_peers(
                ctx.runtime.home, self.service.settings, os.environ, own.cluster
            )
        except OSError as exc:
            return tool_error(f"ListPeers: cannot read the sessions directory: {exc}")
        if not params.include_self:
            peers = [p for p in peers if p.session_id != own.session_id]
        lines = [p.line() for p in peers]
        text = f"Found {len(lines)} peer(s):\n" + "\n".join(lines) if lines else "No peers found."
        if note is not None:
            text += f"\n(bridge: peers not listed: {note})"
        rows = [{"address": p.address, "name": p.session_id, "cwd": p.cwd} for p in peers]
        data = {"peers": rows}
        return ToolResult(text, data=data)


__all__ = ["ListPeersTool", "Peer", "find_peers"]
