"""The records the store hands out: notifications, process records, sessions."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NotificationRow:
    """One queued notification as stored."""

    id: str
    seq: int
    session_id: str
    owner: str
    task_id: str
    kind: str
    priority: str
    body: str
    created_at: float
    delivered_at: float | None = None


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """A child process recorded for the orphan sweep.

    ``pid`` 0 marks a tag-only record: processes are found by their ``task_id`` tag alone
    (MCP servers, started by the SDK, whose pids we do not see).
    """

    pid: int
    pid_start: float
    pgid: int
    session_id: str
    task_id: str
    owner_pid: int
    owner_start: float
    boot_id: str = ""
    detached: bool = False


@dataclass(frozen=True, slots=True)
class SessionRow:
    """A session and the process that runs it."""

    id: str
    pid: int
    pid_start: float
    cwd: str
    started_at: float
    ended_at: float | None
    boot_id: str = ""
