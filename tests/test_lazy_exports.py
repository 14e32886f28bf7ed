"""A package's lazy re-exports (taskloom._lazy): imported on first ask, kept, and checked."""

from __future__ import annotations

import subprocess
import sys

from helpers import TIME_FACTOR

_CHECK = """
import sys
import taskloom.hooks as hooks
import taskloom.process as process
print("taskloom.hooks.runner" in sys.modules, "taskloom.process.kill" in sys.modules)
run_hooks = hooks.run_hooks
from taskloom.process import kill_tree
print("taskloom.hooks.runner" in sys.modules, "taskloom.process.kill" in sys.modules)
print(hooks.__dict__["run_hooks"] is run_hooks, kill_tree.__module__)
try:
    hooks.no_such_name
except AttributeError as exc:
    print(exc)
"""


def test_a_name_is_imported_from_its_submodule_when_first_asked_for() -> None:
    # A fresh interpreter: the suite has long imported both submodules.
    out = subprocess.run(
        [sys.executable, "-c", _CHECK],
        capture_output=True, text=True, timeout=60 * TIME_FACTOR, check=True,
    )  # fmt: skip
    assert out.stdout.splitlines() == [
        "False False",
        "True True",
        "True taskloom.process.kill",
        "module 'taskloom.hooks' has no attribute 'no_such_name'",
    ]
