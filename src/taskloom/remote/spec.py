"""What a remote agent is asked to do, and what of the parent's environment it gets."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from taskloom._dataclass import dataclass

#: The environment a remote agent's process gets: the model's endpoint and credentials, a
#: proxy. In the actor's runtime environment only: never in a log or an output.
_CARRIED_PREFIXES = ("ANTHROPIC_", "OPENAI_", "TASKLOOM_")
_CARRIED = {"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"}
#: The parent's own, never carried.
_NOT_CARRIED = {"TASKLOOM_HOME", "TASKLOOM_TASK_ID"}


@dataclass(frozen=True)
class RemoteSpec:
    """What a remote agent is asked to do.

    Attributes:
        description: The Agent call's description.
        prompt: Its task.
        agent_type: Its agent type.
        agents: ``--agents`` JSON defining that type where the worker cannot find it.
        model: Its model, by name (None: the worker's settings').
        mode: Its permission mode.
        skip_permissions: Whether every call is allowed (the parent's
            ``--dangerously-skip-permissions``).
        settings: The parent's settings, as JSON.
        name: The name it was spawned with.
    """

    description: str
    prompt: str
    agent_type: str
    agents: str | None = None
    model: str | None = None
    mode: str | None = None
    skip_permissions: bool = False
    settings: str = "{}"
    name: str | None = None


def carried_env(env: Mapping[str, str]) -> dict[str, str]:
    """What of ``env`` a remote agent's process gets (see ``_CARRIED_PREFIXES``)."""
    return {
        k: v
        for k, v in env.items()
        if (k.startswith(_CARRIED_PREFIXES) or k in _CARRIED) and k not in _NOT_CARRIED
    }


def settings_json(settings: Mapping[str, Any]) -> str:
    """The parent's settings as the worker reads them (``--settings`` JSON)."""
    try:
        return json.dumps(dict(settings))
    except (TypeError, ValueError):
        return "{}"


__all__ = ["RemoteSpec", "carried_env", "settings_json"]
