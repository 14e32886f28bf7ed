"""SendMessage to another session: ``uds:<socket path>`` here, ``bridge:<session id>`` on Ray.

Both carry text only, and only the main thread speaks for its session (another session may
act on what it is told, even unattended; an agent reports to its main session instead). A
``uds:`` message goes over the recipient's Unix socket (:mod:`taskloom.agents.peers`); a
``bridge:`` one through the recipient's actor on the Ray cluster
(:mod:`taskloom.agents.bridge`, loaded, with Ray, only by such a message). Either way the
sender is told it was delivered only once the recipient has committed it to its mailbox.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from taskloom._dataclass import dataclass
from taskloom.errors import ToolError

if TYPE_CHECKING:
    from taskloom.remote.cluster import Cluster

#: The prefix of another taskloom process's address on this machine: ``uds:<socket path>``.
PEER_PREFIX = "uds:"
#: The prefix of a session's address on the Ray cluster: ``bridge:<session id>``.
BRIDGE_PREFIX = "bridge:"


@dataclass(frozen=True)
class OwnAddresses:
    """Where this session is reached, given to the recipients to reply to.

    Attributes:
        session_id: This session's id.
        listen_path: Its socket (``--listen``), if it listens on this machine.
        bridge: Its ``bridge:`` address, if it listens on the cluster.
        cluster: The session's Ray cluster, for a ``bridge:`` message (None: none can go).
    """

    session_id: str
    listen_path: Path | None = None
    bridge: str | None = None
    cluster: Callable[[], Cluster] | None = None


async def send_to_session(
    to: str, body: str, summary: str, structured: str | None, owner: str, own: OwnAddresses
) -> tuple[str, str]:
    """Hand ``body`` (from ``owner``) to the session ``to`` names; its result and row id.

    ``structured`` is the type of a structured message (refused), None for text.

    Raises:
        ToolError: Refused (not the main thread, structured, empty, this session's own
            address), or not delivered; the message names the address.
    """
    bridge = to.startswith(BRIDGE_PREFIX)
    target = to[len(BRIDGE_PREFIX if bridge else PEER_PREFIX) :]
    if not target.strip():
        what = "session id" if bridge else "socket path"
        form = f"{BRIDGE_PREFIX}<session id>" if bridge else f"{PEER_PREFIX}<socket path>"
        raise ToolError(f"SendMessage: to: {to!r} has no {what}; write {form}.")
    if owner != own.session_id:
        raise ToolError(
            f"SendMessage: to: only the main session may message another session ({to}); "
            f"send it to the main session ({own.session_id}) instead."
        )
    if (bridge and to == own.bridge) or (
        not bridge and own.listen_path is not None and _same_file(target, own.listen_path)
    ):
        raise ToolError(
            f"SendMessage: to: {to} is this session's own {'address' if bridge else 'socket'}."
        )
    if structured is not None:
        raise ToolError(
            f"SendMessage: structured messages cannot be sent to another process ({to}); send text"
        )
    if not body.strip():
        raise ToolError("SendMessage: message: must not be empty")
    if bridge:
        row = await _bridge(target, body, summary, own)
        told = f"Message delivered to the session at {to}; it will see it at its next "
        return told + "delivery point.", row
    from taskloom.agents import peers  # loaded only by a message to another process

    row = await peers.send_to_peer(
        target,
        sender=own.session_id,
        text=body,
        summary=summary or None,
        reply_to=str(own.listen_path) if own.listen_path is not None else None,
    )
    return (
        f"Message delivered to the session listening at {target}; it will see it at its next "
        "delivery point."
    ), row


async def _bridge(session_id: str, body: str, summary: str, own: OwnAddresses) -> str:
    if own.cluster is None:
        raise ToolError(f"SendMessage: to: {BRIDGE_PREFIX}{session_id}: this session has no Ray")
    from taskloom.agents.bridge import send_to_bridge  # Ray only on this path

    return await send_to_bridge(
        own.cluster(),
        session_id,
        sender=own.session_id,
        text=body,
        summary=summary or None,
        reply_to=own.bridge[len(BRIDGE_PREFIX) :] if own.bridge else None,
    )


def _same_file(path: str, other: Path) -> bool:
    try:
        return Path(path).samefile(other)
    except OSError:
        return False


__all__ = ["BRIDGE_PREFIX", "PEER_PREFIX", "OwnAddresses", "send_to_session"]
