"""The one error ladder every front end shows an exception through: exception -> one line."""

from __future__ import annotations

import errno

import pytest

from taskloom.errors import ModelError, StoreError, TaskloomError, UsageError, describe, reason


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (ModelError("overloaded"), "API Error: overloaded"),
        (UsageError("--max-turns must be a number"), "Error: --max-turns must be a number"),
        (StoreError("store write failed"), "Error: store write failed"),
        (
            PermissionError(errno.EACCES, "Permission denied", "/srv/x"),
            "Error: /srv/x: Permission denied (check the permissions of that path)",
        ),
        (OSError(errno.EIO, "Input/output error"), "Error: Input/output error"),
        (KeyError("tool"), "Internal error: KeyError: 'tool'"),
        (RuntimeError("boom"), "Internal error: RuntimeError: boom"),
        # A bare exception still says what happened: its type.
        (AssertionError(), "Internal error: AssertionError"),
        (TaskloomError(), "Error: TaskloomError"),
    ],
)
def test_each_kind_of_error_gets_its_label_and_one_line(exc: BaseException, line: str) -> None:
    assert describe(exc) == line


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        # Ours say themselves, the model's too: "turn failed: overloaded".
        (ModelError("overloaded"), "overloaded"),
        (StoreError("cannot open store"), "cannot open store"),
        (
            OSError(errno.ENOSPC, "No space left on device", "/home/u/.taskloom"),
            "/home/u/.taskloom: No space left on device (free some space on that file "
            "system, or point TASKLOOM_HOME elsewhere)",
        ),
        (ValueError("bad"), "ValueError: bad"),
    ],
)
def test_the_reason_is_the_line_without_its_label(exc: BaseException, text: str) -> None:
    assert reason(exc) == text
    assert describe(exc).endswith(": " + text)
