"""What others wrote, inside the elements that frame it for a model.

Text from another agent, teammate or session reaches a model inside an element that says who
sent it (``<teammate-message teammate_id="…">``, ``<agent-message>``, ``<session-message>``),
and the runtime speaks in elements of its own (``<task-notification>``,
``<system-reminder>``, ``<task-statuses>``). Such text must not be able to end the element it
is in, nor to start one of those, or it could pose as another sender, or as the runtime.

:func:`quote` escapes exactly that and nothing else: the ``<`` that starts one of these tags
(opening or closing, in any case, with spaces or not) becomes ``&lt;``. Code, JSON and any
other markup stay as they were written, so a model reads the message as it was sent; a tag of
ours inside it reads as ``&lt;/teammate-message>``, visibly text. :func:`attribute` escapes a
value written between double quotes (``&``, ``<``, ``>`` and ``"``).
"""

from __future__ import annotations

import re

#: The elements a body is framed in, and those the runtime speaks in.
WRAPPER_TAGS: tuple[str, ...] = (
    "teammate-message",
    "agent-message",
    "session-message",
    "task-notification",
    "system-reminder",
    "task-statuses",
)

_OPENS_A_WRAPPER = re.compile(
    r"<(?=\s*/?\s*(?:" + "|".join(map(re.escape, WRAPPER_TAGS)) + r")(?![\w-]))",
    re.IGNORECASE,
)


def quote(text: str) -> str:
    """``text`` made safe to put inside a wrapper element: it opens and closes none."""
    return _OPENS_A_WRAPPER.sub("&lt;", text)


def escape(text: str) -> str:
    """XML-escape ``&``, ``<`` and ``>`` (xml.sax.saxutils would pull in urllib at start-up)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def attribute(value: str) -> str:
    """``value`` escaped for an attribute in double quotes."""
    return escape(value).replace('"', "&quot;")


__all__ = ["WRAPPER_TAGS", "attribute", "escape", "quote"]
