"""Hooks in Claude Code's settings format: configuration and the runner."""

from taskloom.hooks.background import Background, BackgroundHooks, background_hooks
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
from taskloom.hooks.runner import (
    KILL_GRACE_S,
    MAX_CAPTURE_BYTES,
    HookListener,
    HookOutcome,
    HookResult,
    PermissionDecision,
    run_hooks,
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
