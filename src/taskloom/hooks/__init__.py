"""Hooks in Claude Code's settings format: configuration and the runner."""

from typing import TYPE_CHECKING

from taskloom._lazy import lazy_exports
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
__getattr__ = lazy_exports(
    __name__,
    {
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
    },
)


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
