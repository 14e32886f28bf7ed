"""Clearing old tool results: the first, free step when a context window fills.

A tool result older than the last ``keep_turns`` assistant turns, and bigger than
:data:`MIN_CLEAR_CHARS`, is replaced by a one-line stub that says where its content can be had
again, so that nothing is lost and no model call is needed:

- a Read result: the file itself (``[Old tool result cleared to save context: Read of
  /src/app.py; read the file again if needed]``);
- any other: a file holding the full output. A result already saved by the overflow rule
  (:mod:`taskloom.tools.overflow`: its text names the file) keeps that file; otherwise the text
  is saved to ``save_dir/<tool_use_id>.txt`` first (directory 0700, file 0600) and the stub
  names it (``[Old tool result cleared to save context: the full output of Bash is in
  /…/tool-results/toolu_01.txt]``).

Images in a cleared result are dropped, and the stub says how many. Error results, results
already cleared and recent ones are left as they are; ids and ``is_error`` are kept, so every
tool call still has its result. The messages given are never changed: a new list is returned.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path

from taskloom._dataclass import dataclass
from taskloom.context.window import CHARS_PER_TOKEN, IMAGE_TOKENS
from taskloom.messages import Message, ToolResultBlock, ToolUseBlock
from taskloom.tools.overflow import keep_text

#: A result of at most this many characters (its text; an image counts as more) is left: its
#: stub would save too little.
MIN_CLEAR_CHARS = 1_000
#: How every stub begins (also how a result already cleared is recognised).
STUB_PREFIX = "[Old tool result cleared to save context: "

_READ_TOOL = "Read"
# What the overflow rule writes in a saved result (see tools.overflow.persisted_message).
_SAVED_TO = re.compile(r"^Output too large \([^)\n]*\)\. Full output saved to: (.+)$", re.MULTILINE)

_OPEN = "<persisted-output>"
_CLOSE = "</persisted-output>"

_log = logging.getLogger(__name__)
#: The directories a warning said results could not be saved to.
_UNSAVABLE: set[Path] = set()


@dataclass(frozen=True, slots=True)
class Cleared:
    """What :func:`clear_old_results` made.

    Attributes:
        messages: The conversation with old results stubbed (unchanged messages are the same
            objects as given).
        count: How many results were replaced.
        tokens_freed: An estimate of the tokens that takes out of a request.
    """

    messages: list[Message]
    count: int
    tokens_freed: int


def clear_old_results(messages: Sequence[Message], *, keep_turns: int, save_dir: Path) -> Cleared:
    """Replace the tool results older than the last ``keep_turns`` assistant turns by stubs.

    Args:
        messages: The conversation, oldest first (not changed).
        keep_turns: How many of the latest assistant messages keep the results of their tool
            calls (and every result after the oldest of them); 0 clears every old enough
            result.
        save_dir: Where results not yet on disk are saved (a session's ``tool-results/``).

    Returns:
        The new conversation, how many results were cleared and the tokens that frees. A
        result that cannot be saved (a full disk) is left as it is, with a warning.

    Raises:
        ValueError: ``keep_turns`` is negative.
    """
    if keep_turns < 0:
        raise ValueError(f"keep_turns must be 0 or more, got {keep_turns}")
    cutoff = _cutoff(messages, keep_turns)
    calls = {
        block.id: block
        for message in messages[:cutoff]
        if message.role == "assistant"
        for block in message.tool_uses()
    }
    out = list(messages)
    count = 0
    freed = 0
    for i in range(cutoff):
        message = messages[i]
        if message.role != "user":
            continue
        content = list(message.content)
        changed = False
        for j, block in enumerate(content):
            if not isinstance(block, ToolResultBlock) or not _clearable(block):
                continue
            stub = _stub(block, calls.get(block.tool_use_id), save_dir)
            if stub is None:
                continue
            content[j] = block.replace(content=stub)
            freed += _tokens(block.text(), len(block.images())) - _tokens(stub, 0)
            count += 1
            changed = True
        if changed:
            out[i] = message.replace(content=content)
    return Cleared(out, count, max(0, freed))


def _cutoff(messages: Sequence[Message], keep_turns: int) -> int:
    """The index of the oldest kept assistant message (results before it are old)."""
    if keep_turns == 0:
        return len(messages)
    seen = 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "assistant":
            seen += 1
            if seen == keep_turns:
                return i
    return 0


def _clearable(block: ToolResultBlock) -> bool:
    if block.is_error:
        return False
    text = block.text()
    if text.startswith(STUB_PREFIX):
        return False
    return bool(block.images()) or len(text) > MIN_CLEAR_CHARS


def _stub(block: ToolResultBlock, call: ToolUseBlock | None, save_dir: Path) -> str | None:
    """The stub of ``block``, its content saved first when needed; None when it cannot be."""
    images = len(block.images())
    dropped = f" ({images} image{'s' if images > 1 else ''} dropped)" if images else ""
    name = call.name if call is not None else "a tool"
    path = call.input.get("file_path") if call is not None else None
    if name == _READ_TOOL and isinstance(path, str) and path:
        return f"{STUB_PREFIX}Read of {path}{dropped}; read the file again if needed]"
    text = block.text()
    if not text:
        return f"{STUB_PREFIX}{name} returned no text{dropped}]"
    overflow = _overflow_file(text)
    if overflow is not None and not overflow.is_file():
        # Its file was removed: what is left is a preview of a couple of KB, kept as it is
        # rather than stubbed with a pointer to a copy of a preview.
        return None
    try:
        saved = overflow or keep_text(text, save_dir, block.tool_use_id)
    except OSError as exc:
        if save_dir not in _UNSAVABLE:  # clearing runs before every request: said once
            _UNSAVABLE.add(save_dir)
            _log.warning(
                "old tool results are kept in the context: they cannot be saved to %s (%s)",
                save_dir,
                exc.strerror or exc,
            )
        return None
    return f"{STUB_PREFIX}the full output of {name} is in {saved}{dropped}]"


def _overflow_file(text: str) -> Path | None:
    """The file an overflow-saved result names, when the overflow's message is all it holds.

    A result with lines added to that message (a Bash note after its preview) is not one: a
    stub naming only the file would lose them, so it is saved whole instead.
    """
    stripped = text.strip()
    if not (stripped.startswith(_OPEN) and stripped.endswith(_CLOSE)):
        return None
    found = _SAVED_TO.search(stripped)
    return Path(found.group(1)) if found is not None else None


def _tokens(text: str, images: int) -> int:
    """Tokens as :func:`~taskloom.context.window.estimate_tokens` counts them: JSON text."""
    chars = len(json.dumps(text, ensure_ascii=False)) - 2  # escapes count, quotes do not
    return -(-chars // CHARS_PER_TOKEN) + images * IMAGE_TOKENS


__all__ = ["MIN_CLEAR_CHARS", "STUB_PREFIX", "Cleared", "clear_old_results"]
