"""Whether agent teams are on, and where teammates run.

Teams are on with ``--teams``, the setting ``agentTeams: true``, or ``TASKLOOM_AGENT_TEAMS=1``
(``CLAUDE_CODE_EXPERIMENTAL_AGENT_TEAMS=1`` is honoured for users of Claude Code).

Teammates run in this process (``in-process``, the default) or each in a pane of its own: a
tmux pane (``tmux``), an iTerm2 pane through the ``it2`` program (``iterm2``, experimental);
``auto`` is tmux inside a tmux session, iTerm2 inside iTerm2 when ``it2`` is installed, else
in-process. Asking for tmux or iTerm2 where it cannot run is an error that says why, never a
quiet fallback to in-process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from taskloom.errors import UsageError

if TYPE_CHECKING:
    from taskloom.teams.panes import PaneServer

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
TEAMMATE_MODES = ("in-process", "tmux", "iterm2", "auto")
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


def pane_server(mode: str, env: Mapping[str, str] | None = None) -> PaneServer | None:
    """The panes teammates go in, for ``mode`` (None: they run in this process).

    ``auto`` is tmux inside a tmux session (``$TMUX`` set, tmux on PATH), else iTerm2 inside
    iTerm2 (``$ITERM_SESSION_ID`` set or ``$TERM_PROGRAM`` ``iTerm.app``, ``it2`` on PATH),
    else in-process.

    Raises:
        UsageError: ``tmux`` or ``iterm2`` was asked for and cannot run here, saying why.
    """
    env = os.environ if env is None else env
    if mode == "in-process":
        return None
    from taskloom.teams.iterm_panes import inside_iterm, locate_iterm
    from taskloom.teams.panes import PaneError, locate

    if mode == "auto":
        for inside, find in ((bool(env.get("TMUX")), locate), (inside_iterm(env), locate_iterm)):
            if inside:
                with contextlib.suppress(PaneError):
                    return find(env)
        return None
    try:
        return locate_iterm(env) if mode == "iterm2" else locate(env)
    except PaneError as exc:
        raise UsageError(str(exc)) from None
