"""The embedded SQLite store."""

from taskloom.store.db import Store
from taskloom.store.rows import NotificationRow, ProcessRow, SessionRow

__all__ = ["NotificationRow", "ProcessRow", "SessionRow", "Store"]
