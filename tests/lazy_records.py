"""Classes declared with taskloom._dataclass, for a fresh interpreter to unpickle (see
test_lazy_dataclass.py and test_lazy_dataclass_edges.py): one of them has a base that
upgrades old pickles in ``__setstate__``."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

from taskloom import _dataclass
from taskloom._dataclass import dataclass

__all__ = ["EagerVersioned", "Frozen", "LazyVersioned", "Plain", "Slotted", "_dataclass"]


@dataclass(frozen=True, slots=True)
class Frozen:
    n: int
    names: tuple[str, ...] = ()


@dataclass
class Plain:
    n: int
    extra: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Slotted:
    n: int


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
