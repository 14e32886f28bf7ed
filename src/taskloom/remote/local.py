"""The local Ray a session starts: recorded before it starts, and never outliving the session.

Before Ray starts, the session records a tag (``ray-<hex>``) owning a directory of its own for
Ray's files (``$TMPDIR/ray-<hex>``: its session directory, logs and sockets), and starts a
:class:`~taskloom.process.guard.Guard` carrying that tag. Every process of Ray's holds files
in that directory (its logs), which is how the sweep finds them all: Ray's own, its agents,
the workers its actors run in, whatever they call themselves (they set their titles over their
environment, so a tag in it could not be read back reliably).

- The session ends normally: Ray is shut down, the guard told ``bye``, what is left of Ray
  killed (verified), the directory removed, the record forgotten.
- The session dies (SIGKILL): its guard sweeps at once what it had recorded (Ray's processes,
  the remote agents' workers and, through the store each worker keeps in its scratch checkout,
  their commands) and removes the directories; failing that (the guard killed too), the next
  session's start-up sweep does.

Ray is told not to kill the processes its workers started when a worker exits (it would
SIGKILL a remote agent's worker process before that could stop its commands): the worker
watches its actor and stops its commands itself.
"""

from __future__ import annotations

import logging
import secrets
import tempfile
from pathlib import Path
from typing import IO, Any

from taskloom.errors import StoreError
from taskloom.process.guard import Guard
from taskloom.process.registry import ProcessRecorder
from taskloom.process.sweep import reap_tags
from taskloom.store import TagRow

log = logging.getLogger(__name__)

#: Ray's setting that kills a worker's child processes when the worker exits (see above).
KILL_CHILDREN = "kill_child_processes_on_worker_exit"
#: Seconds between SIGTERM and SIGKILL for what is left of Ray once it was shut down.
_GRACE_S = 2.0


class LocalRay:
    """The records, directory and guard of a local Ray (see the module docstring)."""

    def __init__(self, recorder: ProcessRecorder | None, log_file: IO[str] | None) -> None:
        """Record through ``recorder`` (None: unrecorded); the guard writes to ``log_file``."""
        self.recorder = recorder
        self.log_file = log_file
        self.tag = f"ray-{secrets.token_hex(6)}"
        # Short, under the temporary directory Ray would use: its socket paths must fit.
        self.dir = Path(tempfile.gettempdir()) / f"ray-{secrets.token_hex(4)}"
        self._rows: list[TagRow] = []
        self._guard: Guard | None = None

    def open(self) -> None:
        """Record the tag and the directory, make the directory, start the guard.

        Raises:
            OSError: The directory could not be made.
        """
        if self.recorder is not None:
            try:
                self._rows = self.recorder.record_tags([self.tag], path=str(self.dir))
            except StoreError as exc:
                log.warning("the local Ray runs unrecorded for the orphan sweep: %s", exc)
        self.dir.mkdir(mode=0o700)
        if self.recorder is not None and self._rows:
            self._guard = Guard(self.recorder.store.path, self.tag, grace=_GRACE_S)
            try:
                self._guard.start(self.log_file)
            except OSError as exc:
                self._guard = None
                log.warning("the local Ray has no guard (the next start sweeps it): %s", exc)

    def options(self) -> dict[str, Any]:
        """What ``ray.init`` is given for it."""
        return {
            "address": "local",
            "_temp_dir": str(self.dir),
            "_system_config": {KILL_CHILDREN: False},
        }

    async def close(self) -> None:
        """Once Ray is shut down: kill what is left of it, remove its directory, forget it."""
        if self._guard is not None:  # first: it carries the tag
            await self._guard.stop()
            self._guard = None
        if self._rows and self.recorder is not None and not self.recorder.store.closed:
            done = await reap_tags(self.recorder.store, self._rows, grace=_GRACE_S)
            if not done:
                log.warning("the local Ray's processes or files are left for the next sweep")
        elif not self._rows:
            from taskloom.process.kill import kill_tree
            from taskloom.process.sweep import remove_owned

            gone = await kill_tree(None, tag=self.tag, grace=_GRACE_S, holding=[str(self.dir)])
            if gone.verified:
                await remove_owned(str(self.dir), _GRACE_S)
        self._rows = []


__all__ = ["KILL_CHILDREN", "LocalRay"]
