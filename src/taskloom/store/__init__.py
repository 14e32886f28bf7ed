"""The embedded SQLite store.

The teams' tables (:mod:`taskloom.store.teams`) are imported when one of their names is first
asked for: most sessions never load a team.
"""

from typing import TYPE_CHECKING

from taskloom._lazy import lazy_exports
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

__getattr__ = lazy_exports(
    __name__,
    dict.fromkeys(
        ("TASK_STATUSES", "MemberRow", "TaskRow", "TeamRow", "TeamTables", "TeamTaskError"),
        "teams",
    ),
)


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
