"""The ``taskloom`` subcommands (demo, tasks, agents, plugins, peers, teams, worktrees).

argparse, as print mode and the other commands: one argument parser for the whole command
line, and no command-line library of a dependency (typer, click) loaded by any of them.
Each command's module is imported when it runs.
"""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = "A multi-agent task runtime for LLM coding agents."


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", dest="as_json", action="store_true", help="JSON for scripts.")


def _plugin_dir_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugin-dir",
        dest="plugin_dirs",
        action="append",
        default=[],
        metavar="DIR",
        help="Also a plugin in this directory (repeatable).",
    )


def _parser() -> argparse.ArgumentParser:
    """The subcommands' parser: ``taskloom NAME [flags]``."""
    parser = argparse.ArgumentParser(prog="taskloom", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text)

    demo = command("demo", "Watch a scripted model use real tools and background tasks.")
    demo.add_argument(
        "--coordinator", action="store_true", help="Watch a coordinator direct three workers."
    )
    demo.add_argument(
        "--team", action="store_true", help="Watch a lead and two teammates split a task list."
    )
    tasks = command(
        "tasks", "List tasks from the store, a page at a time, oldest first (works while they run)."
    )
    tasks.add_argument("--session", help="Session id (default: the latest).")
    tasks.add_argument(
        "--all", dest="all_sessions", action="store_true", help="Tasks of every session."
    )
    _json_flag(tasks)
    tasks.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="The most rows shown (default 100 in the table, all with --json; 0: all).",
    )
    tasks.add_argument(
        "--offset", type=int, default=0, metavar="N", help="Rows to skip first (paging)."
    )
    agents = command(
        "agents", "List the agents in effect here, where each is defined, and what shadows what."
    )
    _plugin_dir_flag(agents)
    _json_flag(agents)
    plugins = command(
        "plugins",
        "List the plugins that load here (and --plugin-dir's), what each brings, what was skipped.",
    )
    _plugin_dir_flag(plugins)
    _json_flag(plugins)
    peers = "List the sessions SendMessage can reach: uds: here, bridge: on the Ray cluster."
    _json_flag(command("peers", peers))
    teams = "List the agent teams in the store: members, and how many tasks each list holds."
    _json_flag(command("teams", teams))
    worktrees = command(
        "worktrees",
        "List taskloom's git worktrees (.taskloom/worktrees/): branch, clean or dirty, age.",
    )
    worktrees.add_argument(
        "--prune", action="store_true", help="Remove stale clean worktrees, keep the rest."
    )
    _json_flag(worktrees)
    return parser


def main_command(args: list[str]) -> int:
    """Run the subcommand ``args`` names; its exit code (2: a bad command line)."""
    parser = _parser()
    ns, unknown = parser.parse_known_args(args)
    name = ns.command
    if unknown:  # said by the command's parser, with its usage line
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        sub.choices[name].error(f"unrecognized arguments: {' '.join(unknown)}")
    if name == "demo":
        return _demo(coordinator=ns.coordinator, team=ns.team)
    if name == "tasks":
        from taskloom.cli.tasks_cmd import list_tasks

        return list_tasks(
            session=ns.session,
            all_sessions=ns.all_sessions,
            as_json=ns.as_json,
            limit=ns.limit,
            offset=ns.offset,
        )
    if name == "agents":
        from taskloom.cli.agents_cmd import list_agents

        return list_agents(ns.plugin_dirs, as_json=ns.as_json)
    if name == "plugins":
        from taskloom.cli.plugins_cmd import list_plugins

        return list_plugins(ns.plugin_dirs, as_json=ns.as_json)
    if name == "peers":
        from taskloom.cli.peers_cmd import list_peers

        return list_peers(as_json=ns.as_json)
    if name == "teams":
        from taskloom.cli.teams_cmd import list_teams

        return list_teams(as_json=ns.as_json)
    return _worktrees(prune=ns.prune, as_json=ns.as_json)


def _demo(*, coordinator: bool, team: bool) -> int:
    """Watch a scripted model use real tools and background tasks."""
    if coordinator and team:
        sys.stderr.write("taskloom demo: --coordinator and --team are exclusive: choose one.\n")
        return 2
    if team:
        from taskloom.cli.demo_team import run_demo as run_team_demo

        return run_team_demo()
    if coordinator:
        from taskloom.cli.demo_coordinator import run_demo as run_coordinator_demo

        return run_coordinator_demo()
    from taskloom.cli.demo import run_demo

    return run_demo()


def _worktrees(*, prune: bool, as_json: bool) -> int:
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
        sys.stderr.write(f"taskloom worktrees: {exc}\n")
        return 1
    if as_json:
        report: dict[str, object] = {"worktrees": [dataclasses.asdict(w) for w in found]}
        if pruned is not None:
            report["pruned"] = [dataclasses.asdict(r) for r in pruned]
        print(json.dumps(report, indent=2, default=str))
        return 0
    for r in pruned or []:
        print(f"{'kept' if r.kept else 'removed'} {r.path} ({r.branch}): {r.reason}")
    if not found:
        print("No taskloom worktrees.")
    for w in found:
        state = "missing" if w.missing else ("clean" if w.clean else "dirty")
        age = "-" if w.age_s is None else span(w.age_s)
        in_use = "  (in use)" if w.in_use else ""
        print(f"{w.path}  {w.branch or '(detached)'}  {state}  {age}{in_use}")
    return 0


__all__ = ["main_command"]
