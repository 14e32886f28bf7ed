"""The ``taskloom`` command: headless print mode, and the ``demo`` and ``tasks`` commands.

``taskloom -p PROMPT [flags]`` follows Claude Code's print mode (DESIGN §3.5). Subcommand
modules are imported inside their commands so each pays only for what it uses at start-up.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

SUBCOMMANDS = ("demo", "tasks")
#: Flags that take several values, as in Claude Code (``--allowedTools A B``).
_VARIADIC = {"--allowedTools", "--allowed-tools", "--disallowedTools", "--disallowed-tools"}

app = typer.Typer(
    name="taskloom",
    help="A multi-agent task runtime for LLM coding agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def demo(
    fast: Annotated[bool, typer.Option("--fast", help="Shorter waits (for tests and CI).")] = False,
) -> None:
    """Run a few background shell tasks and show their notifications."""
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


print_app = typer.Typer(
    name="taskloom",
    add_completion=False,
    pretty_exceptions_enable=False,
    help=(
        "Run a prompt headless: taskloom -p PROMPT [options]. "
        f"Other commands: {', '.join(SUBCOMMANDS)} (taskloom COMMAND --help)."
    ),
)


@print_app.command()
def print_mode(
    prompt: Annotated[str | None, typer.Argument(help="The prompt (default: stdin).")] = None,
    print_: Annotated[
        bool, typer.Option("-p", "--print", help="Print the response and exit (headless).")
    ] = False,
    output_format: Annotated[
        str, typer.Option("--output-format", help="text, json or stream-json.")
    ] = "text",
    verbose: Annotated[bool, typer.Option("--verbose", help="Full turn-by-turn output.")] = False,
    model: Annotated[
        str | None,
        typer.Option("--model", help="claude-…, sonnet|opus|haiku, openai:ID or scripted:FILE."),
    ] = None,
    max_turns: Annotated[
        int | None, typer.Option("--max-turns", min=1, help="Most model turns.")
    ] = None,
    permission_mode: Annotated[
        str | None,
        typer.Option(
            "--permission-mode",
            help="default, acceptEdits, plan, bypassPermissions or dontAsk.",
        ),
    ] = None,
    skip_permissions: Annotated[
        bool,
        typer.Option("--dangerously-skip-permissions", help="Allow every tool call."),
    ] = False,
    allowed_tools: Annotated[
        list[str] | None,
        typer.Option("--allowedTools", "--allowed-tools", help="Permission rules to allow."),
    ] = None,
    disallowed_tools: Annotated[
        list[str] | None,
        typer.Option("--disallowedTools", "--disallowed-tools", help="Rules to deny."),
    ] = None,
    append_system_prompt: Annotated[
        str | None, typer.Option("--append-system-prompt", help="Added to the system prompt.")
    ] = None,
    settings: Annotated[
        str | None, typer.Option("--settings", help="A settings file or JSON string.")
    ] = None,
    resume: Annotated[
        str | None, typer.Option("--resume", "-r", help="Continue this session id.")
    ] = None,
) -> None:
    """Run a prompt headless (Claude Code's print mode)."""
    if not print_:
        raise typer.BadParameter(
            "interactive mode is not available yet: pass -p/--print", param_hint="-p"
        )
    if permission_mode is not None and permission_mode not in _MODES:
        raise typer.BadParameter(
            f"must be one of {', '.join(_MODES)}", param_hint="--permission-mode"
        )
    from taskloom.cli.print_mode import OUTPUT_FORMATS, PrintOptions, main_print

    if output_format not in OUTPUT_FORMATS:
        raise typer.BadParameter(
            f"must be one of {', '.join(OUTPUT_FORMATS)}", param_hint="--output-format"
        )
    options = PrintOptions(
        prompt=prompt,
        output_format=output_format,
        verbose=verbose,
        model=model,
        max_turns=max_turns,
        permission_mode=permission_mode,
        skip_permissions=skip_permissions,
        allowed_tools=list(allowed_tools or []),
        disallowed_tools=list(disallowed_tools or []),
        append_system_prompt=append_system_prompt,
        settings=settings,
        resume=resume,
    )
    raise typer.Exit(main_print(options))


_MODES = ("default", "acceptEdits", "plan", "bypassPermissions", "dontAsk")


def expand_variadic(args: list[str]) -> list[str]:
    """Rewrite ``--allowedTools A B -x`` as ``--allowedTools A --allowedTools B -x``."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, _ = arg.partition("=")
        if flag in _VARIADIC and not eq:
            i += 1
            taken = 0
            while i < len(args) and not args[i].startswith("-"):
                out += [flag, args[i]]
                i += 1
                taken += 1
            if not taken:
                out.append(flag)  # let the parser report the missing value
            continue
        out.append(arg)
        i += 1
    return out


def main() -> None:
    """Console-script entry point: subcommands, or print mode."""
    args = sys.argv[1:]
    if not args or args[0] in SUBCOMMANDS or (args[0] in ("--help", "-h") and len(args) == 1):
        if args and args[0] in ("--help", "-h"):
            print_app(args=["--help"], prog_name="taskloom")
        app(args=args, prog_name="taskloom")
        return
    print_app(args=expand_variadic(args), prog_name="taskloom")
