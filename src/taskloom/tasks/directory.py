"""The directory of addresses: the names agents were given at spawn, kept in the store.

A name is bound to an address (an agent id) per session, so a resumed session, or another
process reading the store, knows it too. Each entry has a team, '' for now: ``name@team``
addresses will be entries with a team, resolved by the same table.
"""

from __future__ import annotations

from taskloom.clock import SYSTEM_CLOCK, Clock
from taskloom.store import Store


class Directory:
    """The names of one session's agents (see the module docstring)."""

    def __init__(self, store: Store, session_id: str, clock: Clock = SYSTEM_CLOCK) -> None:
        """Bind the directory to a session's entries in ``store``."""
        self._store = store
        self._session_id = session_id
        self._clock = clock

    def bind(self, name: str, address: str, *, replace: bool = False) -> bool:
        """Give ``address`` the name ``name``, durably, now.

        Args:
            name: The name (unique in the session).
            address: What it names (an agent id).
            replace: Move a name that is taken to ``address`` instead of refusing.

        Returns:
            Whether the name now names ``address`` (False: it was taken).

        Raises:
            StoreError: The store could not be written.
        """
        when = self._clock.time()
        if self._store.bind_address(self._session_id, name, address, when=when):
            return True
        if not replace:
            return self.resolve(name) == address
        return self._store.bind_address(self._session_id, name, address, when=when, replace=True)

    def resolve(self, name: str) -> str | None:
        """The address ``name`` names, or None."""
        return self.entries().get(name)

    def entries(self) -> dict[str, str]:
        """Every name of the session and the address it names, oldest first."""
        return self._store.addresses(self._session_id)
