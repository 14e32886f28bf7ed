"""A server error that is really a refusal of the request: recognised, and said in one line.

Some OpenAI-compatible servers answer a request their schema refuses with a 5xx, not a 4xx:
llama-cpp-python's server (FastAPI) turns any exception, its request validation included,
into ``500 {"error": {"type": "internal_server_error", "message": str(exc)}}``, where the
message is FastAPI's rendering of pydantic's errors::

    7 validation errors:
      {'type': 'literal_error', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestSystemMessage', 'role'), ...}
      {'type': 'string_type', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string', 'input': None}
      ...

    File ".../llama_cpp/server/app.py", line 376, in create_chat_completion
        POST /v1/chat/completions

(older FastAPI versions give the bare list of the same dicts). The same request would be
refused again however often it were sent, so it must not be retried as a server failure.
"""  # noqa: E501

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

from taskloom.errors import clipped

# Pydantic's error dicts, with their "loc" tuple; a request's body starts FastAPI's (a proxy's
# 500 about the upstream's answer, which may pass, has other locations).
_BODY_LOC = re.compile(r"""['"]loc['"]\s*:\s*[(\[]\s*['"]body['"]""")
#: Most characters of the server's text quoted, and of the summary of its errors.
MAX_QUOTED = 500
MAX_SUMMARY = 1000
#: Longer messages are not parsed (only quoted): parsing is for error lists, not for floods.
_MAX_PARSED = 100_000


def is_validation_error(message: str) -> bool:
    """Whether a server's error message reports that it refused the request's body.

    Only FastAPI's request validation says so: its errors' locations start with ``body``.
    """
    return bool(_BODY_LOC.search(message))


def _error_dicts(message: str) -> list[dict[str, Any]]:
    """The pydantic error dicts in ``message``, in order (none when it holds none)."""
    if len(message) > _MAX_PARSED:
        return []
    try:
        whole = ast.literal_eval(message.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        whole = None
    if isinstance(whole, list):
        return [e for e in whole if isinstance(e, dict)]
    found = []
    for line in message.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = ast.literal_eval(line)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def _relevant(errors: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The errors that say what is wrong, without the noise of a union's other members.

    A message is checked against every member of a union (system, user, assistant, tool...
    message); the members whose ``role`` did not match are not what the sender meant, and
    all their errors are left out.
    """
    wrong_kind = {
        tuple(e["loc"][:-1])
        for e in errors
        if e.get("type") == "literal_error" and isinstance(e.get("loc"), tuple | list)
    }
    for error in errors:
        loc = error.get("loc")
        if isinstance(loc, tuple | list) and tuple(loc[:-1]) in wrong_kind:
            continue
        yield error


def _describe(error: dict[str, Any]) -> str:
    loc = error.get("loc")
    parts = [str(p) for p in loc if p != "body"] if isinstance(loc, tuple | list) else []
    where = ".".join(parts) or "request"
    text = f"{where}: {error.get('msg') or error.get('type') or 'invalid'}"
    if error.get("type") != "missing" and "input" in error:
        got = repr(error["input"])
        text += f" (got {got if len(got) <= 60 else got[:57] + '...'})"
    return text


def summary(message: str) -> str:
    """What the server refused, in one line: its field errors, else its own words (capped)."""
    errors = _error_dicts(message)
    shown = [_describe(e) for e in _relevant(errors)] or [_describe(e) for e in errors]
    if shown:
        return clipped("; ".join(shown), MAX_SUMMARY)
    return clipped(" ".join(message.split()), MAX_QUOTED)


__all__ = ["MAX_QUOTED", "MAX_SUMMARY", "is_validation_error", "summary"]
