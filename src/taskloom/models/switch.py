"""A model whose choice may change between requests: the program driving a session says which.

``claude-agent-sdk``'s ``set_model`` switches the main thread to another model mid-session; the
engine keeps one model object, this one, and each request goes to the model chosen last.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from taskloom.models.base import Model, ModelRequest, StreamEvent


class ModelSwitch:
    """Passes every request to the model chosen last (:meth:`use`)."""

    def __init__(self, model: Model) -> None:
        """Start with ``model``."""
        self.current = model
        #: The chosen model's id.
        self.name = model.name

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
