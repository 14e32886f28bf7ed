"""The ``taskloom`` subcommands (``demo``, ``tasks``, ``agents``), on typer."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(
    name="taskloom",
    help="A multi-agent task runtime for LLM coding agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def demo(
    fast: Annotated[bool, typer.Option("--fast", help="Kept for compatibility.")] = False,
) -> None:
    """Watch a scripted model use real tools and background tasks."""
    from taskloom.cli.demo import run_demo

    raise typer.Exit(run_demo(fast=fast))


@app.command()
def tasks(
    session: Annotated[
        str | None, typer.Option("--session", help="Session id (default: the latest).")
    ] = None,
    all_sessions: Annotated[bool, typer.Option("--all", help="Tasks of every session.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts.")] = False,
) -> None:
    """List tasks from the store (works while their session runs)."""
    from taskloom.cli.tasks_cmd import list_tasks

    raise typer.Exit(list_tasks(session=session, all_sessions=all_sessions, as_json=as_json))


@app.command()
def agents(
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts.")] = False,
) -> None:
    """List the agents in effect here, where each is defined, and what shadows what."""
    from taskloom.cli.agents_cmd import list_agents

    raise typer.Exit(list_agents(as_json=as_json))
