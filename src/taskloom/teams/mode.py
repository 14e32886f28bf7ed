"""Whether agent teams are on, and where teammates run.

Teams are on with ``--teams``, the setting ``agentTeams: true``, or ``TASKLOOM_AGENT_TEAMS=1``
(``CLAUDE_CODE_EXPERIMENTAL_AGENT_TEAMS=1`` is honoured for users of Claude Code).

Teammates run in this process (``in-process``, the default) or each in a tmux pane of its own
(``tmux``; ``auto`` is tmux inside a tmux session). Asking for tmux where it cannot run is an
error that says why, never a quiet fallback to in-process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from taskloom.errors import UsageError

if TYPE_CHECKING:
    from taskloom.teams.panes import TmuxPanes

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


#: Where teammates run: ``teammateMode`` (setting), ``TASKLOOM_TEAMMATE_MODE``, ``--teammate-mode``.
TEAMMATE_MODES = ("in-process", "tmux", "auto")
#: The environment variable that chooses the teammate mode.
MODE_ENV = "TASKLOOM_TEAMMATE_MODE"


def teammate_mode(
    option: str | None, settings: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> str:
    """The teammate mode: the flag, else the environment, else the setting; ``in-process``.

    Raises:
        UsageError: The value is not one of :data:`TEAMMATE_MODES` (naming where it came from).
    """
    env = os.environ if env is None else env
    for source, value in (
        ("--teammate-mode", option),
        (MODE_ENV, env.get(MODE_ENV) or None),
        ("teammateMode", settings.get("teammateMode")),
    ):
        if value is None:
            continue
        if value not in TEAMMATE_MODES:
            raise UsageError(
                f"{source}: {value!r} is not a teammate mode; use {', '.join(TEAMMATE_MODES)}"
            )
        return str(value)
    return "in-process"


def pane_server(mode: str, env: Mapping[str, str] | None = None) -> TmuxPanes | None:
    """The tmux panes teammates go in, for ``mode`` (None: they run in this process).

    ``auto`` is tmux inside a tmux session (``$TMUX`` set, tmux on PATH), else in-process.

    Raises:
        UsageError: ``tmux`` was asked for and cannot run here, saying why.
    """
    env = os.environ if env is None else env
    if mode == "in-process":
        return None
    from taskloom.teams.panes import PaneError, locate

    if mode == "auto" and not env.get("TMUX"):
        return None
    try:
        return locate(env)
    except PaneError as exc:
        if mode == "auto":
            return None
        raise UsageError(str(exc)) from None
