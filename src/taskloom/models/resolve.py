"""From ``--model`` (or settings and environment) to a Model.

Accepted: ``claude-…`` ids, the aliases ``sonnet``/``opus``/``haiku`` (mapped through the
``modelAliases`` setting or ``TASKLOOM_MODEL_SONNET``…), ``anthropic:<id>``, ``openai:<id>``
and ``scripted:<file>``. Without one: the settings' ``model`` on Anthropic when its key (or
base URL) is set, else on the OpenAI-compatible provider when its key or base URL is set.
Provider modules are imported only when chosen. The HTTP providers' stream idle timeout is
``TASKLOOM_STREAM_IDLE_TIMEOUT``, else the ``streamIdleTimeout`` setting, else 90 s.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from taskloom.errors import UsageError, UserError
from taskloom.models.base import Model

ALIASES = {
    "sonnet": "claude-sonnet-4-5",
    "opus": "claude-opus-4-1",
    "haiku": "claude-haiku-4-5",
}
DEFAULT_ANTHROPIC_MODEL = "sonnet"
DEFAULT_OPENAI_MODEL = "gpt-4o"

NO_MODEL = (
    "No model configured: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN), or OPENAI_API_KEY "
    "or OPENAI_BASE_URL for an OpenAI-compatible server, or pass --model scripted:FILE."
)


def expand_alias(name: str, settings: dict[str, Any]) -> str:
    """Map ``sonnet``/``opus``/``haiku`` to a model id (settings, then env, then built-in)."""
    if name not in ALIASES:
        return name
    configured = (settings.get("modelAliases") or {}).get(name)
    return str(configured or os.environ.get(f"TASKLOOM_MODEL_{name.upper()}") or ALIASES[name])


def _anthropic_configured() -> bool:
    return any(
        os.environ.get(v)
        for v in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL")
    )


def _openai_configured() -> bool:
    return any(os.environ.get(v) for v in ("OPENAI_API_KEY", "OPENAI_BASE_URL"))


def resolve_model(spec: str | None, settings: dict[str, Any] | None = None) -> Model:
    """Build the model ``spec`` names (see the module docstring).

    Raises:
        UserError: Nothing usable is configured.
        UsageError: The spec is malformed or has an unknown ``provider:`` prefix.
    """
    settings = settings or {}
    if spec is None:
        if _anthropic_configured():
            spec = str(settings.get("model") or DEFAULT_ANTHROPIC_MODEL)
        elif _openai_configured():
            spec = "openai:" + str(
                settings.get("openaiModel")
                or os.environ.get("TASKLOOM_OPENAI_MODEL")
                or DEFAULT_OPENAI_MODEL
            )
        else:
            raise UserError(NO_MODEL)
    provider, sep, rest = spec.partition(":")
    if sep and provider == "scripted":
        from taskloom.models.scripted import ScriptedModel

        if not rest:
            raise UsageError("--model scripted: needs a file, e.g. scripted:turns.yaml")
        return ScriptedModel.from_file(rest)
    from taskloom.models._http import idle_timeout

    if sep and provider == "openai":
        from taskloom.models.openai import OpenAIModel

        if not rest:
            raise UsageError("--model openai: needs a model id, e.g. openai:gpt-4o")
        return OpenAIModel(rest, idle_timeout=idle_timeout(settings))
    if sep and provider == "anthropic":
        spec = rest
    elif sep:
        # Sent on, "foo:bar" would be retried against the Anthropic API as a model id.
        raise UsageError(
            f"unknown model prefix {provider!r} in {spec!r}: use anthropic:ID, openai:ID or "
            "scripted:FILE, a claude-… id, or sonnet|opus|haiku"
        )
    if not spec.strip():
        raise UsageError("--model needs a model id, e.g. sonnet or openai:gpt-4o")
    from taskloom.models.anthropic import AnthropicModel

    return AnthropicModel(expand_alias(spec, settings), idle_timeout=idle_timeout(settings))


def alias_resolver(model: Model, settings: dict[str, Any]) -> Callable[[str], Model] | None:
    """How subagents turn ``sonnet``/``opus``/``haiku`` or a ``claude-…`` id into a model.

    Only a session on Anthropic has such models; on another provider (or a scripted model)
    subagents keep the session's model, so None.
    """
    # Not loaded means not in use: importing the provider (httpx and all) just to ask would
    # cost a scripted or OpenAI session its start-up time.
    anthropic = sys.modules.get("taskloom.models.anthropic")
    if anthropic is None or not isinstance(model, anthropic.AnthropicModel):
        return None
    return lambda spec: resolve_model(spec, settings)
