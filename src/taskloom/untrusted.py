r"""Model output is untrusted input: what is checked before an answer is recorded or acted on.

A provider, a proxy or a local server can send text that no UTF-8 file can hold (lone
surrogates, which JSON's ``\u`` escapes can produce), tool input nested deep enough to
overflow the stack, tool ids that collide, and calls cut off in the middle of their input.
None of that may end a run: the model is told, as a tool error, and can try again.

Two steps, one mechanism. The provider adapters build each call with :func:`tool_use_block`,
which parses the streamed JSON input without recursion errors and marks a call that was cut
off. The engine passes every assistant message through :func:`vet_answer` before recording
it: strings are made valid (lone surrogates become U+FFFD), over-deep input is dropped, a
repeated id is renamed to a fresh one, and each call that must not run carries the reason in
:attr:`~taskloom.messages.ToolUseBlock.defect`, which the engine returns as that call's tool
error. What was changed is listed in the message's ``sanitized`` field (kept in transcripts
and ``stream-json``, never sent to the model) and logged.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Collection
from typing import Any

from taskloom.messages import INVALID_INPUT_KEY, Message, TextBlock, ThinkingBlock, ToolUseBlock

log = logging.getLogger(__name__)

#: What a tool use id may hold: the Anthropic API refuses others when they are sent back.
_ID = re.compile(r"[A-Za-z0-9_-]{1,256}")

#: Deepest tool input accepted (the input object itself is level 1). Real tools take a few
#: levels; far deeper input only serves to exhaust the stack of whatever walks it.
MAX_INPUT_DEPTH = 64

CUT_OFF = (
    "This call was cut off by the output token limit (max_tokens) before its input was "
    "complete, so it was not run. Make the call again with a shorter input (for example, "
    "write a large file in several smaller steps)."
)
INCOMPLETE = (
    "The input of this call was incomplete JSON (the stream ended in the middle of it), so it "
    "was not run. Make the call again with complete input."
)
TOO_DEEP = (
    f"The input of this call is nested more than {MAX_INPUT_DEPTH} levels deep, so it was not "
    "run. Make the call again with flatter input."
)
BAD_NUMBER = (
    "The input of this call held a number JSON cannot carry (NaN, Infinity, or one too large "
    "for a float such as 1e999), so it was not run. Make the call again with ordinary numbers."
)
BAD_TEXT = (
    "The input of this call contained invalid Unicode (unpaired surrogates), so it was not run "
    "(it is shown with U+FFFD in their place). Make the call again with valid text."
)


def duplicate_id(tool_id: str) -> str:
    """The tool error for a call whose id was already used in the conversation."""
    return (
        f"The tool use id {tool_id!r} was already used in this conversation, so this repeated "
        "call was not run (it was given a new id). Each call needs its own id."
    )


def clean_text(text: str) -> tuple[str, int]:
    """``text`` with every lone surrogate replaced by U+FFFD, and how many were replaced.

    A pair split over two stream chunks is joined back into its character, not replaced.
    """
    if text.isascii():
        return text, 0
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return text, 0
    fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return fixed, fixed.count("\ufffd") - text.count("\ufffd")


class _TooDeep(Exception):
    pass


def _clean_value(value: Any, depth: int) -> tuple[Any, int]:
    """``(value with clean strings, replacements)``; raises _TooDeep past the depth bound.

    Recursion is bounded by MAX_INPUT_DEPTH, whatever depth the value has.
    """
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict | list):
        if depth > MAX_INPUT_DEPTH:
            raise _TooDeep
        total = 0
        if isinstance(value, dict):
            items: dict[Any, Any] = {}
            for key, item in value.items():
                key, n = clean_text(key) if isinstance(key, str) else (key, 0)
                items[key], m = _clean_value(item, depth + 1)
                total += n + m
            return (items if total else value), total
        elements = []
        for item in value:
            element, n = _clean_value(item, depth + 1)
            elements.append(element)
            total += n
        return (elements if total else value), total
    return value, 0


def clean_json(value: Any) -> tuple[Any, int]:
    """Parsed JSON from outside made safe: lone surrogates replaced, depth bounded.

    Args:
        value: A parsed JSON value (the value itself is level 1).

    Returns:
        ``(value with clean strings, how many surrogates were replaced)``; ``value`` itself
        when nothing needed changing.

    Raises:
        ValueError: The value is nested more than :data:`MAX_INPUT_DEPTH` levels deep.
    """
    try:
        return _clean_value(value, 1)
    except _TooDeep:
        raise ValueError(f"nested more than {MAX_INPUT_DEPTH} levels deep") from None


def strict_loads(text: str) -> Any:
    """:func:`json.loads` taking only what JSON can send back.

    ``json.loads`` also takes ``NaN`` and ``Infinity`` and makes ``1e999`` infinite; accepted,
    any of them would make every later request that carries it unsendable.

    Raises:
        UnsendableNumber: ``text`` holds such a number.
        ValueError: ``text`` is not JSON.
        RecursionError: ``text`` is nested too deeply to parse.
    """
    return json.loads(text, parse_constant=_not_json, parse_float=_finite)


class UnsendableNumber(ValueError):
    """JSON text holds a number JSON cannot carry back (NaN, Infinity, ``1e999``)."""


def _not_json(constant: str) -> Any:
    raise UnsendableNumber(f"{constant} is not valid JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise UnsendableNumber(f"{text[:40]} is out of range")
    return value


def tool_use_block(
    tool_id: str, name: str, raw: str, *, stop_reason: str | None, last: bool
) -> ToolUseBlock:
    """A tool call from its streamed JSON input, marked when it must not run.

    Args:
        tool_id: The call's id.
        name: The tool's name.
        raw: The concatenated input chunks.
        stop_reason: The message's canonical stop reason (``max_tokens`` when cut off).
        last: Whether this is the message's last content block (the only one a cut can hit).

    Returns:
        The block. Input cut short is recovered as far as it goes (the conversation needs an
        object) and the call carries :data:`CUT_OFF` (or :data:`INCOMPLETE` without
        ``max_tokens``); input too deep to parse is ``{}`` with :data:`TOO_DEEP`; input that
        is not an object is kept under :data:`INVALID_INPUT_KEY`.
    """
    cut = CUT_OFF if stop_reason == "max_tokens" else INCOMPLETE
    if not raw.strip():
        # No input at all is a tool without parameters, unless the output limit hit here.
        defect = CUT_OFF if last and stop_reason == "max_tokens" else None
        return ToolUseBlock(id=tool_id, name=name, input={}, defect=defect)
    try:
        value = strict_loads(raw)
    except RecursionError:
        return ToolUseBlock(id=tool_id, name=name, input={}, defect=TOO_DEEP)
    except UnsendableNumber:
        return ToolUseBlock(id=tool_id, name=name, input={}, defect=BAD_NUMBER)
    except ValueError:
        # Rare (a cut-off call): its parser is imported only here, so that importing this
        # module (on every run's path to the first request) does not load it.
        from pydantic_core import from_json

        try:
            value = from_json(raw, allow_partial=True, allow_inf_nan=False)
        except ValueError:  # pydantic's own depth limit lands here too
            value = None
        if isinstance(value, dict):
            return ToolUseBlock(id=tool_id, name=name, input=value, defect=cut)
    if not isinstance(value, dict):
        # Kept as it came: the tool reports it as an input error the model can fix.
        return ToolUseBlock(id=tool_id, name=name, input={INVALID_INPUT_KEY: raw[:2000]})
    return ToolUseBlock(id=tool_id, name=name, input=value)


#: What stands in for an answer with no content (the API refuses empty messages).
NO_CONTENT = "(no content)"


def without_empty_text(message: Message) -> Message:
    """``message`` without its empty text blocks; one with nothing left says :data:`NO_CONTENT`."""
    content = [b for b in message.content if not (isinstance(b, TextBlock) and not b.text)]
    if not content:
        content = [TextBlock(text=NO_CONTENT)]
    if len(content) == len(message.content):
        return message
    return message.replace(content=content)


def vet_answer(message: Message, seen_ids: Collection[str]) -> Message:
    """``message`` made safe to record, send back and act on (see the module docstring).

    Args:
        message: An assistant message as a model returned it.
        seen_ids: The tool use ids already in the conversation.

    Returns:
        ``message`` itself when nothing needed changing, else a copy with the changes listed
        in ``sanitized``.
    """
    notes: list[str] = []
    used = set(seen_ids)
    content = [_vet_block(block, used, notes) for block in message.content]
    update: dict[str, Any] = {}
    for field in ("id", "model", "stop_reason"):
        value = getattr(message, field)
        if isinstance(value, str):
            fixed, n = clean_text(value)
            if n:
                update[field] = fixed
                notes.append(f"{field}: {n} unpaired surrogate(s) replaced with U+FFFD")
    if not notes:
        return message
    for note in notes:
        log.warning("model output changed: %s", note)
    sanitized = [*(message.sanitized or []), *notes]
    return message.replace(content=content, sanitized=sanitized, **update)


def _vet_block(block: Any, used: set[str], notes: list[str]) -> Any:
    if isinstance(block, TextBlock):
        text, n = clean_text(block.text)
        if not n:
            return block
        notes.append(f"text: {n} unpaired surrogate(s) replaced with U+FFFD")
        return block.replace(text=text)
    if isinstance(block, ThinkingBlock):
        thinking, n = clean_text(block.thinking)
        signature, m = clean_text(block.signature)
        if not n + m:
            return block
        notes.append(f"thinking: {n + m} unpaired surrogate(s) replaced with U+FFFD")
        return block.replace(thinking=thinking, signature=signature)
    if isinstance(block, ToolUseBlock):
        return _vet_call(block, used, notes)
    return block


def _vet_call(call: ToolUseBlock, used: set[str], notes: list[str]) -> ToolUseBlock:
    update: dict[str, Any] = {}
    defect = call.defect
    tool_id, n = clean_text(call.id)
    name, m = clean_text(call.name)
    if n + m:
        update |= {"id": tool_id, "name": name}
        notes.append(f"tool_use {tool_id}: {n + m} unpaired surrogate(s) in id/name replaced")
    try:
        tool_input, replaced = _clean_value(call.input, 1)
    except _TooDeep:
        update["input"] = {}
        defect = defect or TOO_DEEP
        notes.append(f"tool_use {tool_id}: input deeper than {MAX_INPUT_DEPTH} levels dropped")
    else:
        if replaced:
            update["input"] = tool_input
            defect = defect or BAD_TEXT
            notes.append(f"tool_use {tool_id}: {replaced} unpaired surrogate(s) in input replaced")
    if not tool_id or tool_id in used or not _ID.fullmatch(tool_id):
        # The API wants one result per id and unique ids: the repeat gets an id of its own,
        # so its error result pairs with it and the first call keeps its result. An id the
        # API would refuse on the next request (no id, odd characters) is renamed too.
        import secrets  # a renamed id only

        fresh = f"toolu_taskloom_{secrets.token_hex(8)}"
        if tool_id in used:
            defect = defect or duplicate_id(tool_id)
            notes.append(f"tool_use {tool_id}: id already used, renamed {fresh}, not run")
        elif tool_id:
            notes.append(f"tool_use {tool_id!r}: id not of [A-Za-z0-9_-], renamed {fresh}")
        else:
            notes.append(f"tool_use without an id: given {fresh}")
        update["id"] = tool_id = fresh
    used.add(tool_id)
    if defect != call.defect:
        update["defect"] = defect
    return call.replace(**update) if update else call
