"""What of the lead's environment a pane teammate's command line carries.

A pane's command is typed into a shell the user can read (and tmux keeps): it carries what
starting Python and taskloom needs, never a secret; the rest (API keys among it) travels in the
teammate's spec file, private to the user.
"""

from __future__ import annotations

import re

#: The lead's variables a teammate's process does not inherit: it is not the lead's pane.
NOT_INHERITED = ("TMUX_PANE",)

#: What of the lead's environment the pane's command line carries: what starting Python and
#: taskloom needs (the rest, API keys among it, is in the spec file, private to the user).
_PANE_NAMES = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "COLORTERM", "LANG", "TZ", "TMPDIR",
     "VIRTUAL_ENV"}
)  # fmt: skip
_PANE_PREFIXES = ("LC_", "PYTHON", "TASKLOOM_")
#: Names that say a value is a secret: never on a command line, whatever the prefix.
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)


def pane_environment(env: dict[str, str]) -> dict[str, str]:
    """What of ``env`` a teammate's pane command line carries (see ``_PANE_NAMES``)."""
    return {
        k: v
        for k, v in env.items()
        if (k in _PANE_NAMES or k.startswith(_PANE_PREFIXES)) and not _SECRET.search(k)
    }


__all__ = ["NOT_INHERITED", "pane_environment"]
