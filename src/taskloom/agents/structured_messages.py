"""Structured SendMessage messages: the protocol objects an agent may send instead of text.

A structured message is a JSON object with a ``type``; each type has its fields:

- ``shutdown_request``: ``reason?`` (``request_id?``, generated when missing);
- ``shutdown_response``: ``request_id``, ``approve``, ``reason?``;
- ``plan_approval_response``: ``request_id``, ``approve``, ``feedback?``;
- ``plan_approval_request``: ``plan`` (a plan-mode teammate's, for its lead to approve).

:func:`validate` checks one before anything is posted; every problem is a
:class:`~taskloom.errors.ToolError` that names the field (``message.<field>``).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from taskloom.errors import ToolError

#: Each type's fields: name -> (the JSON type it must have, whether it is required).
_FIELDS: dict[str, dict[str, tuple[type, bool]]] = {
    "shutdown_request": {"request_id": (str, False), "reason": (str, False)},
    "shutdown_response": {
        "request_id": (str, True),
        "approve": (bool, True),
        "reason": (str, False),
    },
    "plan_approval_response": {
        "request_id": (str, True),
        "approve": (bool, True),
        "feedback": (str, False),
    },
    "plan_approval_request": {"plan": (str, True), "request_id": (str, False)},
}

#: The structured message types, in the order the errors list them.
TYPES: tuple[str, ...] = tuple(_FIELDS)

_TYPE_NAMES = {str: "a string", bool: "a boolean"}


def _error(field: str, problem: str) -> ToolError:
    return ToolError(f"SendMessage: message.{field}: {problem}")


def validate(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` checked, with a ``request_id`` added to a ``shutdown_request`` without one.

    Returns:
        A new object: ``type`` first, then the fields in the order they were given.

    Raises:
        ToolError: A missing or unknown type, an unknown field, a missing required field or
            one of the wrong type; the message names the field.
    """
    expected = f"expected one of {', '.join(TYPES)}"
    if "type" not in message:
        raise _error("type", f"required; {expected}")
    kind = message["type"]
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise _error("type", f"unknown type {kind!r}; {expected}")
    fields = _FIELDS[kind]
    for name in message:
        if name != "type" and name not in fields:
            raise _error(name, f"unknown field for {kind}")
    for name, (want, required) in fields.items():
        if name not in message:
            if required:
                raise _error(name, f"required for {kind}")
            continue
        value = message[name]
        # bool is an int, and an int is no bool: compare the exact type.
        if type(value) is not want:
            raise _error(name, f"must be {_TYPE_NAMES[want]}")
        if isinstance(value, str) and name == "request_id" and not value.strip():
            raise _error(name, "must not be empty")
    checked: dict[str, Any] = {"type": kind}
    checked.update((k, v) for k, v in message.items() if k != "type")
    if kind == "shutdown_request" and "request_id" not in checked:
        checked["request_id"] = f"shutdown-{secrets.token_hex(4)}"
    return checked


def encode(message: dict[str, Any]) -> str:
    """The compact JSON a structured message is posted as."""
    return json.dumps(message, ensure_ascii=False)
