"""A 30-turn session through ``taskloom -p`` reads most of its input from the prompt cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cache_session import AGENT_TURNS, MAIN_TURNS, prefix_tokens, read_share, run_session
from fake_cache import without_breakpoints
from helpers import clean_env

pytestmark = pytest.mark.e2e


def stable_part(body: dict[str, Any]) -> str:
    """A request's tools and system, as sent (the prefix every request of an agent shares)."""
    return json.dumps([body.get("tools"), body.get("system")])


def test_a_long_session_with_agents_and_a_fork_reads_its_prefix_from_the_cache(
    tmp_path: Path,
) -> None:
    run = run_session(tmp_path, lambda url: clean_env())
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    assert run.result.get("result") == "All done.", run.result
    asked = run.by_who()
    assert len(asked["main"]) >= MAIN_TURNS
    assert len(asked["A"]) == len(asked["B"]) == AGENT_TURNS
    for who in ("main", "A", "B"):
        requests = asked[who]
        # Byte-identical tools and system across its requests (tool calls, a background
        # shell, agents' notifications in between).
        assert len({stable_part(body) for body, _ in requests}) == 1, who
        shares = [read_share(usage) for _, usage in requests[2:]]
        assert min(shares) >= 0.80, (who, shares)
        read = sum(u["cache_read_input_tokens"] for _, u in requests[2:])
        whole = sum(
            u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] + u["input_tokens"]
            for _, u in requests[2:]
        )
        assert read / whole >= 0.80, who
    # The fork's first request reads its parent's prefix: tools, system, and the messages
    # up to the end of the parent's request that asked for the fork.
    fork_body, fork_usage = asked["fork"][0]
    assert stable_part(fork_body) == stable_part(asked["main"][0][0])
    shared = len(fork_body["messages"]) - 2  # then the fork call, then its directive
    parent = next(b for b, _ in asked["main"] if len(b["messages"]) == shared)
    inherited = without_breakpoints(fork_body["messages"][:shared])
    assert inherited == without_breakpoints(parent["messages"])
    assert fork_usage["cache_read_input_tokens"] >= prefix_tokens(fork_body, shared) > 0
    # What the session reports counts the cache at its prices: reads cost a tenth.
    (model,) = run.result["modelUsage"].values()
    assert model["cacheReadInputTokens"] == sum(u["cache_read_input_tokens"] for _, u in run.served)
    assert model["cacheCreationInputTokens"] == sum(
        u["cache_creation_input_tokens"] for _, u in run.served
    )
