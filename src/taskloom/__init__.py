"""taskloom: a multi-agent task runtime and harness for LLM coding agents.

``import taskloom`` is enough to run it from Python::

    import asyncio
    import taskloom

    async def main() -> None:
        async with taskloom.Harness(taskloom.Options(model="sonnet", cwd=".")) as h:
            async for event in h.run("summarise README.md"):
                if isinstance(event, taskloom.Finished):
                    print(event.result)

    asyncio.run(main())

The names below are imported on first use, so ``import taskloom`` itself costs nothing: the
command line (which imports this package first) pays only for what it runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from taskloom._version import __version__

#: Public name -> the module that defines it.
_EXPORTS = {
    "Harness": "taskloom.harness",
    "Options": "taskloom.harness",
    "run": "taskloom.harness",
    "tool": "taskloom.tools.function",
    "Tool": "taskloom.tools.base",
    "ToolContext": "taskloom.tools.base",
    "ToolResult": "taskloom.tools.base",
    "AssistantTurn": "taskloom.engine",
    "UserTurn": "taskloom.engine",
    "ToolDone": "taskloom.engine",
    "Finished": "taskloom.engine",
    "EngineEvent": "taskloom.engine",
    "TaskState": "taskloom.tasks.types",
    "TaskStatus": "taskloom.tasks.types",
    "TaskType": "taskloom.tasks.types",
    "TaskloomError": "taskloom.errors",
    "UserError": "taskloom.errors",
    "UsageError": "taskloom.errors",
    "SettingsError": "taskloom.errors",
    "ModelError": "taskloom.errors",
    "ToolError": "taskloom.errors",
    "TaskError": "taskloom.errors",
}

__all__ = [
    "AssistantTurn",
    "EngineEvent",
    "Finished",
    "Harness",
    "ModelError",
    "Options",
    "SettingsError",
    "TaskError",
    "TaskState",
    "TaskStatus",
    "TaskType",
    "TaskloomError",
    "Tool",
    "ToolContext",
    "ToolDone",
    "ToolError",
    "ToolResult",
    "UsageError",
    "UserError",
    "UserTurn",
    "__version__",
    "run",
    "tool",
]

if TYPE_CHECKING:
    from taskloom.engine import AssistantTurn, EngineEvent, Finished, ToolDone, UserTurn
    from taskloom.errors import (
        ModelError,
        SettingsError,
        TaskError,
        TaskloomError,
        ToolError,
        UsageError,
        UserError,
    )
    from taskloom.harness import Harness, Options, run
    from taskloom.tasks.types import TaskState, TaskStatus, TaskType
    from taskloom.tools.base import Tool, ToolContext, ToolResult
    from taskloom.tools.function import tool


def __getattr__(name: str) -> Any:
    """Import a public name on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'taskloom' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
