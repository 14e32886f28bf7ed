"""What model calls cost: list prices per model, and a ledger of a session's usage per model.

Prices are US dollars per million tokens, Anthropic's list prices for the Claude families.
A model id is matched by family (``opus``, ``sonnet``, ``haiku``) and version, in either id
form (``claude-sonnet-4-5-20250929``, ``claude-3-5-haiku-latest``); a version newer than the
table costs what the family's newest entry does; the bare aliases (``sonnet``) are the newest.
Cache writes cost 1.25 times the input price (the five-minute cache), cache reads 0.1 times.
Any other model (OpenAI-compatible, local, scripted) costs 0.

The setting ``modelPrices`` overrides or adds prices, per million tokens::

    {"modelPrices": {"my-model": {"input": 0.5, "output": 1.5, "cacheRead": 0.05,
                                  "cacheWrite": 0.6}}}

A key matches a model id equal to it or starting with it (the longest key wins); a missing
``cacheRead`` or ``cacheWrite`` follows from ``input`` as above.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from taskloom.messages import Usage
from taskloom.tasks.usage import Pricer

CACHE_WRITE_FACTOR = 1.25
CACHE_READ_FACTOR = 0.1


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens of each kind."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    @classmethod
    def of(cls, input: float, output: float) -> Price:
        """A price with the standard cache multipliers."""
        return cls(input, output, input * CACHE_READ_FACTOR, input * CACHE_WRITE_FACTOR)

    def cost(self, usage: Usage) -> float:
        """What ``usage`` costs, in dollars."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_input_tokens * self.cache_read
            + usage.cache_creation_input_tokens * self.cache_write
        ) / 1_000_000


#: Per family: (from version, price), oldest first.
LIST_PRICES: dict[str, list[tuple[tuple[int, int], Price]]] = {
    "opus": [((3, 0), Price.of(15.0, 75.0)), ((4, 5), Price.of(5.0, 25.0))],
    "sonnet": [((3, 0), Price.of(3.0, 15.0))],
    "haiku": [
        ((3, 0), Price(0.25, 1.25, 0.03, 0.3)),
        ((3, 5), Price.of(0.8, 4.0)),
        ((4, 5), Price.of(1.0, 5.0)),
    ],
}

_FAMILY = re.compile(r"(opus|sonnet|haiku)")
# A version is one or two small numbers (a date, 8 digits, is not one of them).
_VERSION = re.compile(r"(?<![0-9])([0-9]{1,2})(?:[-.]([0-9]{1,2}))?(?![0-9])")


def list_price(model: str) -> Price | None:
    """The list price of an Anthropic model id or alias; None for any other model."""
    name = model.lower().rpartition("/")[2]  # e.g. a gateway's "anthropic/claude-..."
    family = _FAMILY.search(name)
    if family is None or not (name.startswith("claude") or name == family.group(1)):
        return None
    table = LIST_PRICES[family.group(1)]
    # The version is next to the family: after it (claude-opus-4-1), or before (claude-3-opus).
    after = _VERSION.match(name, family.end() + 1) if family.end() < len(name) else None
    before = _VERSION.search(name[: family.start()])
    found = after or before
    if found is None:
        return table[-1][1]
    version = (int(found.group(1)), int(found.group(2) or 0))
    price = table[0][1]
    for since, candidate in table:
        if version >= since:
            price = candidate
    return price


def price_for(model: str, overrides: Mapping[str, Any] | None = None) -> Price | None:
    """The price of ``model``: from ``overrides`` (setting ``modelPrices``), else the list."""
    if overrides:
        keys = [k for k in overrides if model == k or model.startswith(k)]
        if keys:
            raw = overrides[max(keys, key=len)]
            if isinstance(raw, Mapping):
                return _override(raw)
    return list_price(model)


def pricer(overrides: Mapping[str, Any] | None = None) -> Pricer:
    """What the usage ledger prices with: ``price_for`` under ``overrides`` (``modelPrices``)."""
    table = dict(overrides) if isinstance(overrides, Mapping) else None

    def price(model: str, usage: Usage) -> float | None:
        found = price_for(model, table)
        return found.cost(usage) if found is not None else None

    return price


