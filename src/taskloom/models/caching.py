"""Prompt caching: how long a request's prefix is cached, and where its breakpoints go.

The Anthropic API caches a request's prefix (tools, then system, then messages) up to each
block marked with ``cache_control``; a later request that starts with the same bytes reads
it at a tenth of the input price instead of paying for it again. A write costs 1.25 times
the input price for the five-minute cache, twice for the one-hour cache; each hit refreshes
the entry. The API looks for a hit at each breakpoint and at most 20 blocks before it.

:func:`place_breakpoints` marks at most three of the four breakpoints a request may carry:

1. the end of tools and system (the system as text blocks, the mark on the last; on the
   last tool when there is no system): what every request of an agent shares;
2. the end of the previous request's conversation (the last block of the message before
   the model's latest answer): read back even when the latest turn added more than 20
   blocks (many parallel tool calls), which the lookback from the moving end would miss;
3. the conversation's moving end (the last block of the last message): written now, read
   by the next request.

A fork, whose first request is its parent's conversation plus the answered call and its
directive, so reads its parent's prefix at breakpoint 2.

How long entries live is a setting: ``promptCacheTtl`` for the main thread,
``subagentPromptCacheTtl`` for subagents and teammates, each ``"5m"`` (the default) or
``"1h"``; ``DISABLE_PROMPT_CACHING`` (Claude Code's variable) set to anything but ``0`` or
``false`` turns caching off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from taskloom.errors import UsageError

CacheTtl = Literal["5m", "1h"]

#: The main thread's setting, and the subagents' and teammates'.
PROMPT_CACHE_TTL_SETTING = "promptCacheTtl"
SUBAGENT_PROMPT_CACHE_TTL_SETTING = "subagentPromptCacheTtl"
#: Claude Code's environment variable that turns prompt caching off.
DISABLE_PROMPT_CACHING_ENV = "DISABLE_PROMPT_CACHING"
DEFAULT_PROMPT_CACHE_TTL: CacheTtl = "5m"
PROMPT_CACHE_TTLS: tuple[CacheTtl, ...] = ("5m", "1h")
#: Block types the API refuses a ``cache_control`` on.
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})


def caching_disabled() -> bool:
    """Whether ``DISABLE_PROMPT_CACHING`` turns prompt caching off."""
    raw = os.environ.get(DISABLE_PROMPT_CACHING_ENV, "").strip().lower()
    return raw not in ("", "0", "false", "no")


def setting_ttl(settings: Mapping[str, Any], key: str) -> CacheTtl:
    """The cache lifetime the setting ``key`` names (default five minutes).

    Raises:
        UsageError: The value is not ``"5m"`` or ``"1h"``; the message names the setting.
    """
    raw = settings.get(key)
    if raw is None:
        return DEFAULT_PROMPT_CACHE_TTL
    for ttl in PROMPT_CACHE_TTLS:
        if raw == ttl:
            return ttl
    raise UsageError(f'the setting {key} must be "5m" or "1h", got {raw!r}')


def prompt_cache_ttl(settings: Mapping[str, Any], *, subagent: bool) -> CacheTtl | None:
    """How long an agent's request prefixes are cached; None: not cached.

    Args:
        settings: The effective settings.
        subagent: For a subagent or teammate (``subagentPromptCacheTtl``), else the main
            thread (``promptCacheTtl``).

    Raises:
        UsageError: The setting's value is neither ``"5m"`` nor ``"1h"``.
    """
    key = SUBAGENT_PROMPT_CACHE_TTL_SETTING if subagent else PROMPT_CACHE_TTL_SETTING
    ttl = setting_ttl(settings, key)
    return None if caching_disabled() else ttl


def check_cache_settings(settings: Mapping[str, Any]) -> None:
    """Refuse a session whose cache settings are bad, before it makes any request.

    Raises:
        UsageError: ``promptCacheTtl`` or ``subagentPromptCacheTtl`` is neither ``"5m"`` nor
            ``"1h"``.
    """
    setting_ttl(settings, PROMPT_CACHE_TTL_SETTING)
    setting_ttl(settings, SUBAGENT_PROMPT_CACHE_TTL_SETTING)


def cache_control(ttl: CacheTtl) -> dict[str, str]:
    """The ``cache_control`` value of a breakpoint living ``ttl``."""
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": "1h"}


def place_breakpoints(body: dict[str, Any], ttl: CacheTtl) -> None:
    """Mark the cache breakpoints of an Anthropic request ``body`` in place (see the module).

    ``body["system"]``, when a string, becomes a list of one text block. Marks the messages
    came with are taken off (ours are the ones that move with the conversation). Messages'
    blocks are copied before they are changed: the caller's message dumps stay as they were.
    """
    mark = cache_control(ttl)
    system = body.get("system")
    if isinstance(system, str) and system:
        body["system"] = [{"type": "text", "text": system, "cache_control": mark}]
    elif body.get("tools"):
        body["tools"][-1] = {**body["tools"][-1], "cache_control": mark}
    messages: list[dict[str, Any]] = body.get("messages") or []
    _drop_marks(messages)
    for index in sorted(_conversation_marks(messages)):
        message = messages[index]
        blocks = list(message.get("content") or [])
        at = _markable(blocks)
        if at is None:
            continue
        blocks[at] = {**blocks[at], "cache_control": mark}
        messages[index] = {**message, "content": blocks}


def _drop_marks(messages: list[dict[str, Any]]) -> None:
    """Take off the marks the messages came with (a program's own).

    With ours added, more than the API's four breakpoints would be refused.
    """
    for index, message in enumerate(messages):
        blocks = message.get("content")
        if isinstance(blocks, list) and any(
            isinstance(b, dict) and "cache_control" in b for b in blocks
        ):
            bare = [
                {k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b
                for b in blocks
            ]
            messages[index] = {**message, "content": bare}


def _conversation_marks(messages: list[dict[str, Any]]) -> set[int]:
    """The messages whose last block is a breakpoint: the last, and the previous request's."""
    if not messages:
        return set()
    marks = {len(messages) - 1}
    answers = [i for i, m in enumerate(messages[:-1]) if m.get("role") == "assistant"]
    if answers and answers[-1] > 0:
        marks.add(answers[-1] - 1)  # what the request the latest answer answered ended with
    return marks


def _markable(blocks: list[Any]) -> int | None:
    """The last block of a message that may carry ``cache_control`` (not thinking, not empty)."""
    for at in range(len(blocks) - 1, -1, -1):
        block = blocks[at]
        if not isinstance(block, dict) or block.get("type") in _UNMARKABLE:
            continue
        if block.get("type") == "text" and not block.get("text"):
            continue
        return at
    return None
