"""The ``taskloom`` subcommands (demo, tasks, agents, plugins, peers, teams, worktrees)."""

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
    coordinator: Annotated[
        bool,
        typer.Option("--coordinator", help="Watch a coordinator direct three workers instead."),
    ] = False,
    team: Annotated[
        bool,
        typer.Option("--team", help="Watch a lead and two teammates split a task list instead."),
    ] = False,
) -> None:
    """Watch a scripted model use real tools and background tasks."""
    if coordinator and team:
        typer.echo("taskloom demo: --coordinator and --team are exclusive: choose one.", err=True)
        raise typer.Exit(2)
    if team:
        from taskloom.cli.demo_team import run_demo as run_team_demo

        raise typer.Exit(run_team_demo())
    if coordinator:
        from taskloom.cli.demo_coordinator import run_demo as run_coordinator_demo

        raise typer.Exit(run_coordinator_demo())
    from taskloom.cli.demo import run_demo

    raise typer.Exit(run_demo())


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
    plugin_dirs: Annotated[
        list[str] | None,
        typer.Option("--plugin-dir", help="Also a plugin in this directory (repeatable)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts.")] = False,
) -> None:
    """List the agents in effect here, where each is defined, and what shadows what."""
    from taskloom.cli.agents_cmd import list_agents

    raise typer.Exit(list_agents(plugin_dirs or [], as_json=as_json))


@app.command()
def plugins(
    plugin_dirs: Annotated[
        list[str] | None,
        typer.Option("--plugin-dir", help="Also a plugin in this directory (repeatable)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts.")] = False,
) -> None:
    """List the plugins that load here (and --plugin-dir's), what each brings, what was skipped."""
    from taskloom.cli.plugins_cmd import list_plugins

    raise typer.Exit(list_plugins(plugin_dirs or [], as_json=as_json))


@app.command()
def peers(
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts.")] = False,
) -> None:
    """List the sessions SendMessage can reach: uds: here, bridge: on the Ray cluster."""
    from taskloom.cli.peers_cmd import list_peers

    raise typer.Exit(list_peers(as_json=as_json))


@app.command()
def teams(
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts.")] = False,
) -> None:
    """List the agent teams in the store: members, and how many tasks each list holds."""
    from taskloom.cli.teams_cmd import list_teams

    raise typer.Exit(list_teams(as_json=as_json))


@app.command()
def worktrees(
    prune: Annotated[
        bool, typer.Option("--prune", help="Remove stale clean worktrees, keep the rest.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts.")] = False,
) -> None:
    """List taskloom's git worktrees (.taskloom/worktrees/): branch, clean or dirty, age."""
    import asyncio
    import dataclasses
    import json
    from pathlib import Path

    from taskloom.clock import span
    from taskloom.worktrees import FinishResult, WorktreeError, WorktreeInfo, list_worktrees
    from taskloom.worktrees import prune as prune_worktrees

    async def collect() -> tuple[list[WorktreeInfo], list[FinishResult] | None]:
        pruned = await prune_worktrees(Path.cwd()) if prune else None
        return await list_worktrees(Path.cwd()), pruned  # listed after pruning: what is left

    try:
        found, pruned = asyncio.run(collect())
    except WorktreeError as exc:
        typer.echo(f"taskloom worktrees: {exc}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        report: dict[str, object] = {"worktrees": [dataclasses.asdict(w) for w in found]}
        if pruned is not None:
            report["pruned"] = [dataclasses.asdict(r) for r in pruned]
        typer.echo(json.dumps(report, indent=2, default=str))
        return
    for r in pruned or []:
        typer.echo(f"{'kept' if r.kept else 'removed'} {r.path} ({r.branch}): {r.reason}")
    if not found:
        typer.echo("No taskloom worktrees.")
    for w in found:
        state = "missing" if w.missing else ("clean" if w.clean else "dirty")
        age = "-" if w.age_s is None else span(w.age_s)
        in_use = "  (in use)" if w.in_use else ""
        typer.echo(f"{w.path}  {w.branch or '(detached)'}  {state}  {age}{in_use}")
