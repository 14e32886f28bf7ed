"""A model whose choice may change between requests: the program driving a session says which.

``claude-agent-sdk``'s ``set_model`` switches the main thread to another model mid-session; the
engine keeps one model object, this one, and each request goes to the model chosen last.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from taskloom.models.base import Model, ModelRequest, StreamEvent


class ModelSwitch:
    """Passes every request to the model chosen last (:meth:`use`)."""

    def __init__(self, model: Model) -> None:
        """Start with ``model`` (the session's own)."""
        self.base = model
        self.current = model
        #: The chosen model's id.
        self.name = model.name
        self._chosen: dict[str, Model] = {}  # made for a spec, closed by close_chosen()
        # (the model before, the one chosen) while a turn runs on a model chosen for it
        self._turn: tuple[Model, Model] | None = None

    def choose(self, spec: str | None, settings: dict[str, Any]) -> str:
        """Go on with the model ``spec`` names (made once per spec); None: the session's own.

        Returns:
            The chosen model's id.

        Raises:
            UsageError: A malformed spec or unknown provider prefix.
            UserError: The provider is not configured.
        """
        if spec is None:
            self.use(self.base)
            return self.name
        if spec not in self._chosen:
            from taskloom.models.resolve import resolve_model

            self._chosen[spec] = resolve_model(spec, settings)
        self.use(self._chosen[spec])
        return self.name

    def choose_for_turn(self, spec: str, settings: dict[str, Any]) -> str:
        """:meth:`choose` ``spec`` until :meth:`end_turn` (a skill's or command's ``model``).

        Returns:
            The chosen model's id.

        Raises:
            UsageError: A malformed spec or unknown provider prefix.
            UserError: The provider is not configured.
        """
        before = self._turn[0] if self._turn is not None else self.current
        name = self.choose(spec, settings)
        self._turn = (before, self.current)
        return name

    def end_turn(self) -> None:
        """The turn is over: back to the model it started on, unless another was chosen since.

        A model chosen otherwise in the meantime (the fallback after a failure, the program's
        ``set_model``) stays.
        """
        turn, self._turn = self._turn, None
        if turn is not None and self.current is turn[1]:
            self.use(turn[0])

    def on(self, spec: str) -> bool:
        """Whether the model chosen last is the one ``spec`` named."""
        return spec in self._chosen and self.current is self._chosen[spec]

    async def close_chosen(self) -> None:
        """Close the models :meth:`choose` made (not the session's own)."""
        chosen, self._chosen = list(self._chosen.values()), {}
        for model in chosen:
            await model.aclose()

    def use(self, model: Model) -> None:
        """Send the next requests to ``model`` (one in flight finishes where it started)."""
        self.current, self.name = model, model.name

    def stream(
        self, request: ModelRequest
    ) -> AbstractAsyncContextManager[AsyncIterator[StreamEvent]]:
        """Stream ``request`` from the chosen model."""
        return self.current.stream(request)

    async def aclose(self) -> None:
        """Nothing of its own: the models it switches between are closed by their owner."""
