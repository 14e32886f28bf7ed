"""One engine's context window, kept from overflowing: clearing first, then compaction.

Before each request :meth:`ContextKeeper.before_request` takes how full the window is — the
last request's context as the provider counted it (input, cache reads and writes), plus an
estimate of what was added since — and, past the first threshold, replaces old tool results
whose content is on disk by one-line stubs (no model call); past the second, with automatic
compaction on, compacts the conversation (:mod:`taskloom.context.compaction`). A request the
provider refuses as too long anyway (a huge tool result, a small window) is compacted and
retried once (:meth:`ContextKeeper.overflowed`); a second refusal is the run's error.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from taskloom.context.compaction import Compactable, CompactionRefused, Trigger, compact, too_long
from taskloom.context.window import Fullness, Thresholds, estimate_tokens
from taskloom.errors import ModelError

if TYPE_CHECKING:
    from taskloom.engine_config import EngineConfig
    from taskloom.events import Compacted

log = logging.getLogger(__name__)

#: The last assistant turns whose tool results are never cleared (the model works with them).
CLEAR_KEEP_TURNS = 3
#: The least share of the window a clearing must free to be done: each one changes the
#: conversation's cached prefix from the first result it clears, which the next request pays
#: to write again.
CLEAR_AT_LEAST = 0.02
#: After an automatic compaction failed (a hook refused it, the summary failed), how much the
#: context must grow (a share of the window) before it is tried again: not on every request.
RETRY_AFTER_GROWTH = 0.05


class ContextKeeper:
    """Keeps one engine's conversation within its model's context window.

    Attributes:
        window: The model's context window, in tokens.
    """

    def __init__(self, config: EngineConfig, save_dir: Path) -> None:
        """Keep the conversation of the engine configured by ``config``.

        Args:
            config: The engine's configuration (its model, settings).
            save_dir: Where a cleared tool result's content is saved, if it is not on disk.
        """
        from taskloom.models.windows import context_window

        self.config = config
        self.save_dir = save_dir
        self.window = context_window(config.model_name or config.model.name, config.settings)
        self.thresholds = Thresholds.from_settings(config.settings)
        #: How many messages the last request held: those after it are estimated.
        self._sent = 0
        #: The context an automatic compaction waits for after one failed.
        self._retry_at = 0

    def take_over(self, previous: ContextKeeper) -> None:
        """Go on from ``previous``'s count (an engine continuing another's conversation)."""
        self._sent = previous._sent

    def fullness(self, engine: Compactable) -> Fullness:
        """How full the next request would make the window (counted, plus estimated)."""
        added = engine.messages[self._sent :] if self._sent <= len(engine.messages) else []
        used = engine.context_tokens + estimate_tokens(added)
        return Fullness(used, self.window, self.thresholds)

    async def before_request(self, engine: Compactable) -> Compacted | None:
        """Clear, then compact if the window is still too full; the compaction, if any."""
        fullness = self.fullness(engine)
        compacted = None
        if fullness.should_clear():
            fullness = fullness.less(self._clear(engine))
        if fullness.should_compact() and fullness.tokens >= self._retry_at:
            try:
                compacted = await compact(
                    engine, "auto", window=self.window, pre_tokens=fullness.tokens
                )
                self._retry_at = 0
            except (CompactionRefused, ModelError) as exc:
                # Not fatal: the request may still fit; if not, the provider says so.
                log.warning("automatic compaction did not happen: %s", exc)
                self._retry_at = fullness.tokens + int(self.window * RETRY_AFTER_GROWTH)
        self._sent = len(engine.messages)
        return compacted

    async def overflowed(self, engine: Compactable, error: ModelError) -> Compacted:
        """The provider refused the request as too long: compact, for one retry.

        Raises:
            ModelError: ``error`` itself, when it is not about length or compaction failed.
        """
        if not too_long(error):
            raise error
        used = self.fullness(engine).tokens
        try:
            compacted = await compact(engine, "auto", window=self.window, pre_tokens=used)
        except CompactionRefused as exc:
            raise ModelError(f"{error} (and it could not be compacted: {exc})") from error
        self._sent = len(engine.messages)
        return compacted

    async def compact(
        self, engine: Compactable, trigger: Trigger, instructions: str | None
    ) -> Compacted:
        """Compact now (``/compact``); see :func:`taskloom.context.compaction.compact`."""
        used = self.fullness(engine).tokens
        compacted = await compact(
            engine, trigger, instructions, window=self.window, pre_tokens=used
        )
        self._sent = len(engine.messages)
        return compacted

    def _clear(self, engine: Compactable) -> int:
        """Stub old tool results that are on disk; the tokens that freed (estimated)."""
        from taskloom.context.clearing import clear_old_results

        cleared = clear_old_results(
            engine.messages, keep_turns=CLEAR_KEEP_TURNS, save_dir=self.save_dir
        )
        freed = cleared.tokens_freed
        if freed < self.window * CLEAR_AT_LEAST:
            return 0  # not worth writing the cached prefix again
        engine.messages = cleared.messages
        log.debug("%d old tool results cleared (~%d tokens)", cleared.count, freed)
        return freed
