"""How full an agent's context window is, and whether to clear or compact it.

The provider says exactly how many tokens the last request read (its usage: input plus cache
reads and writes, :attr:`taskloom.messages.Usage.context_tokens`); what was added since is
estimated cheaply by :func:`estimate_tokens`. :class:`Fullness` puts the two against the
model's window (:func:`taskloom.models.windows.context_window`) and the session's
:class:`Thresholds`:

- ``contextClearPercent`` (default 60): past it, old tool results are cleared (no model call);
- ``autoCompactPercent`` (default 85; the environment variable
  ``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE``, Claude Code's, wins): past it, the conversation is
  compacted; ``autoCompact: false`` turns that off (clearing still applies).

A percent must be a number above 0 and at most 100; a bad value is ignored with a warning
naming where it came from (said once a process).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from taskloom._dataclass import dataclass
from taskloom.messages import Message, Usage
from taskloom.models.windows import warn_once

#: Characters per token of the estimate (JSON text; real tokenizers give 3 to 4.5).
CHARS_PER_TOKEN = 4
#: What an image is counted as, in tokens: about what the Messages API charges for an image
#: at its largest size before it scales it down (1.15 megapixels / 750).
IMAGE_TOKENS = 1_600

#: Defaults of the thresholds, in percent of the window.
DEFAULT_CLEAR_PERCENT = 60.0
DEFAULT_COMPACT_PERCENT = 85.0
#: Settings and the environment variable read by :meth:`Thresholds.from_settings`.
CLEAR_PERCENT_SETTING = "contextClearPercent"
COMPACT_PERCENT_SETTING = "autoCompactPercent"
AUTO_COMPACT_SETTING = "autoCompact"
COMPACT_PERCENT_ENV = "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A cheap estimate of the tokens ``messages`` take in a request.

    Their JSON form (the wire form: role and content) in characters divided by
    :data:`CHARS_PER_TOKEN`, rounded up, plus :data:`IMAGE_TOKENS` per image (wherever it is:
    in a tool result too), whose base64 data is not counted as text.
    """
    chars = 0
    images = 0
    for message in messages:
        wire, found = _without_images(message.wire())
        images += found
        chars += len(json.dumps(wire, ensure_ascii=False, separators=(",", ":")))
    return -(-chars // CHARS_PER_TOKEN) + images * IMAGE_TOKENS


def _without_images(value: Any) -> tuple[Any, int]:
    """``value`` with every image block replaced by a short stand-in, and how many there were."""
    if isinstance(value, dict):
        if value.get("type") == "image":
            return {"type": "image"}, 1
        count = 0
        out: dict[str, Any] = {}
        for key, item in value.items():
            out[key], found = _without_images(item)
            count += found
        return out, count
    if isinstance(value, list):
        count = 0
        items = []
        for item in value:
            copied, found = _without_images(item)
            items.append(copied)
            count += found
        return items, count
    return value, 0


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When to clear old tool results and when to compact, in percent of the window.

    Attributes:
        clear_percent: Clear old tool results at or past this.
        compact_percent: Compact at or past this.
        auto_compact: False: never compact on its own (clearing still applies).
    """

    clear_percent: float = DEFAULT_CLEAR_PERCENT
    compact_percent: float = DEFAULT_COMPACT_PERCENT
    auto_compact: bool = True

    @classmethod
    def from_settings(
        cls, settings: Mapping[str, Any] | None, env: Mapping[str, str] | None = None
    ) -> Thresholds:
        """The thresholds ``settings`` and the environment (``env``, else ``os.environ``) set.

        Bad values are ignored (the default is used) with a warning naming the setting or
        variable.
        """
        settings = settings or {}
        env = os.environ if env is None else env
        clear = _percent(
            settings.get(CLEAR_PERCENT_SETTING), f"the setting {CLEAR_PERCENT_SETTING}"
        )
        compact = _percent(
            env.get(COMPACT_PERCENT_ENV), f"the environment variable {COMPACT_PERCENT_ENV}"
        )
        if compact is None:
            compact = _percent(
                settings.get(COMPACT_PERCENT_SETTING), f"the setting {COMPACT_PERCENT_SETTING}"
            )
        auto = settings.get(AUTO_COMPACT_SETTING)
        if auto is not None and not isinstance(auto, bool):
            warn_once(
                f"the setting {AUTO_COMPACT_SETTING} must be true or false, got {auto!r}: ignored"
            )
            auto = None
        return cls(
            clear_percent=DEFAULT_CLEAR_PERCENT if clear is None else clear,
            compact_percent=DEFAULT_COMPACT_PERCENT if compact is None else compact,
            auto_compact=True if auto is None else auto,
        )


@dataclass(frozen=True, slots=True)
class Fullness:
    """How full a context window is about to be: the next request's tokens against the window.

    Attributes:
        tokens: What the next request is expected to hold.
        window: The model's context window, in tokens.
        thresholds: When to clear and when to compact.
    """

    tokens: int
    window: int
    thresholds: Thresholds = Thresholds()

    @classmethod
    def measure(
        cls,
        last: Usage | None,
        added: Sequence[Message],
        window: int,
        thresholds: Thresholds | None = None,
    ) -> Fullness:
        """The fullness of the next request.

        Args:
            last: The usage of the last request of this conversation (its context tokens:
                input plus cache reads and writes), or None when there is none yet (a new or
                resumed conversation: then ``added`` must be all of it).
            added: The messages added since that request: its answer and what came after
                (estimated with :func:`estimate_tokens`).
            window: The model's context window, in tokens (at least 1).
            thresholds: When to clear and compact; the defaults when None.

        Raises:
            ValueError: ``window`` is less than 1.
        """
        if window < 1:
            raise ValueError(f"a context window must hold at least 1 token, got {window}")
        base = last.context_tokens if last is not None else 0
        return cls(base + estimate_tokens(added), window, thresholds or Thresholds())

    @property
    def fraction(self) -> float:
        """The share of the window used (above 1 when it overflows)."""
        return self.tokens / self.window

    @property
    def percent(self) -> float:
        """The share of the window used, in percent."""
        return self.fraction * 100

    def should_clear(self) -> bool:
        """Whether old tool results should be cleared before the next request."""
        return self.percent >= self.thresholds.clear_percent

    def should_compact(self) -> bool:
        """Whether the conversation should be compacted before the next request."""
        return self.thresholds.auto_compact and self.percent >= self.thresholds.compact_percent

    def less(self, tokens: int) -> Fullness:
        """The fullness once ``tokens`` are taken out (say, what clearing freed)."""
        return replace(self, tokens=max(0, self.tokens - tokens))


def _percent(raw: Any, source: str) -> float | None:
    """``raw`` as a percent above 0 and at most 100; None when unset or bad (warned of)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    value: float | None = None
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        value = float(raw)
    elif isinstance(raw, str):
        try:
            value = float(raw.strip())
        except ValueError:
            value = None
    if value is None or not 0 < value <= 100:
        warn_once(f"{source} must be a percent above 0 and at most 100, got {raw!r}: ignored")
        return None
    return value


__all__ = [
    "AUTO_COMPACT_SETTING",
    "CLEAR_PERCENT_SETTING",
    "COMPACT_PERCENT_ENV",
    "COMPACT_PERCENT_SETTING",
    "DEFAULT_CLEAR_PERCENT",
    "DEFAULT_COMPACT_PERCENT",
    "IMAGE_TOKENS",
    "Fullness",
    "Thresholds",
    "estimate_tokens",
]
