"""Named events of the session (``agent_tool_selected``, ``team_created``, …) for listeners.

The places where such a thing happens :func:`emit` it with its fields; whoever wants them (the
OpenTelemetry exporter, when it is on) :func:`listen`. With no listener an emit costs a list
lookup: nothing is imported or built for it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

Listener = Callable[[str, dict[str, Any]], None]
_listeners: list[Listener] = []


def listen(listener: Listener) -> Callable[[], None]:
    """Call ``listener(name, fields)`` for every event from now on; the function that stops."""
    _listeners.append(listener)

    def stop() -> None:
        if listener in _listeners:
            _listeners.remove(listener)

    return stop


def emit(name: str, **fields: Any) -> None:
    """Tell every listener of event ``name`` (a listener's failure is logged, not raised)."""
    for listener in list(_listeners):
        try:
            listener(name, fields)
        except Exception:
            log.exception("a listener of %s failed", name)


__all__ = ["Listener", "emit", "listen"]
