"""How many tokens a model's context window holds.

Claude models hold 200,000 tokens; an id with Claude Code's ``[1m]`` suffix
(``claude-sonnet-4-5[1m]``, ``sonnet[1m]``) asks for the 1M-token window and holds 1,000,000.
Any other model (OpenAI-compatible, local, scripted) is taken to hold
:data:`DEFAULT_CONTEXT_WINDOW` (128,000) unless told otherwise.

The setting ``modelContextWindows`` overrides or adds windows, in tokens::

    {"modelContextWindows": {"qwen2.5-coder": 32768, "gpt-4.1": 1047576}}

A key matches a model id equal to it or starting with it (the longest key wins), as in
``modelPrices``. The environment variable ``TASKLOOM_CONTEXT_WINDOW`` sets one window for every
model and wins over both. A value that is not a whole number of at least 1 is ignored with a
warning naming where it came from (said once a process).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

#: The window of a Claude model, in tokens.
CLAUDE_CONTEXT_WINDOW = 200_000
#: The window of a Claude model asked for with the ``[1m]`` suffix.
CLAUDE_1M_CONTEXT_WINDOW = 1_000_000
#: What a model that is neither Claude nor named in ``modelContextWindows`` is taken to hold:
#: the common window of today's OpenAI-compatible models (gpt-4o, most open-weight models).
DEFAULT_CONTEXT_WINDOW = 128_000

#: The setting that overrides or adds windows per model id or prefix.
CONTEXT_WINDOWS_SETTING = "modelContextWindows"
#: The environment variable that sets the window of every model.
CONTEXT_WINDOW_ENV = "TASKLOOM_CONTEXT_WINDOW"

_ONE_MILLION_SUFFIX = "[1m]"
_FAMILIES = ("opus", "sonnet", "haiku")

_log = logging.getLogger(__name__)
#: The warnings already given: the window is asked for at every request, a warning once.
_WARNED: set[str] = set()


def context_window(model: str, settings: Mapping[str, Any] | None = None) -> int:
    """The context window of ``model``, in tokens.

    Args:
        model: The model id as the provider is asked for it (``claude-sonnet-4-5``,
            ``sonnet[1m]``, ``qwen2.5-coder:32b``).
        settings: The session's merged settings, for ``modelContextWindows``; None for none.

    Returns:
        ``TASKLOOM_CONTEXT_WINDOW`` when set to a valid number; else the window of the longest
        ``modelContextWindows`` key ``model`` starts with; else the built-in window.
    """
    from_env = _whole(
        os.environ.get(CONTEXT_WINDOW_ENV), f"the environment variable {CONTEXT_WINDOW_ENV}"
    )
    if from_env is not None:
        return from_env
    overrides = settings.get(CONTEXT_WINDOWS_SETTING) if settings else None
    if overrides is not None:
        found = _override(model, overrides)
        if found is not None:
            return found
    return builtin_context_window(model)


def builtin_context_window(model: str) -> int:
    """The window of ``model`` without settings: Claude's, else :data:`DEFAULT_CONTEXT_WINDOW`."""
    name = model.strip().lower().rpartition("/")[2]  # a gateway's "anthropic/claude-..."
    one_million = name.endswith(_ONE_MILLION_SUFFIX)
    name = name.removesuffix(_ONE_MILLION_SUFFIX)
    if not (name.startswith("claude") or name in _FAMILIES):
        return DEFAULT_CONTEXT_WINDOW
    return CLAUDE_1M_CONTEXT_WINDOW if one_million else CLAUDE_CONTEXT_WINDOW


def _override(model: str, overrides: Any) -> int | None:
    """The window ``modelContextWindows`` gives ``model``, or None (bad entries warned of)."""
    if not isinstance(overrides, Mapping):
        warn_once(
            f"the setting {CONTEXT_WINDOWS_SETTING} must be an object of model ids to token "
            f"counts, got {overrides!r}: ignored"
        )
        return None
    valid: dict[str, int] = {}
    for key, raw in overrides.items():
        value = _whole(raw, f"the setting {CONTEXT_WINDOWS_SETTING}.{key}")
        if value is not None and isinstance(key, str) and key:
            valid[key] = value
    keys = [k for k in valid if model == k or model.startswith(k)]
    return valid[max(keys, key=len)] if keys else None


def _whole(raw: Any, source: str) -> int | None:
    """``raw`` as a whole number of tokens, None when unset or bad (with a warning)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    value: int | None = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit():
        value = int(raw.strip())
    if value is None or value < 1:
        warn_once(f"{source} must be a whole number of tokens (at least 1), got {raw!r}: ignored")
        return None
    return value


def warn_once(message: str) -> None:
    """Log ``message`` as a warning once a process (settings are read for every engine)."""
    if message not in _WARNED:
        _WARNED.add(message)
        _log.warning("%s", message)


__all__ = [
    "CLAUDE_1M_CONTEXT_WINDOW",
    "CLAUDE_CONTEXT_WINDOW",
    "CONTEXT_WINDOWS_SETTING",
    "CONTEXT_WINDOW_ENV",
    "DEFAULT_CONTEXT_WINDOW",
    "builtin_context_window",
    "context_window",
]
