"""What model calls cost: list prices per model, and the pricer of the session's usage ledger.

Prices are US dollars per million tokens, Anthropic's list prices for the Claude families.
A model id is matched by family (``opus``, ``sonnet``, ``haiku``) and version, in either id
form (``claude-sonnet-4-5-20250929``, ``claude-3-5-haiku-latest``); a version newer than the
table costs what the family's newest entry does; the bare aliases (``sonnet``) are the newest.
Cache writes cost 1.25 times the input price for the five-minute cache and twice the input
price for the one-hour cache (a response's ``usage.cache_creation`` says which; writes it does
not split are five-minute ones), cache reads 0.1 times. Any other model (OpenAI-compatible,
local, scripted) costs 0.

The setting ``modelPrices`` overrides or adds prices, per million tokens::

    {"modelPrices": {"my-model": {"input": 0.5, "output": 1.5, "cacheRead": 0.05,
                                  "cacheWrite": 0.6, "cacheWrite1h": 1.0}}}

A key matches a model id equal to it or starting with it (the longest key wins); a missing
``cacheRead``, ``cacheWrite`` (five minutes) or ``cacheWrite1h`` follows from ``input`` as
above.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from taskloom._dataclass import dataclass
from taskloom.tasks.usage import Pricer, TokenCounts

CACHE_WRITE_FACTOR = 1.25
CACHE_WRITE_1H_FACTOR = 2.0
CACHE_READ_FACTOR = 0.1


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens of each kind."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    cache_write_1h: float | None = None  # None: twice ``input``

    @classmethod
    def of(cls, input: float, output: float) -> Price:
        """A price with the standard cache multipliers."""
        return cls(input, output, input * CACHE_READ_FACTOR, input * CACHE_WRITE_FACTOR)

    @property
    def hour_write(self) -> float:
        """The price of a one-hour cache write."""
        given = self.cache_write_1h
        return self.input * CACHE_WRITE_1H_FACTOR if given is None else given

    def cost(self, usage: TokenCounts) -> float:
        """What ``usage`` costs, in dollars.

        The writes ``usage`` says were to the one-hour cache (a response's ``Usage``) cost
        :attr:`hour_write`; the others (sums, which do not split) the five-minute price.
        """
        hour = getattr(usage, "hour_cache_writes", 0)
        hour = hour if isinstance(hour, int) else 0
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_input_tokens * self.cache_read
            + (usage.cache_creation_input_tokens - hour) * self.cache_write
            + hour * self.hour_write
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

    def price(model: str, usage: TokenCounts) -> float | None:
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
        cache_write_1h=number("cacheWrite1h", base * CACHE_WRITE_1H_FACTOR),
    )
