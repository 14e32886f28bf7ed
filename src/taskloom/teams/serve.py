"""A teammate's own process: the session it runs, and serving its teammate until it ends.

``taskloom teammate --join FILE`` (:mod:`taskloom.cli.teammate_cmd`) reads the spec its lead
wrote (:class:`~taskloom.teams.join.JoinSpec`), opens a :class:`taskloom.Harness` with
:func:`teammate_options`, and hands what the harness made for it (``Started.teammate``) to
:func:`serve_teammate`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

from taskloom.errors import UsageError
from taskloom.options import Options

if TYPE_CHECKING:
    from taskloom.events import EngineObserver
    from taskloom.teams.join import JoinSpec
    from taskloom.teams.member import TeammateProcess


def teammate_options(join: JoinSpec, spec_file: Path, observer: EngineObserver) -> Options:
    """The session options of the process that runs the teammate of ``join``.

    Args:
        join: The spec its lead wrote.
        spec_file: Where it was read from (the session reads it again: ``join_team``).
        observer: What shows its conversation (its pane's view).
    """
    return Options(
        model=join.model,
        cwd=join.cwd,
        permission_mode=join.mode,
        persist_session=False,  # its conversation is kept as its lead's sidechain
        session_id=join.process_session or None,
        join_team=spec_file,
        observer=observer,
        **join.options,
    )


async def serve_teammate(member: TeammateProcess | None, spec_file: Path) -> int:
    """Run the teammate of this process until it ends; the exit code.

    Args:
        member: What the session made to run it (None: it was not started with
            ``join_team``).
        spec_file: The spec it was started from: removed once the session has read it.

    Raises:
        UsageError: This session is not a teammate's process.
    """
    if member is None:
        raise UsageError("serve_teammate: this session was not started with join_team")
    # Read (here and by the session): it holds the lead's environment, its API keys among
    # it, which no file need keep now.
    with contextlib.suppress(OSError):
        spec_file.unlink()
    return await member.serve()


__all__ = ["serve_teammate", "teammate_options"]
