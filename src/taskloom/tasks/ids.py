"""Task ids: a one-letter type prefix and 8 characters of ``0-9a-z`` from a CSPRNG.

Output files are named after ids, so an id must not be guessable: a predictable id would let
another local user plant a symlink at the output path before the task starts.

The random bytes (of task ids, of mail ids, :func:`random_hex`, and of the UUIDs of sessions
and transcript lines, :func:`new_uuid`) come from ``os.urandom``,
read 4 KiB at a time: a system call per id was an eighth of a churn of short tasks. A forked
child drops what its parent had read, so the two never hand out the same bytes.
"""

from __future__ import annotations

import os
import re
import threading

from taskloom.tasks.types import TaskType

ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
ID_LENGTH = 8
_SPACE: int = len(ID_ALPHABET) ** ID_LENGTH

PREFIXES: dict[TaskType, str] = {
    TaskType.LOCAL_BASH: "b",
    TaskType.LOCAL_AGENT: "a",
    TaskType.REMOTE_AGENT: "r",
    TaskType.IN_PROCESS_TEAMMATE: "t",
    TaskType.LOCAL_WORKFLOW: "w",
    TaskType.MONITOR_MCP: "m",
    TaskType.DREAM: "d",
}

_TYPE_BY_PREFIX = {prefix: task_type for task_type, prefix in PREFIXES.items()}
TASK_ID_RE = re.compile(r"[bartwmd][0-9a-z]{8}")


#: Bytes read from ``os.urandom`` at a time.
POOL_BYTES = 4096
#: Six random bytes are taken for an id: the largest multiple of the id space below 2**48
#: bounds the draws kept (the others, 0.8 % of them, are drawn again: no modulo bias).
_DRAW_LIMIT: int = (2**48 // _SPACE) * _SPACE


class _Pool:
    """Random bytes from ``os.urandom``, read ahead; safe across threads and forks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.data = b""
        self.at = 0

    def take(self, n: int) -> bytes:
        with self.lock:
            if self.at + n > len(self.data):
                self.data, self.at = os.urandom(max(POOL_BYTES, n)), 0
            chunk = self.data[self.at : self.at + n]
            self.at += n
            return chunk

    def drop(self) -> None:
        self.lock = threading.Lock()  # a fork may have copied it held by another thread
        self.data, self.at = b"", 0


_POOL = _Pool()
os.register_at_fork(after_in_child=_POOL.drop)


def random_hex(nbytes: int) -> str:
    """``nbytes`` random bytes from the CSPRNG as hex (what ``secrets.token_hex`` gives)."""
    return _POOL.take(nbytes).hex()


def new_uuid() -> str:
    """A random UUID (version 4) as text: what ``str(uuid.uuid4())`` gives.

    From the same read-ahead bytes; the :mod:`uuid` module is not imported (it imports
    :mod:`platform`, a millisecond of every start-up).
    """
    raw = bytearray(_POOL.take(16))
    raw[6] = raw[6] & 0x0F | 0x40  # the version, 4
    raw[8] = raw[8] & 0x3F | 0x80  # the RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _draw_below_space() -> int:
    """A uniform draw from ``range(36**8)``."""
    while True:
        n = int.from_bytes(_POOL.take(6), "big")
        if n < _DRAW_LIMIT:
            return n % _SPACE


def new_task_id(task_type: TaskType) -> str:
    """Return a fresh id for a task of ``task_type``.

    One uniform draw below ``36**8`` written in base 36: uniform over all ids (no modulo
    bias, unlike ``byte % 36``).
    """
    n = _draw_below_space()
    # Two digits at a time, least significant first (a churn makes an id per task).
    n, d01 = divmod(n, 1296)
    n, d23 = divmod(n, 1296)
    d67, d45 = divmod(n, 1296)
    return PREFIXES[task_type] + _PAIRS[d01] + _PAIRS[d23] + _PAIRS[d45] + _PAIRS[d67]


#: Every number below 36**2 as its two digits, the least significant first.
_PAIRS: tuple[str, ...] = tuple(low + high for high in ID_ALPHABET for low in ID_ALPHABET)


def is_task_id(value: str) -> bool:
    """Tell whether ``value`` has the shape of a task id."""
    return TASK_ID_RE.fullmatch(value) is not None


def type_of(task_id: str) -> TaskType | None:
    """Return the task type encoded in an id's prefix, or None for a foreign string."""
    if not is_task_id(task_id):
        return None
    return _TYPE_BY_PREFIX[task_id[0]]
