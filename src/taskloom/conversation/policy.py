"""The main thread's run policy: what a run does when one pass of the conversation is not enough.

A run of the main thread is one or more passes of its conversation (``Session.run``):

- with a ``json_schema``, a run that ends its turn without an accepted StructuredOutput call is
  reminded to make one, at most :data:`~taskloom.tools.structured.MAX_REMINDERS` times (print
  mode then reports ``error_max_structured_output_retries``);
- with a ``fallback_model``, a request that failed in a way worth retrying elsewhere (the
  provider overloaded, unreachable) switches the thread to that model, once, and the
  conversation goes on where the request failed. A request the provider refused (a bad key, a
  bad request) would be refused there too: it is raised.

:class:`TurnPolicy` is that policy, for whoever drives the main thread (the Harness builds it
with the session and delegates :meth:`taskloom.Harness.run` to it). It sits below the session's
layer: it is given the conversation's ``run``, not the session.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from taskloom.engine import EngineEvent, Finished
from taskloom.errors import ModelError
from taskloom.tools.structured import MAX_REMINDERS, REMINDER

if TYPE_CHECKING:
    from taskloom.messages import Message
    from taskloom.models.switch import ModelSwitch
    from taskloom.tools.structured import StructuredOutput

log = logging.getLogger(__name__)

#: One pass of the conversation: the prompt (None: go on where it stopped), its events.
Pass = Callable[["str | Message | None"], AsyncIterator[EngineEvent]]


class TurnPolicy:
    """Runs a prompt to its end on one conversation: reminders and the fallback model."""

    def __init__(
        self,
        run: Pass,
        switch: ModelSwitch,
        settings: dict[str, Any],
        *,
        structured: StructuredOutput | None = None,
        fallback: str | None = None,
    ) -> None:
        """Drive ``run`` (the conversation's one pass) under the policy.

        Args:
            run: One pass of the conversation (``Session.run``).
            switch: The model the conversation asks (the fallback is chosen on it).
            settings: The effective settings (how the fallback model is made).
            structured: The StructuredOutput tool, when runs must answer to a schema.
            fallback: The model spec to go on with after a retryable failure, if any.
        """
        self._run = run
        self._switch = switch
        self._settings = settings
        self._fallback = fallback
        #: The StructuredOutput tool (``json_schema``), None when answers are free text.
        self.structured = structured
        #: The reminders the last run needed.
        self.reminders = 0

    @property
    def structured_output(self) -> dict[str, Any] | None:
        """The answer the last run gave through StructuredOutput, if any."""
        return self.structured.value if self.structured is not None else None

    async def run(self, prompt: str | Message) -> AsyncGenerator[EngineEvent, None]:
        """Run ``prompt`` to its end; every pass's events, in order.

        Raises:
            ModelError: A failure the fallback does not take over (none given, not
                retryable, or on the fallback already).
        """
        if self.structured is not None:
            self.structured.value = None  # the answer of this run, not of the one before
        self.reminders = 0
        next_input: str | Message | None = prompt
        while True:
            finished: Finished | None = None
            try:
                async for event in self._run(next_input):
                    if isinstance(event, Finished):
                        finished = event
                    yield event
            except ModelError as exc:
                if not self._fall_back(exc):
                    raise
                next_input = None  # the conversation goes on where the request failed
                continue
            if not self._remind(finished):
                return
            self.reminders += 1
            next_input = REMINDER

    def _remind(self, finished: Finished | None) -> bool:
        """Whether a pass that ended so is reminded to answer through StructuredOutput."""
        if self.structured is None or self.structured.value is not None or finished is None:
            return False
        # Another ending (the turn limit, a stop) is not the model forgetting the tool.
        return finished.reason == "end_turn" and self.reminders < MAX_REMINDERS

    def _fall_back(self, exc: ModelError) -> bool:
        """Switch to the fallback model after a failure worth it; whether it switched."""
        spec = self._fallback
        if spec is None or not exc.retryable:
            return False  # a request the provider refuses would be refused there too
        if self._switch.on(spec):
            return False  # on the fallback already
        before = self._switch.name
        chosen = self._switch.choose(spec, self._settings)
        log.warning(
            "model %s failed (%s); going on with the fallback model %s", before, exc, chosen
        )
        return True


__all__ = ["Pass", "TurnPolicy"]
