"""The embedded SQLite store."""

from taskloom.store.db import Store
from taskloom.store.rows import MailRow, ProcessRow, SessionRow, TagRow
from taskloom.store.teams import (
    TASK_STATUSES,
    MemberRow,
    TaskRow,
    TeamRow,
    TeamTables,
    TeamTaskError,
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
