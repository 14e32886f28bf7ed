"""``taskloom teammate --join FILE``: one teammate of a lead's team, in this terminal.

The lead starts it in a tmux pane of its own (``teammateMode: tmux``) with the spec it wrote
(:class:`~taskloom.teams.join.JoinSpec`); it runs until the teammate shuts down, is killed, or
its lead's process ends. The pane shows the teammate's conversation as it goes.

argparse, as every command: a process per teammate is started while its lead waits.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="taskloom teammate",
        description=(
            "Run one teammate of a lead's team (started by the lead in a tmux pane, with "
            "teammateMode tmux)."
        ),
    )
    parser.add_argument(
        "--join", required=True, type=Path, help="The spec file the lead wrote for it."
    )
    parser.add_argument("--debug", action="store_true", help="Log what happens to stderr.")
    return parser


def main_teammate(args: list[str]) -> int:
    """Run the teammate; the exit code (2: a bad command line or spec)."""
    import os
    import sys

    from taskloom.cli._run import configure_logging, run_main
    from taskloom.errors import TaskloomError, UsageError, describe
    from taskloom.harness import Harness
    from taskloom.teams.join import JoinSpec
    from taskloom.teams.member import PaneView
    from taskloom.teams.serve import serve_teammate, teammate_options

    parser = _parser()
    ns = parser.parse_args(args)
    try:
        join = JoinSpec.read(ns.join)
    except UsageError as exc:
        parser.error(str(exc))

    # Its environment is the lead's, from the spec: the pane's command line had only what
    # starting Python needs (see taskloom.teams.pane_executor.pane_environment).
    os.environ.update(join.env)
    configure_logging(ns.debug)
    view = PaneView(join)
    options = teammate_options(join, ns.join, view)

    async def serve() -> int:
        view.say(f"{join.agent_id}: a teammate of {join.team}'s lead")
        async with Harness(options) as harness:
            code = await serve_teammate(harness.started.teammate, ns.join)
            view.say(f"{join.agent_id}: ended")
            return code

    try:
        return run_main(serve)
    except (TaskloomError, OSError) as exc:
        sys.stderr.write(describe(exc) + "\n")
        return 2 if isinstance(exc, UsageError) else 1


__all__ = ["main_teammate"]
