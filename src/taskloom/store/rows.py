"""The records the store hands out: mail (notifications too), process and tag records, sessions."""

from __future__ import annotations

from taskloom._dataclass import dataclass


@dataclass(frozen=True, slots=True)
class MailRow:
    """One mailbox row as stored: a message to one recipient address.

    Attributes:
        id: Unique id (used to acknowledge).
        seq: Order of posting within the session.
        session_id: The session whose runtime delivers it.
        recipient: The address it is for: a session id or an agent id.
        sender: Who sent it: an agent id, a session id, or the task a notification is about.
        kind: ``notification``, ``message`` (text), ``protocol`` (a protocol message its
            recipient's model is shown) or ``control`` (one only code reads).
        topic: What a notification reports (``terminal``, ``stall``), a protocol or control
            row's type; '' for text.
        priority: ``next`` or ``later``.
        body: The text the recipient's transcript will hold.
        summary: A short preview ('' when none).
        created_at: Wall-clock time it was posted.
        delivered_at: When the recipient's transcript held it (None: not yet).
        payload: What code reads of a protocol or control row: the JSON object it was sent
            as ('' for text and notifications).
    """

    id: str
    seq: int
    session_id: str
    recipient: str
    sender: str
    kind: str
    topic: str
    priority: str
    body: str
    summary: str
    created_at: float
    delivered_at: float | None = None
    payload: str = ""


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """A child process recorded for the orphan sweep: its group leader, by pid and start."""

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
class TagRow:
    """An environment tag recorded for the orphan sweep before anything carrying it starts.

    The processes are found by the tag alone (``TASKLOOM_TASK_ID``): MCP servers, started by
    the SDK, whose pids we do not see; hooks and git; a shell until its pid is recorded.

    Attributes:
        id: The record's own id (never reused), to forget exactly this one.
        tag: The ``TASKLOOM_TASK_ID`` value the processes carry.
        session_id: The session it was recorded for.
        owner_pid: The session process that recorded it; the sweep acts once it is gone.
        owner_start: That process's start (seconds since boot).
        boot_id: The boot it ran in.
        created_at: Wall-clock time it was recorded.
        path: A directory those processes own ('' for none): removed once they are gone.
    """

    id: int
    tag: str
    session_id: str
    owner_pid: int
    owner_start: float
    boot_id: str = ""
    created_at: float = 0.0
    path: str = ""


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
