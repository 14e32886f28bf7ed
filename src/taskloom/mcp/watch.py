"""What an MCP server tells its client unasked, as events a watcher of that server receives.

A server sends notifications between requests: ``notifications/resources/updated`` for a
resource the client subscribed to (``resources/subscribe``), ``notifications/message`` for
its log, ``notifications/progress`` for a request that asked for progress. The manager
(:mod:`taskloom.mcp.manager`) hands each one, as an :class:`McpEvent`, to every
:class:`McpWatcher` of its server, and tells them when the server is gone. The Monitor of an
MCP server (:mod:`taskloom.mcp.monitor`) is such a watcher.

Only plain attributes of the SDK's objects are read here (``method`` and ``params``, in
either spelling of the SDK's major versions), so this module imports nothing of the SDK.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol

from taskloom._dataclass import dataclass

EventKind = Literal["resource", "log", "progress"]

#: The log levels of MCP's ``logging/setLevel``, least severe first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass(frozen=True, slots=True)
class McpEvent:
    """One notification of a server.

    Attributes:
        kind: ``resource`` (a subscribed resource changed), ``log`` or ``progress``.
        text: One line saying it (what a monitor's owner is told).
        uri: The resource that changed (``resource`` events).
        level: Its severity, one of :data:`LOG_LEVELS` as the server said it (``log`` events).
    """

    kind: EventKind
    text: str
    uri: str = ""
    level: str = ""

    def below(self, level: str) -> bool:
        """Whether it is a log message less severe than ``level`` (unknown levels are not)."""
        if self.kind != "log" or self.level not in LOG_LEVELS or level not in LOG_LEVELS:
            return False
        return LOG_LEVELS.index(self.level) < LOG_LEVELS.index(level)


class McpWatcher(Protocol):
    """What watches one server's notifications (see :meth:`McpManager.watch`)."""

    def event(self, event: McpEvent) -> None:
        """A notification arrived (called on the event loop; must not block)."""
        ...

    def ended(self, reason: str) -> None:
        """The server is gone (it exited, its connection broke, or the session closed it)."""
        ...

    async def closing(self) -> None:
        """The session is about to close the server: let go of it while it still answers."""
        ...


class Subscriptions:
    """How many watchers of each server hold a subscription to each resource.

    A server keeps one subscription per URI, so two monitors of one resource share it: it is
    asked for by the first and ended by the last. Each (server, URI) has a lock, so a second
    subscriber waits for the first's answer rather than counting on a subscription that may fail.
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def acquire(
        self, server: str, uri: str, subscribe: Callable[[], Awaitable[bool]]
    ) -> bool:
        """Hold the subscription, calling ``subscribe`` (True: it took) only for the first.

        Returns:
            Whether it is held (False: ``subscribe`` failed and nothing is counted).
        """
        key = (server, uri)
        async with self._locks.setdefault(key, asyncio.Lock()):
            if self._counts.get(key, 0) == 0 and not await subscribe():
                return False
            self._counts[key] = self._counts.get(key, 0) + 1
            return True

    async def release(
        self, server: str, uri: str, unsubscribe: Callable[[], Awaitable[object]]
    ) -> None:
        """Let go of it, calling ``unsubscribe`` only for the last holder."""
        key = (server, uri)
        async with self._locks.setdefault(key, asyncio.Lock()):
            left = self._counts.get(key, 0) - 1
            if left > 0:
                self._counts[key] = left
                return
            self._counts.pop(key, None)
            if left == 0:  # a release without a hold (the server restarted) asks nothing
                await unsubscribe()

    def forget(self, server: str) -> None:
        """``server`` is gone and its subscriptions with it: nothing of it is held any more."""
        for key in [k for k in self._counts if k[0] == server]:
            del self._counts[key]


class LogLevels:
    """The log level each watcher of a server asked for; the server is set to the lowest.

    ``logging/setLevel`` is one setting per server, so it is the least severe level any live
    watcher asked for, and each watcher drops what is below its own (:meth:`McpEvent.below`).
    """

    def __init__(self) -> None:
        self._asked: dict[str, dict[object, str]] = {}
        self._sent: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def lowest(self, server: str) -> str | None:
        """The least severe level asked of ``server`` by a live watcher (None: none asked)."""
        asked = self._asked.get(server, {}).values()
        return min(asked, key=LOG_LEVELS.index, default=None)

    async def ask(
        self, server: str, who: object, level: str, send: Callable[[str], Awaitable[bool]]
    ) -> bool:
        """``who`` wants ``level`` and above; ``send`` (True: it took) sets a new lowest.

        Returns:
            Whether it is recorded (False: ``send`` failed, and ``who`` asked nothing).
        """
        async with self._locks.setdefault(server, asyncio.Lock()):
            asked = self._asked.setdefault(server, {})
            asked[who] = level
            lowest = self.lowest(server)
            if lowest is not None and lowest != self._sent.get(server):
                if not await send(lowest):
                    del asked[who]
                    return False
                self._sent[server] = lowest
            return True

    async def drop(self, server: str, who: object, send: Callable[[str], Awaitable[bool]]) -> None:
        """``who`` is gone: the server is set to the lowest level of those left, if that rose."""
        async with self._locks.setdefault(server, asyncio.Lock()):
            if self._asked.get(server, {}).pop(who, None) is None:
                return
            lowest = self.lowest(server)
            # With none left the server keeps its level: there is no "unset" in MCP.
            if lowest is not None and lowest != self._sent.get(server) and await send(lowest):
                self._sent[server] = lowest

    def forget(self, server: str) -> None:
        """``server`` is gone: what it was set to, and who asked, went with it."""
        self._asked.pop(server, None)
        self._sent.pop(server, None)


def event_of(message: Any) -> McpEvent | None:
    """The event a message of the SDK's ``message_handler`` stands for (None: not one).

    Transport errors, and notifications that are not events (a changed tool list), are None.
    """
    message = getattr(message, "root", message)  # mcp 1.x wraps notifications in a root model
    method = getattr(message, "method", None)
    params = getattr(message, "params", None)
    if not isinstance(method, str) or params is None:
        return None
    if method == "notifications/resources/updated":
        uri = str(getattr(params, "uri", ""))
        return McpEvent("resource", f"updated: {uri}", uri)
    if method == "notifications/message":
        return McpEvent("log", _log_line(params), level=str(getattr(params, "level", "info")))
    if method == "notifications/progress":
        return McpEvent("progress", _progress_line(params))
    return None


def _log_line(params: Any) -> str:
    level = str(getattr(params, "level", "info"))
    logger = getattr(params, "logger", None)
    data = getattr(params, "data", None)
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    return f"[{level}] {logger}: {text}" if logger else f"[{level}] {text}"


def _progress_line(params: Any) -> str:
    # The SDK's params are pydantic models: their fields as a mapping, whatever the version.
    fields = params.model_dump() if hasattr(params, "model_dump") else {}
    progress = fields.get("progress") or 0
    total, message = fields.get("total"), fields.get("message")
    done = f"{progress:g}/{total:g}" if isinstance(total, int | float) else f"{progress:g}"
    return f"progress {done}" + (f": {message}" if message else "")


__all__ = [
    "LOG_LEVELS",
    "EventKind",
    "LogLevels",
    "McpEvent",
    "McpWatcher",
    "Subscriptions",
    "event_of",
]
