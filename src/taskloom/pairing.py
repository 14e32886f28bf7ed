"""Tool calls and their results pairing up, as the APIs insist.

A conversation a stopped run left with calls unanswered is repaired; a prompt whose tool
results answer no pending call is refused.
"""

from __future__ import annotations

from taskloom.errors import UserError
from taskloom.messages import Message, ToolResultBlock

INTERRUPTED = (
    "<tool_use_error>Interrupted: the session stopped before this call finished.</tool_use_error>"
)


def repair(messages: list[Message]) -> tuple[list[Message], list[Message]]:
    """Make a loaded conversation one the API accepts; return it and the messages added.

    - Consecutive user messages (a prompt recorded after a run stopped on its tool results)
      are merged into one, each call's result kept once; a message that starts with the whole
      of the one before it (recorded again, joined to the next prompt) replaces it.
    - Every ``tool_use`` must be answered by a ``tool_result`` in the next message; calls a
      stopped session left unanswered get an "interrupted" result.

    Only a trailing repair is returned as ``added`` (for the caller to record); repairs inside
    the conversation are made again, identically, at each load.
    """
    merged: list[Message] = []
    for message in messages:
        if merged and merged[-1].role == message.role == "user":
            previous = merged.pop()
            if message.content[: len(previous.content)] == previous.content:
                # The engine joined the previous message (a repair, an interrupt's note) to
                # the next prompt and recorded the whole: that record already holds it.
                merged.append(message)
                continue
            # A recorded repair is recorded again inside the next prompt, merged with it: keep
            # each call's first result only (the API refuses two results for one id).
            seen = {b.tool_use_id for b in previous.content if isinstance(b, ToolResultBlock)}
            extra = [
                b
                for b in message.content
                if not (isinstance(b, ToolResultBlock) and b.tool_use_id in seen)
            ]
            message = Message(role="user", content=[*previous.content, *extra])
        merged.append(message)
    out: list[Message] = []
    added: list[Message] = []
    for i, message in enumerate(merged):
        out.append(message)
        calls = message.tool_uses() if message.role == "assistant" else []
        if not calls:
            continue
        following = merged[i + 1] if i + 1 < len(merged) else None
        answered = set()
        if following is not None and following.role == "user":
            answered = {b.tool_use_id for b in following.content if isinstance(b, ToolResultBlock)}
        missing = [
            ToolResultBlock(tool_use_id=c.id, content=INTERRUPTED, is_error=True)
            for c in calls
            if c.id not in answered
        ]
        if not missing:
            continue
        if following is None:
            added.append(Message(role="user", content=list(missing)))
            out.append(added[-1])
        elif following.role == "user":
            # Results first: the API wants tool_result blocks before any text.
            merged[i + 1] = Message(role="user", content=[*missing, *following.content])
        else:
            out.append(Message(role="user", content=list(missing)))
    return out, added


def orphan_results(messages: list[Message], prompt: Message) -> list[str]:
    """The ids of ``prompt``'s tool results that answer no pending call of the conversation.

    A call is pending while the conversation ends with the assistant message that made it,
    or with the user message after it that does not answer it yet. An API that checks ids
    refuses a result for anything else, in this request and every later one.
    """
    pending: set[str] = set()
    answered: set[str] = set()
    if messages and messages[-1].role == "assistant":
        pending = {call.id for call in messages[-1].tool_uses()}
    elif len(messages) > 1 and messages[-2].role == "assistant":
        pending = {call.id for call in messages[-2].tool_uses()}
        answered = {b.tool_use_id for b in messages[-1].content if isinstance(b, ToolResultBlock)}
    orphans = []
    for block in prompt.content:
        if isinstance(block, ToolResultBlock):
            if block.tool_use_id not in pending or block.tool_use_id in answered:
                orphans.append(block.tool_use_id)
            answered.add(block.tool_use_id)
    return orphans


def refuse_orphans(messages: list[Message], prompt: Message) -> None:
    """Refuse a prompt whose tool results answer no pending call (see :func:`orphan_results`).

    Raises:
        UserError: Naming the ids, before anything is added to the conversation.
    """
    orphans = orphan_results(messages, prompt)
    if orphans:
        raise UserError(orphan_error(orphans))


def orphan_error(orphans: list[str]) -> str:
    """What is said of a prompt holding tool results for ``orphans``."""
    return (
        f"a tool_result for {', '.join(orphans)} answers no pending tool_use of the "
        "conversation (the API would refuse this request and every later one)"
    )
