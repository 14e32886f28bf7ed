"""A fast constructor for the frozen, slotted records the runtime makes per task.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; a churn of
tasks makes a mailbox row and a notification for each, and the generated function of
:func:`positional_maker` (one slot setter per field, as :mod:`dataclasses` generates
``__init__``) costs under half as much.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

_R = TypeVar("_R")


def positional_maker(cls: type[_R]) -> Callable[..., _R]:
    """A function making a ``cls`` from every field's value, positionally, in field order.

    What ``cls(**fields)`` makes, without its defaults (every value is given) and without
    ``__init__``: ``cls`` must be a frozen dataclass with slots and no ``__post_init__``.

    Raises:
        TypeError: ``cls`` is not such a class.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__, which the maker would skip")
    names = [field.name for field in dataclasses.fields(cls)]  # type: ignore[arg-type]
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    lines = [f"def make({', '.join(names)}):", "    made = new(cls)"]
    for i, name in enumerate(names):
        # Slot member descriptors set a slot without going through the frozen __setattr__.
        namespace[f"set{i}"] = inspect.getattr_static(cls, name).__set__
        lines.append(f"    set{i}(made, {name})")
    lines.append("    return made")
    exec("\n".join(lines), namespace)  # field names only: they come from the class
    made: Callable[..., _R] = namespace["make"]
    return made


__all__ = ["positional_maker"]
