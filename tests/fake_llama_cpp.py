"""A fake llama-cpp-python server: Chat Completions that validate the request as it does.

llama-cpp-python's server (``llama_cpp.server``, 0.3.x) declares each chat message as a union
of TypedDicts (``llama_cpp/llama_types.py``): system, user, assistant, tool, function. Its
assistant message has ``content: NotRequired[str]``: a string or no key, never ``null``. A
body its types refuse raises FastAPI's ``RequestValidationError``, which its
``RouteErrorHandler`` turns, like every exception, into::

    500 {"error": {"message": str(exc), "type": "internal_server_error",
                   "param": null, "code": null}}

where ``str(exc)`` is FastAPI's rendering of pydantic's errors, one for each union member
the message failed (reproduced here as FastAPI 0.165 with pydantic 2.14 gives it). Nor does it
stream any usage: its request type has no ``stream_options``.
"""

from __future__ import annotations

from typing import Any

from fake_servers import ErrorReply, FakeOpenAIServer, Reply, Responder

#: Each member of the message union: its class name, role, and fields after ``role``
#: (name, kind, required). Kinds: ``str``; ``str?`` Optional[str]; ``content`` a user's
#: Optional[str | list of parts]; ``list``; ``dict``.
MEMBERS: tuple[tuple[str, str, tuple[tuple[str, str, bool], ...]], ...] = (
    ("ChatCompletionRequestSystemMessage", "system", (("content", "str?", True),)),
    ("ChatCompletionRequestUserMessage", "user", (("content", "content", True),)),
    (
        "ChatCompletionRequestAssistantMessage",
        "assistant",
        (
            ("content", "str", False),
            ("tool_calls", "list", False),
            ("function_call", "dict", False),
        ),
    ),
    (
        "ChatCompletionRequestToolMessage",
        "tool",
        (("content", "str?", True), ("tool_call_id", "str", True)),
    ),
    (
        "ChatCompletionRequestFunctionMessage",
        "function",
        (("content", "str?", True), ("name", "str", True)),
    ),
)
#: Where FastAPI says the endpoint is (its real place in an installed server).
ENDPOINT = (
    '\n  File "/usr/local/lib/python3.12/site-packages/llama_cpp/server/app.py", line 376, '
    "in create_chat_completion\n    POST /v1/chat/completions"
)


def _type_error(kind: str, value: Any) -> tuple[str, str] | None:
    """pydantic's (type, msg) when ``value`` is not of ``kind``; None when it is."""
    if kind == "str?" and value is None:
        return None
    if kind == "content" and (value is None or isinstance(value, list)):
        return None
    if kind in ("str", "str?", "content"):
        return None if isinstance(value, str) else ("string_type", "Input should be a valid string")
    if kind == "list":
        return None if isinstance(value, list) else ("list_type", "Input should be a valid list")
    return None if isinstance(value, dict) else ("dict_type", "Input should be a valid dictionary")


def _member_errors(
    index: int, message: dict[str, Any], member: str, role: str, fields: Any
) -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = []
    loc = ("body", "messages", index, member)
    if "role" not in message:
        errors.append({"type": "missing", "loc": (*loc, "role"), "msg": "Field required"})
        errors[-1]["input"] = message
    elif message["role"] != role:
        errors.append(
            {
                "type": "literal_error",
                "loc": (*loc, "role"),
                "msg": f"Input should be '{role}'",
                "input": message["role"],
                "ctx": {"expected": f"'{role}'"},
            }
        )
    for name, kind, required in fields:
        if name not in message:
            if required:
                errors.append(
                    {
                        "type": "missing",
                        "loc": (*loc, name),
                        "msg": "Field required",
                        "input": message,
                    }
                )
            continue
        wrong = _type_error(kind, message[name])
        if wrong is not None:
            errors.append(
                {"type": wrong[0], "loc": (*loc, name), "msg": wrong[1], "input": message[name]}
            )
    return errors


def validation_errors(body: dict[str, Any]) -> list[dict[str, Any]]:
    """pydantic's errors for the request's messages, as llama-cpp-python's types give them."""
    errors: list[dict[str, Any]] = []
    for index, message in enumerate(body.get("messages") or []):
        if not isinstance(message, dict):
            continue
        per_member = [_member_errors(index, message, *member) for member in MEMBERS]
        if not all(per_member):
            continue  # one member of the union takes it
        errors += [e for member in per_member for e in member]
    return errors


def render(errors: list[dict[str, Any]]) -> str:
    """``str(RequestValidationError)``: FastAPI's heading, one line per error, the endpoint."""
    n = len(errors)
    text = f"{n} validation error{'s' if n != 1 else ''}:\n"
    text += "".join(f"  {error}\n" for error in errors)
    return (text + ENDPOINT).rstrip()


class FakeLlamaCppServer(FakeOpenAIServer):
    """:class:`FakeOpenAIServer` refusing what llama-cpp-python refuses, with its 500, and
    sending no usage. A refused request takes no scripted reply."""

    def __init__(self, responder: Responder | None = None) -> None:
        super().__init__(responder, usage=False)

    async def _next_reply(self, body: dict[str, Any]) -> Reply:
        errors = validation_errors(body)
        if errors:
            return ErrorReply(500, "internal_server_error", render(errors))
        return await super()._next_reply(body)


__all__ = ["FakeLlamaCppServer", "render", "validation_errors"]
