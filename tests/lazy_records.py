"""Classes declared with taskloom._dataclass, for a fresh interpreter to unpickle (see
test_lazy_dataclass.py)."""

from __future__ import annotations

from dataclasses import field

from taskloom import _dataclass
from taskloom._dataclass import dataclass

__all__ = ["Frozen", "Plain", "Slotted", "_dataclass"]


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
