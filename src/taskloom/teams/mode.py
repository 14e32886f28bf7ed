"""Whether agent teams are on: the option, else the setting, else the environment.

On with ``--teams``, the setting ``agentTeams: true``, or ``TASKLOOM_AGENT_TEAMS=1``
(``CLAUDE_CODE_EXPERIMENTAL_AGENT_TEAMS=1`` is honoured for users of Claude Code).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

#: The environment variables that switch teams on (ours, then Claude Code's).
ENV_VARS = ("TASKLOOM_AGENT_TEAMS", "CLAUDE_CODE_EXPERIMENTAL_AGENT_TEAMS")

_TRUE = ("1", "true", "yes", "on")


def teams_enabled(
    option: bool | None, settings: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> bool:
    """Whether the session may lead a team: the option, else the setting or the environment."""
    if option is not None:
        return option
    if settings.get("agentTeams") is True:
        return True
    env = os.environ if env is None else env
    return any(env.get(name, "").strip().lower() in _TRUE for name in ENV_VARS)
