"""The error hierarchy: one root, typed branches that callers can catch precisely."""

from __future__ import annotations

import errno


class TaskloomError(Exception):
    """Root of every error taskloom raises on purpose."""


class UserError(TaskloomError):
    """Bad input from a person: a flag, a setting, a file. Reported without a traceback."""


class UsageError(UserError):
    """A bad flag, flag value or settings file: the command is not run (exit code 2)."""


class SettingsError(UsageError):
    """A settings file that exists but cannot be used: unreadable, invalid JSON, wrong types.

    Raised rather than skipping the file: a skipped file could hold a deny rule or a guard
    hook, and running without it would fail open.
    """


class ToolError(TaskloomError):
    """A tool call that cannot be carried out; its message goes back to the model."""


class TaskError(TaskloomError):
    """A task operation that cannot be done (unknown id, wrong owner, not running...)."""


class TaskNotFound(TaskError):
    """No task with this id exists in the runtime or the store."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task with id {task_id!r}")
        self.task_id = task_id


class TaskAccessDenied(TaskError):
    """The caller is neither the task's owner nor its session."""

    def __init__(self, task_id: str, caller: str, owner: str) -> None:
        super().__init__(f"task {task_id} belongs to {owner!r}; {caller!r} may not read or stop it")
        self.task_id = task_id
        self.caller = caller
        self.owner = owner


class InvalidTransition(TaskError):
    """A status change that the task state machine does not allow."""

    def __init__(self, task_id: str, old: str, new: str) -> None:
        super().__init__(f"task {task_id}: illegal status transition {old} -> {new}")
        self.task_id = task_id
        self.old = old
        self.new = new


class OutputError(TaskloomError):
    """A task output file could not be created, written or read safely."""


class StoreError(TaskloomError):
    """The embedded store is unusable (corrupt, newer schema, locked too long)."""


class ProcessError(TaskloomError):
    """A child process failed to start or to die."""

    def __init__(self, message: str, exit_code: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr = stderr


class ModelError(TaskloomError):
    """The language model provider answered with an error or not at all.

    Attributes:
        status: The HTTP status, when there was an answer.
        error_type: The provider's error type (``overloaded_error``, ``invalid_request_error``).
        retryable: Whether trying again later may succeed.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_type: str | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.retryable = retryable


#: What a user can do about the OS errors they are likely to meet, by errno.
_OS_ERROR_ADVICE = {
    errno.ENOSPC: "free some space on that file system, or point TASKLOOM_HOME elsewhere",
    errno.EDQUOT: "free some space within your quota, or point TASKLOOM_HOME elsewhere",
    errno.EROFS: "the file system is read-only; point TASKLOOM_HOME at a writable directory",
    errno.EACCES: "check the permissions of that path",
    errno.EPERM: "check the permissions of that path",
    errno.ELOOP: "taskloom does not follow symlinks in its state; put the real file or "
    "directory in the link's place",
    errno.ENOTDIR: "a file stands where a directory is expected; move it away",
    errno.EMFILE: "too many open files; raise the limit (ulimit -n)",
}


#: Most characters of a value an error message quotes: the value came from a model or a
#: program, and a 10 MB command echoed back whole would fill the model's context.
QUOTE_CHARS = 200


def quoted(value: str, limit: int = QUOTE_CHARS) -> str:
    """``value`` as an error message quotes it: its repr, cut to ``limit`` characters.

    A longer value is cut and its full length said, e.g. ``'echo aaa'… (10,485,765
    characters)``.
    """
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value):,} characters)"


def clipped(value: str, limit: int = QUOTE_CHARS) -> str:
    """``value`` as an error message shows it in its own words: as it is, or cut likewise."""
    if len(value) <= limit:
        return value
    return f"{value[:limit]}… ({len(value):,} characters)"


def describe_os_error(exc: OSError) -> str:
    """One line for a user: the path, what went wrong, and what to do about it.

    Args:
        exc: The error, as the OS (or our own checks, such as the refusal of symlinks) raised
            it.

    Returns:
        For example ``/home/u/.taskloom/sessions/x: refusing a symlinked directory (taskloom
        does not follow symlinks in its state; put the real file or directory in the link's
        place)``.
    """
    reason = exc.strerror or str(exc) or type(exc).__name__
    where = exc.filename if exc.filename is not None else None
    text = f"{where}: {reason}" if where is not None else reason
    advice = _OS_ERROR_ADVICE.get(exc.errno or 0)
    return f"{text} ({advice})" if advice else text


def reason(exc: BaseException) -> str:
    """What went wrong, in one line, without a label: the part of :func:`describe` after it.

    For a sentence that goes on (``turn failed: ...``, ``Cannot open session X: ...``). Our
    own errors say themselves; an OS error gets its path and what to do; anything else is a
    bug, named by its type so that an empty or bare message (a ``KeyError``'s ``'x'``) still
    says what happened.
    """
    if isinstance(exc, TaskloomError):
        return str(exc) or type(exc).__name__
    if isinstance(exc, OSError):
        return describe_os_error(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def describe(exc: BaseException) -> str:
    """``exc`` as the one line every front end shows: a label, then :func:`reason`.

    ``API Error:`` for the model provider's, ``Error:`` for ours and the OS's (what a user
    can meet and act on), ``Internal error:`` for anything else (a bug in taskloom).
    """
    if isinstance(exc, ModelError):
        label = "API Error"
    elif isinstance(exc, TaskloomError | OSError):
        label = "Error"
    else:
        label = "Internal error"
    return f"{label}: {reason(exc)}"
