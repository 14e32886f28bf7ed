"""Names a package re-exports from its own submodules, imported when first asked for.

Importing any module of a package runs the package's ``__init__`` first: one that imported
every submodule to re-export its names would load them all for a caller that wants one (a
session reads its hook configuration at start-up, and may never run a hook). A package
declares such names with :func:`lazy_exports` instead, keeping ``TYPE_CHECKING`` imports of
them for type checkers::

    if TYPE_CHECKING:
        from taskloom.hooks.runner import run_hooks

    __getattr__ = lazy_exports(__name__, {"run_hooks": "runner"})

Only the package's own submodules are named: a package may import its own modules, so the
layering checks need not see these imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, sources: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports each name of ``sources`` late.

    Args:
        package: The package's ``__name__``.
        sources: Each name, and the package's submodule it comes from (``"runner"`` for
            ``package.runner``). A name, once imported, is kept in the package.

    Returns:
        The function to assign to the package's ``__getattr__``.
    """

    def lazy_attribute(name: str) -> Any:
        submodule = sources.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{submodule}"), name)
        setattr(sys.modules[package], name, value)
        return value

    return lazy_attribute
