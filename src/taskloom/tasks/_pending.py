"""The rows a mailbox has not handed out yet, indexed by recipient and kind.

A session that fans out to thousands of agents holds thousands of pending rows (their
notifications, all for the main thread) while each agent looks at its own mailbox on every
turn: a look must cost what the rows of that recipient and kind cost, not what every pending
row of the session does. :class:`PendingRows` keeps each row once, by id, and under its
recipient and kind.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar


class Row(Protocol):
    """What the index reads of a row (a mailbox's ``Letter``)."""

    @property
    def id(self) -> str:
        """The row's id."""

    @property
    def recipient(self) -> str:
        """The address it is for."""

    @property
    def kind(self) -> str:
        """What it carries."""


Letter = TypeVar("Letter", bound=Row)
#: Which kinds a look is about: one, several, or None for any.
Kinds = str | tuple[str, ...] | None


def kinds_of(kinds: Kinds) -> tuple[str, ...] | None:
    """The kinds a look is about, as a tuple (None: every kind)."""
    if kinds is None:
        return None
    return kinds if isinstance(kinds, tuple) else (kinds,)


class PendingRows(Generic[Letter]):
    """Pending rows by id, with an index by recipient then kind (see the module docstring)."""

    def __init__(self) -> None:
        """Hold no row."""
        self._rows: dict[str, Letter] = {}
        self._index: dict[str, dict[str, dict[str, Letter]]] = {}
        self._per_kind: Counter[str] = Counter()

    def __contains__(self, letter_id: object) -> bool:
        """Whether a row of this id is pending."""
        return letter_id in self._rows

    def __len__(self) -> int:
        """How many rows are pending."""
        return len(self._rows)

    def get(self, letter_id: str) -> Letter | None:
        """The pending row of this id, if any."""
        return self._rows.get(letter_id)

    def add(self, letter: Letter) -> None:
        """Hold ``letter`` (a row of the same id is replaced)."""
        if letter.id in self._rows:
            self.pop(letter.id)
        self._rows[letter.id] = letter
        by_kind = self._index.setdefault(letter.recipient, {})
        by_kind.setdefault(letter.kind, {})[letter.id] = letter
        self._per_kind[letter.kind] += 1

    def pop(self, letter_id: str) -> Letter | None:
        """Stop holding the row ``letter_id``; the row, or None if it was not pending."""
        letter = self._rows.pop(letter_id, None)
        if letter is None:
            return None
        by_kind = self._index[letter.recipient]
        rows = by_kind[letter.kind]
        del rows[letter_id]
        if not rows:
            del by_kind[letter.kind]
            if not by_kind:
                del self._index[letter.recipient]
        self._per_kind[letter.kind] -= 1
        return letter

    def select(self, recipient: str | None, kinds: Kinds) -> Iterator[Letter]:
        """The rows for ``recipient`` (None: anyone) of ``kinds`` (None: any), unordered."""
        wanted = kinds_of(kinds)
        if recipient is None:
            if wanted is None:
                yield from self._rows.values()
                return
            if not any(self._per_kind[k] for k in wanted):
                return
            maps = [self._index[r] for r in self._index]
        else:
            found = self._index.get(recipient)
            maps = [found] if found is not None else []
        for by_kind in maps:
            for kind, rows in by_kind.items():
                if wanted is None or kind in wanted:
                    yield from rows.values()

    def any(self, recipient: str | None, kinds: Kinds) -> bool:
        """Whether a row for ``recipient`` (None: anyone) of ``kinds`` (None: any) is pending."""
        wanted = kinds_of(kinds)
        if recipient is None:
            if wanted is None:
                return bool(self._rows)
            return any(self._per_kind[k] for k in wanted)
        by_kind = self._index.get(recipient)
        if not by_kind:
            return False
        return wanted is None or any(k in by_kind for k in wanted)


__all__ = ["PendingRows", "kinds_of"]
