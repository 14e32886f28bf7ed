"""Hooks in Claude Code's settings format: configuration and the runner."""

import importlib
from typing import TYPE_CHECKING, Any

from taskloom.hooks.config import (
    AGENT_EVENTS,
    DEFAULT_TIMEOUT_S,
    TOOL_EVENTS,
    CallbackHook,
    CallerGone,
    CommandHook,
    HookCaller,
    HookConfig,
    HookEvent,
    HookMatcher,
    ToolCall,
    compile_matcher,
)

if TYPE_CHECKING:
    from taskloom.hooks.background import Background, BackgroundHooks, background_hooks
    from taskloom.hooks.runner import (
        KILL_GRACE_S,
        MAX_CAPTURE_BYTES,
        HookListener,
        HookOutcome,
        HookResult,
        PermissionDecision,
        run_hooks,
    )

#: Names of the runner and of background hooks, imported when first asked for: a session
#: reads its hook configuration at start-up, and runs a hook (spawning a process) later if
#: ever.
_LAZY = {
    "Background": "background",
    "BackgroundHooks": "background",
    "background_hooks": "background",
    "KILL_GRACE_S": "runner",
    "MAX_CAPTURE_BYTES": "runner",
    "HookListener": "runner",
    "HookOutcome": "runner",
    "HookResult": "runner",
    "PermissionDecision": "runner",
    "run_hooks": "runner",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "AGENT_EVENTS",
    "DEFAULT_TIMEOUT_S",
    "KILL_GRACE_S",
    "MAX_CAPTURE_BYTES",
    "TOOL_EVENTS",
    "Background",
    "BackgroundHooks",
    "CallbackHook",
    "CallerGone",
    "CommandHook",
    "HookCaller",
    "HookConfig",
    "HookEvent",
    "HookListener",
    "HookMatcher",
    "HookOutcome",
    "HookResult",
    "PermissionDecision",
    "ToolCall",
    "background_hooks",
    "compile_matcher",
    "run_hooks",
]
