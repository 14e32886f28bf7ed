"""Recording every process taskloom starts, before it starts, for the orphan sweep.

A process that is spawned first and recorded afterwards escapes the sweep if taskloom is
SIGKILLed in between. So the record comes first, and it names an environment tag rather than a
pid: a fresh ``TASKLOOM_TASK_ID`` is written to the store (committed), and only then is the child
started with that tag in its environment. Its descendants inherit the tag, and the sweep finds
them all by it once the recording process is gone. When the tree is reaped the record is
removed; one with survivors stays, so the next sweep tries again.

Code that spawns without a runtime at hand (hooks, worktree commands) finds the recorder of the
session it works for through :func:`current_recorder`: the runtime binds it when it starts.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import field

from taskloom._dataclass import dataclass
from taskloom.errors import StoreError
from taskloom.process.identity import boot_id, process_start_time
from taskloom.store import Store, TagRow

log = logging.getLogger(__name__)

_CURRENT: contextvars.ContextVar[ProcessRecorder | None] = contextvars.ContextVar(
    "taskloom_process_recorder", default=None
)


class ProcessRecorder:
    """Writes the process records of one session (owner: this process)."""

    def __init__(self, store: Store, session_id: str) -> None:
        """Record into ``store`` on behalf of ``session_id``."""
        self.store = store
        self.session_id = session_id

    def record_tags(self, tags: Iterable[str], *, path: str = "") -> list[TagRow]:
        """Record ``tags`` for the sweep, all committed before this returns.

        ``path``: a directory the tagged processes own (the sweep removes it with them).

        Raises:
            StoreError: The store could not record them (none is recorded).
        """
        me = os.getpid()
        return self.store.record_tags(
            self.session_id,
            tags,
            owner_pid=me,
            owner_start=process_start_time(me) or 0.0,
            boot_id=boot_id(),
            path=path,
        )

    def forget(self, rows: Iterable[TagRow]) -> None:
        """Remove records whose processes are reaped (committed with the next batch)."""
        if self.store.closed:
            # The session has ended meanwhile; the next sweep finds the owner gone, nothing
            # carrying the tags, and removes the records then.
            return
        self.store.forget_tags(rows)


def current_recorder() -> ProcessRecorder | None:
    """The recorder of the session this code runs for (None outside a runtime).

    None too once that session's store has closed: what runs after its end (a front end's last
    ``git diff``, say) belongs to no session, and would only fail to be recorded. Unbinding at
    close does not reach a context copied before it (a task's).
    """
    recorder = _CURRENT.get()
    return None if recorder is None or recorder.store.closed else recorder


def bind_recorder(recorder: ProcessRecorder | None) -> None:
    """Make ``recorder`` the current one for this task and the tasks it creates from now on."""
    _CURRENT.set(recorder)


@dataclass(slots=True)
class TagRecord:
    """A tag recorded for the sweep, to stamp into a child's environment.

    Attributes:
        tag: The ``TASKLOOM_TASK_ID`` value.
        rows: Its store records (empty when there was no recorder, or the store failed).
    """

    tag: str
    rows: list[TagRow] = field(default_factory=list)
    _keep: bool = False

    def keep(self) -> None:
        """Leave the record in place: part of the tree survived, the sweep must try again."""
        self._keep = True


@contextlib.contextmanager
def recorded_tag(
    prefix: str, recorder: ProcessRecorder | None = None, *, tag: str | None = None
) -> Iterator[TagRecord]:
    """A fresh tag ``PREFIX-xxxxxxxxxxxx``, recorded durably before the caller spawns with it.

    The record is removed on leaving the block unless :meth:`TagRecord.keep` was called. If
    the store cannot record it (a full disk), the tag is still given out and the process may
    be started unrecorded: refusing to run it (a guard hook, say) would be worse.

    Args:
        prefix: What the tag says about the process (``hook``, ``git``).
        recorder: Where to record (default: :func:`current_recorder`).
        tag: Use this tag instead of a fresh one (a shell task's id).
    """
    recorder = recorder or current_recorder()
    import secrets  # a fresh tag only (a hook, a git call): not at start-up

    record = TagRecord(tag or f"{prefix}-{secrets.token_hex(6)}")
    if recorder is not None:
        try:
            record.rows = recorder.record_tags([record.tag])
        except StoreError as exc:
            log.warning("%s runs unrecorded for the orphan sweep: %s", record.tag, exc)
    try:
        yield record
    finally:
        if record.rows and not record._keep:
            recorder_rows, record.rows = record.rows, []
            assert recorder is not None
            recorder.forget(recorder_rows)
