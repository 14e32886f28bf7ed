"""Classes declared with taskloom._dataclass for a fresh interpreter to use first (see
test_lazy_dataclass_gaps.py): one whose base upgrades old pickles in ``__setstate__``."""

from __future__ import annotations

import dataclasses
from typing import Any

from taskloom._dataclass import dataclass

__all__ = ["EagerVersioned", "LazyVersioned"]


class Versioned:
    """A base that fills in a field added after its instances were first pickled."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"added_later": "upgraded", **state})


@dataclass
class LazyVersioned(Versioned):
    """Ours."""

    n: int = 0
    added_later: str = "new"


@dataclasses.dataclass
class EagerVersioned(Versioned):
    """The standard one, for comparison."""

    n: int = 0
    added_later: str = "new"
