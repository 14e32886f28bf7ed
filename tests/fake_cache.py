"""The Anthropic API's prompt caching rules, for ``FakeAnthropicServer(caching=True)``.

A request is a list of blocks in the API's order: each tool, each system block, then each
message's content blocks. A block's size in tokens is estimated from its JSON (a quarter of
the characters, at least 1), ``cache_control`` left out. The blocks carrying a
``cache_control`` are the breakpoints. For one request:

- the read is the longest cached prefix that ends at a breakpoint or at a block at most
  ``lookback`` (20) blocks before one, and is still alive: ``cache_read_input_tokens``;
- each breakpoint's prefix (up to and including its block) is written to the cache with its
  TTL (``{"ttl": "1h"}``, else five minutes) when it is not there, and its life renewed
  when it is (a hit refreshes); prefixes smaller than ``min_tokens`` (Sonnet's 1024) are not
  cached at all, as the API ignores such breakpoints;
- ``cache_creation_input_tokens`` is what lies between the read and the last breakpoint
  written, split in ``cache_creation`` by the TTL of the breakpoint closing each stretch;
- ``input_tokens`` is the rest: what follows the last breakpoint (or the read).

Time is ``clock()`` seconds (default ``time.monotonic``): tests pass a fake clock to expire
entries.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}


@dataclass(frozen=True)
class _Block:
    key: str  # the hash of the prefix ending with this block
    tokens: int  # the prefix's tokens, this block included
    ttl: str | None  # "5m" or "1h" when it is a breakpoint


def block_tokens(block: Any) -> int:
    """The estimated tokens of one block: a quarter of its JSON, ``cache_control`` left out."""
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return len(json.dumps(block, sort_keys=True)) // 4 + 1


def _ttl(block: Any) -> str | None:
    mark = block.get("cache_control") if isinstance(block, dict) else None
    if not isinstance(mark, dict):
        return None
    return "1h" if mark.get("ttl") == "1h" else "5m"


def request_blocks(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """The blocks of a request in cache order, each with where it sits (tool, system, i:role)."""
    blocks: list[tuple[str, Any]] = [("tool", t) for t in body.get("tools") or []]
    system = body.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}] if system else []
    blocks += [("system", b) for b in system or []]
    for i, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        blocks += [(f"{i}:{message.get('role')}", b) for b in content or []]
    return blocks


class PromptCache:
    """One organisation's prompt cache, as the API keeps it.

    Args:
        min_tokens: The smallest prefix cached (Sonnet's 1024; Haiku's is 2048).
        lookback: How many blocks before a breakpoint a hit is looked for.
        clock: Seconds, for expiry.
    """

    def __init__(
        self,
        *,
        min_tokens: int = 1024,
        lookback: int = 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.min_tokens = min_tokens
        self.lookback = lookback
        self.clock = clock
        self._alive: dict[str, tuple[float, float]] = {}  # prefix hash -> (expiry, its TTL)
        self._lock = threading.Lock()

    def _blocks(self, body: dict[str, Any]) -> list[_Block]:
        out: list[_Block] = []
        digest = hashlib.sha256(str(body.get("model", "")).encode())
        tokens = 0
        for where, block in request_blocks(body):
            bare = block
            if isinstance(block, dict):
                bare = {k: v for k, v in block.items() if k != "cache_control"}
            digest.update(f"{where}\0{json.dumps(bare, sort_keys=True)}\0".encode())
            tokens += block_tokens(block)
            out.append(_Block(digest.copy().hexdigest(), tokens, _ttl(block)))
        return out

    def usage(self, body: dict[str, Any]) -> dict[str, Any]:
        """Apply the rules to one request: what it reads, writes and pays in full."""
        blocks = self._blocks(body)
        total = blocks[-1].tokens if blocks else 0
        marks = [i for i, b in enumerate(blocks) if b.ttl is not None]
        with self._lock:
            now = self.clock()
            read_at = self._longest_hit(blocks, marks, now)
            read = 0
            if read_at is not None:  # a hit renews the entry's life
                read = blocks[read_at].tokens
                life = self._alive[blocks[read_at].key][1]
                self._alive[blocks[read_at].key] = (now + life, life)
            written = {"5m": 0, "1h": 0}
            upto = read
            for i in marks:
                block = blocks[i]
                if block.tokens < self.min_tokens:
                    continue
                assert block.ttl is not None
                life = max(TTL_SECONDS[block.ttl], self._alive.get(block.key, (0.0, 0.0))[1])
                self._alive[block.key] = (now + life, life)
                if block.tokens > upto:
                    written[block.ttl] += block.tokens - upto
                    upto = block.tokens
        return {
            "input_tokens": total - upto,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": upto - read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": written["5m"],
                "ephemeral_1h_input_tokens": written["1h"],
            },
        }

    def _longest_hit(self, blocks: list[_Block], marks: list[int], now: float) -> int | None:
        """The last block of the longest live prefix within each breakpoint's lookback."""
        candidates = {i for mark in marks for i in range(max(0, mark - self.lookback), mark + 1)}
        for i in sorted(candidates, reverse=True):
            if self._alive.get(blocks[i].key, (0.0, 0.0))[0] > now:
                return i
        return None


def without_breakpoints(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Request messages without their ``cache_control`` marks, which move from request to
    request and are not part of the cached bytes: for comparing conversations."""
    return [
        {
            **m,
            "content": [
                {k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b
                for b in m["content"]
            ]
            if isinstance(m.get("content"), list)
            else m.get("content"),
        }
        for m in messages
    ]


def breakpoint_problem(body: dict[str, Any]) -> str | None:
    """The API's 400 for cache marks it refuses, in its words; None when they are fine.

    At most 4 blocks may carry ``cache_control``; never a thinking block nor an empty text
    block; and a one-hour mark may not come after a five-minute one.
    """
    marked = [(where, b) for where, b in request_blocks(body) if _ttl(b) is not None]
    if len(marked) > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {len(marked)}."
    for where, block in marked:
        if block.get("type") in ("thinking", "redacted_thinking"):
            return f"{where}: cache_control cannot be set on thinking blocks"
        if block.get("type") == "text" and not block.get("text"):
            return f"{where}: cache_control cannot be set for empty text blocks"
    ttls = [_ttl(b) for _, b in marked]
    if "5m" in ttls and "1h" in ttls[ttls.index("5m") :]:
        return "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
    return None
