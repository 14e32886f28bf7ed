"""The Ray actor a listening session is reached at: ``bridge:<session id>`` (imports Ray).

One actor per session that runs with ``--listen`` on a configured cluster, named by the
session id in the namespace :data:`NAMESPACE`, owned by the session's driver: it ends with
the session (Ray ends an actor with the driver that made it), so nothing listens for a session
that is gone. It holds no message itself: a sender's :meth:`deliver` waits while the session
takes the message (:meth:`take`), commits it to its mailbox and tells the actor the outcome
(:meth:`settle`); only then is the sender answered. A message carries an id of its sender's
making: a retried delivery with an id already settled is answered as the first one was, and
one still in flight waits for the same outcome, so a message is never posted twice.
"""

from __future__ import annotations

import asyncio
import socket
from collections import OrderedDict
from typing import Any

import ray

#: The Ray namespace the sessions' actors are named in.
NAMESPACE = "taskloom-bridge"
#: How :meth:`_Inbox.deliver` says the session did not take a message in time.
NOT_TAKEN = "the session did not take it"
#: How many settled message ids an actor remembers (a retry comes within seconds).
_REMEMBERED = 4096


class _Inbox:
    """One session's inbox on the cluster (see the module docstring)."""

    def __init__(self, session_id: str, cwd: str) -> None:
        """Receive for ``session_id``, whose session works in ``cwd`` (shown to ListPeers)."""
        self.session_id = session_id
        self.cwd = cwd
        self.host = socket.gethostname()
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]]] | None = None
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        # In memory only, and that is enough: a session restarted (resumed under the same id)
        # has a new actor, never this one (this one ends with the process that made it, and
        # is never restarted), and a sender's retry of a message id goes to the very actor
        # handle its first try went to (send_to_bridge looks the name up once per message):
        # against a dead actor it fails rather than reaching the new one. So no id is ever
        # offered to two actors, and no restarted session can take a message twice.
        self._settled: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def _taken(self) -> asyncio.Queue[tuple[str, dict[str, Any]]]:
        # Made in the actor's own event loop, on its first call.
        if self._queue is None:
            self._queue = asyncio.Queue()
        return self._queue

    async def describe(self) -> dict[str, str]:
        """Who listens here: its session id, host and working directory."""
        return {"session_id": self.session_id, "host": self.host, "cwd": self.cwd}

    async def deliver(
        self, message_id: str, request: dict[str, Any], wait: float
    ) -> dict[str, Any]:
        """Hand ``request`` to the session; its answer once the message is committed.

        Returns:
            ``{"ok": True, "id": <mailbox row id>}``, or ``{"ok": False, "error": ...}``.
        """
        if message_id in self._settled:
            return self._settled[message_id]
        future = self._waiting.get(message_id)
        if future is None:
            future = self._waiting[message_id] = asyncio.get_running_loop().create_future()
            self._taken().put_nowait((message_id, request))
        try:
            return await asyncio.wait_for(asyncio.shield(future), wait)
        except TimeoutError:
            # It may still be taken later: a retry with the same id learns how it went.
            return {"ok": False, "error": f"{NOT_TAKEN} within {wait:g} s"}

    async def take(self, wait: float) -> tuple[str, dict[str, Any]] | None:
        """The next message for the session, or None if none came within ``wait`` seconds."""
        try:
            return await asyncio.wait_for(self._taken().get(), wait)
        except TimeoutError:
            return None

    async def settle(self, message_id: str, reply: dict[str, Any]) -> None:
        """The session's answer for ``message_id``: given to its sender (and to any retry)."""
        if reply.get("ok") is True:
            # A failure is not remembered: a retry may succeed where it failed.
            self._settled[message_id] = reply
            while len(self._settled) > _REMEMBERED:
                self._settled.popitem(last=False)
        future = self._waiting.pop(message_id, None)
        if future is not None and not future.done():
            future.set_result(reply)


#: The actor class: no CPU of its own. One event loop for every call (Ray gives each
#: concurrency group a loop of its own, and a queue or future of one loop cannot be woken
#: from another): as many senders wait at once as it takes calls, less the session's one.
_ACTOR = ray.remote(num_cpus=0, max_concurrency=1000, max_restarts=0)  # type: ignore[call-overload]
InboxActor: Any = _ACTOR(_Inbox)

__all__ = ["NAMESPACE", "InboxActor"]