def _override(raw: Mapping[str, Any]) -> Price:
    def number(key: str, default: float) -> float:
        value = raw.get(key)
        return float(value) if isinstance(value, int | float) else default

    base = number("input", 0.0)
    return Price(
        input=base,
        output=number("output", 0.0),
        cache_read=number("cacheRead", base * CACHE_READ_FACTOR),
        cache_write=number("cacheWrite", base * CACHE_WRITE_FACTOR),
    )


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cache_creation_input_tokens=a.cache_creation_input_tokens + b.cache_creation_input_tokens,
        cache_read_input_tokens=a.cache_read_input_tokens + b.cache_read_input_tokens,
    )


def usage_minus(a: Usage, b: Usage) -> Usage:
    """``a`` less ``b``, per kind of token (usage since ``b`` was taken)."""
    return Usage(
        input_tokens=a.input_tokens - b.input_tokens,
        output_tokens=a.output_tokens - b.output_tokens,
        cache_creation_input_tokens=a.cache_creation_input_tokens - b.cache_creation_input_tokens,
        cache_read_input_tokens=a.cache_read_input_tokens - b.cache_read_input_tokens,
    )


@dataclass(frozen=True, slots=True)
class LedgerMark:
    """What a ledger had counted at one moment (for :meth:`UsageLedger.model_usage` ``since``).

    Attributes:
        usage: Tokens per model.
        counts: How many times something was counted per model (responses, reports).
        unreported: Responses per model whose provider reported no usage.
    """

    usage: dict[str, Usage]
    counts: dict[str, int]
    unreported: dict[str, int]


class UsageLedger:
    """A session's token usage per model, every agent's calls included, and what it cost.

    A response whose provider reported no usage (``None``: some OpenAI-compatible servers
    send none) adds no tokens, but is counted as unreported: the figures of its model are
    then a lower bound, and :meth:`model_usage` says so (``responsesWithoutUsage``).

    Args:
        overrides: The setting ``modelPrices`` (see the module docstring).
    """

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        self.overrides = dict(overrides or {})
        self.by_model: dict[str, Usage] = {}
        self.counts: dict[str, int] = {}
        self.unreported: dict[str, int] = {}

    def add(self, model: str, usage: Usage | None) -> None:
        """Count one response of ``model`` (or what grew elsewhere); None: usage unknown."""
        self.by_model[model] = _add(self.by_model.get(model, Usage()), usage or Usage())
        self.counts[model] = self.counts.get(model, 0) + 1
        if usage is None:
            self.unreported[model] = self.unreported.get(model, 0) + 1

    def snapshot(self) -> LedgerMark:
        """What is counted so far (for :meth:`model_usage` ``since``)."""
        return LedgerMark(dict(self.by_model), dict(self.counts), dict(self.unreported))

    def unreported_responses(self, since: LedgerMark | None = None) -> int:
        """How many responses had no usage reported (since ``since``, if given)."""
        before = since.unreported if since is not None else {}
        return sum(n - before.get(model, 0) for model, n in self.unreported.items())

    def cost(self, since: LedgerMark | None = None) -> float:
        """Dollars spent (since the ``since`` snapshot, if given)."""
        return float(sum(entry["costUSD"] for entry in self.model_usage(since).values()))

    def model_usage(self, since: LedgerMark | None = None) -> dict[str, dict[str, Any]]:
        """Claude Code's ``modelUsage``: per model id its tokens and cost (since ``since``).

        A model is listed when something was counted for it (since ``since``): the same
        rule for the session's figures and for those since the last result, so the two
        agree whatever a response reported (nothing, or 0 tokens). ``responsesWithoutUsage``
        is added when some of its responses reported no usage.
        """
        out: dict[str, dict[str, Any]] = {}
        for model, total in self.by_model.items():
            usage, unreported = total, self.unreported.get(model, 0)
            if since is not None:
                if self.counts.get(model, 0) == since.counts.get(model, 0):
                    continue  # nothing counted since: left out, as Claude Code does
                usage = usage_minus(total, since.usage.get(model, Usage()))
                unreported -= since.unreported.get(model, 0)
            price = price_for(model, self.overrides)
            out[model] = {
                "inputTokens": usage.input_tokens,
                "outputTokens": usage.output_tokens,
                "cacheReadInputTokens": usage.cache_read_input_tokens,
                "cacheCreationInputTokens": usage.cache_creation_input_tokens,
                "webSearchRequests": 0,
                "costUSD": price.cost(usage) if price is not None else 0.0,
                "contextWindow": 200_000 if price is not None else 0,
                "maxOutputTokens": 0,
            }
            if unreported:
                out[model]["responsesWithoutUsage"] = unreported
        return out
