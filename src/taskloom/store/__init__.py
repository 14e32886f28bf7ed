"""The embedded SQLite store."""

from taskloom.store.db import NotificationRow, ProcessRow, SessionRow, Store

__all__ = ["NotificationRow", "ProcessRow", "SessionRow", "Store"]
