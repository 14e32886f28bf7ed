"""The embedded SQLite store."""

from taskloom.store.db import Store
from taskloom.store.rows import MailRow, NotificationRow, ProcessRow, SessionRow, TagRow

__all__ = ["MailRow", "NotificationRow", "ProcessRow", "SessionRow", "Store", "TagRow"]
