"""Task ids: a one-letter type prefix and 8 characters of ``0-9a-z`` from a CSPRNG.

Output files are named after ids, so an id must not be guessable: a predictable id would let
another local user plant a symlink at the output path before the task starts.
"""

from __future__ import annotations

import re
import secrets

from taskloom.tasks.types import TaskType

ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
ID_LENGTH = 8
_SPACE = len(ID_ALPHABET) ** ID_LENGTH

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


def new_task_id(task_type: TaskType) -> str:
    """Return a fresh id for a task of ``task_type``.

    One draw of ``secrets.randbelow(36**8)`` written in base 36: uniform over all ids (no
    modulo bias, unlike ``byte % 36``) and one CSPRNG call instead of eight.
    """
    n = secrets.randbelow(_SPACE)
    chars = []
    for _ in range(ID_LENGTH):
        n, digit = divmod(n, 36)
        chars.append(ID_ALPHABET[digit])
    return PREFIXES[task_type] + "".join(chars)


def is_task_id(value: str) -> bool:
    """Tell whether ``value`` has the shape of a task id."""
    return TASK_ID_RE.fullmatch(value) is not None


def type_of(task_id: str) -> TaskType | None:
    """Return the task type encoded in an id's prefix, or None for a foreign string."""
    if not is_task_id(task_id):
        return None
    return _TYPE_BY_PREFIX[task_id[0]]
