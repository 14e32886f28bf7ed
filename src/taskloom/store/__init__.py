"""The embedded SQLite store.

The teams' tables (:mod:`taskloom.store.teams`) are imported when one of their names is first
asked for: most sessions never load a team.
"""

import importlib
from typing import TYPE_CHECKING, Any

from taskloom.store.db import Store
from taskloom.store.rows import MailRow, ProcessRow, SessionRow, TagRow

if TYPE_CHECKING:
    from taskloom.store.teams import (
        TASK_STATUSES,
        MemberRow,
        TaskRow,
        TeamRow,
        TeamTables,
        TeamTaskError,
    )

_TEAMS = frozenset(
    {"TASK_STATUSES", "MemberRow", "TaskRow", "TeamRow", "TeamTables", "TeamTaskError"}
)


def __getattr__(name: str) -> Any:
    if name not in _TEAMS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.teams"), name)
    globals()[name] = value
    return value


__all__ = [
    "TASK_STATUSES",
    "MailRow",
    "MemberRow",
    "ProcessRow",
    "SessionRow",
    "Store",
    "TagRow",
    "TaskRow",
    "TeamRow",
    "TeamTables",
    "TeamTaskError",
]
