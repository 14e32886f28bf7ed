"""Taking a session: one process at a time runs it, decided in one store transaction.

Two processes resuming the same crashed session at once must not both deliver its
notifications. So before anything else (the orphan sweep may take seconds, replay hands
notifications out) a starting runtime claims the session: in one transaction it reads the
owner and, only if that owner is gone, writes itself in its place (compare-and-set on the owner's
pid and start time). The loser is told who holds the session.
"""

from __future__ import annotations

import os

from taskloom.errors import UserError
from taskloom.process.identity import boot_id, is_same_process, process_start_time
from taskloom.store import SessionRow, Store


def owner_gone(session: SessionRow) -> bool:
    """Whether the process recorded as running ``session`` is gone (dead, or its pid reused)."""
    return not is_same_process(session.pid, session.pid_start, session.boot_id)


def claim_session(
    store: Store, session_id: str, now: float, cwd: str | None = None
) -> SessionRow | None:
    """Make this process the owner of ``session_id`` (creating it if new), working in ``cwd``.

    ``cwd`` (default: the process's) is what ``--continue`` looks sessions up by.

    A session may be taken when it ended cleanly, when its owner is gone, or when its owner is
    this very process; never from another live process.

    Returns:
        The session as it was before (None for a new one): a crashed session's former owner
        is needed to settle what it left behind.

    Raises:
        UserError: Another live process runs the session.
        StoreError: The store could not be written.
    """
    me = os.getpid()
    mine = SessionRow(
        id=session_id,
        pid=me,
        pid_start=process_start_time(me) or 0.0,
        cwd=cwd if cwd is not None else os.getcwd(),
        started_at=now,
        ended_at=None,
        boot_id=boot_id(),
    )

    def may_take(current: SessionRow) -> bool:
        if current.ended_at is not None or owner_gone(current):
            return True
        return current.pid == me  # a second runtime of ours, as before

    taken, previous = store.claim_session(mine, may_take)
    if not taken:
        holder = previous.pid if previous is not None else "?"
        raise UserError(f"session {session_id} is in use by process {holder}")
    return previous
