"""Task output on disk.

``$TASKLOOM_HOME/sessions/<session>/tasks/<task-id>.output``: directories 0700, files 0600,
created exclusively with ``O_NOFOLLOW`` relative to a directory descriptor that was itself
opened with ``O_NOFOLLOW`` — a symlink planted at the file or at the tasks directory makes the
open fail instead of redirecting our writes.

Two producers write here. A shell child writes straight to :attr:`DiskTaskOutput.fd`; the cap is
then enforced from outside by :meth:`DiskTaskOutput.enforce_cap` (called by a watchdog, which
then stops the command). In-process producers call :meth:`DiskTaskOutput.append`, which writes
synchronously: memory stays bounded by one chunk whatever the producer's pace.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from taskloom.errors import OutputError
from taskloom.settings import DEFAULT_OUTPUT_CAP_BYTES, ensure_private_dir, tasks_dir

_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def human_size(n: int) -> str:
    """Render a byte count the way the truncation line states the cap (``5GB``)."""
    for unit, size in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


def truncation_line(cap: int) -> bytes:
    """The single line written where output past the cap was dropped."""
    return f"\n[output truncated: exceeded {human_size(cap)} disk cap]\n".encode()


def output_path(session_id: str, task_id: str, home: Path | None = None) -> Path:
    """Return where a task's output lives."""
    return tasks_dir(session_id, home) / f"{task_id}.output"


class DiskTaskOutput:
    """The output file of one task, open for writing.

    Attributes:
        path: The file's path.
        cap: Size limit in bytes; past it one truncation line is written and the rest dropped.
    """

    def __init__(self, path: Path, cap: int = DEFAULT_OUTPUT_CAP_BYTES) -> None:
        """Create ``path`` exclusively, refusing symlinks.

        Raises:
            OutputError: The file exists (or a symlink stands there), or the directory is a
                symlink or cannot be made private.
        """
        self.path = path
        self.cap = cap
        self._capped = False
        self._written = 0
        try:
            ensure_private_dir(path.parent)
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            raise OutputError(f"unsafe or unusable output directory {path.parent}: {exc}") from exc
        try:
            self._fd = os.open(path.name, _OPEN_FLAGS, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            reason = (
                "it already exists (a planted file or symlink?)"
                if exc.errno
                in (
                    errno.EEXIST,
                    errno.ELOOP,
                )
                else exc.strerror
            )
            raise OutputError(f"refusing to write task output {path}: {reason}") from exc
        finally:
            os.close(dir_fd)

    @classmethod
    def reopen(cls, path: Path, cap: int = DEFAULT_OUTPUT_CAP_BYTES) -> DiskTaskOutput:
        """Open an existing output file for appending (a resumed task), refusing symlinks."""
        self = cls.__new__(cls)
        self.path = path
        self.cap = cap
        self._capped = False
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise OutputError(f"cannot reopen task output {path}: {exc.strerror}") from exc
        self._written = self.size()
        return self

    @classmethod
    def for_task(
        cls,
        session_id: str,
        task_id: str,
        *,
        home: Path | None = None,
        cap: int = DEFAULT_OUTPUT_CAP_BYTES,
    ) -> DiskTaskOutput:
        """Create the output file of ``task_id`` in ``session_id``'s tasks directory."""
        return cls(output_path(session_id, task_id, home), cap)

    @property
    def fd(self) -> int:
        """The write descriptor (for binding a child's stdout and stderr)."""
        return self._fd

    @property
    def capped(self) -> bool:
        """Whether the cap was reached and later output is being dropped."""
        return self._capped

    def size(self) -> int:
        """Current size of the file in bytes."""
        return os.fstat(self._fd).st_size

    def append(self, data: str | bytes) -> None:
        """Write ``data`` now; past the cap write the truncation line once, drop the rest."""
        if self._capped or self._fd < 0:
            return
        raw = data.encode("utf-8", "replace") if isinstance(data, str) else data
        room = self.cap - self._written
        if len(raw) > room:
            self._write_all(raw[: max(room, 0)])
            self._write_all(truncation_line(self.cap))
            self._capped = True
            return
        self._write_all(raw)

    def _write_all(self, raw: bytes) -> None:
        view = memoryview(raw)
        while view:
            n = os.write(self._fd, view)
            self._written += n
            view = view[n:]

    def enforce_cap(self) -> bool:
        """Cut the file back to the cap if a child wrote past it; True once capped.

        The caller stops the writer: with the descriptor shared, bytes written after this call
        would land after the truncation line.
        """
        if self._capped:
            return True
        if self.size() <= self.cap:
            return False
        os.ftruncate(self._fd, self.cap)
        os.write(self._fd, truncation_line(self.cap))
        self._capped = True
        return True

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> DiskTaskOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_delta(path: Path | str, offset: int, max_bytes: int = 1024 * 1024) -> tuple[bytes, int]:
    """Read what was written after ``offset``: at most ``max_bytes``; returns (data, new offset).

    Readers keep their own offsets, so two readers never consume each other's data.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return b"", offset
    except OSError as exc:
        raise OutputError(f"cannot read task output {path}: {exc}") from exc
    try:
        data = os.pread(fd, max_bytes, offset)
    finally:
        os.close(fd)
    return data, offset + len(data)


def read_tail(path: Path | str, n_bytes: int) -> bytes:
    """Return the last ``n_bytes`` of the file (all of it when shorter)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise OutputError(f"cannot read task output {path}: {exc}") from exc
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - n_bytes)
        return os.pread(fd, size - start, start)
    finally:
        os.close(fd)
