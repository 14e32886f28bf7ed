"""The ``taskloom`` command: the REPL, headless print mode, and the other commands.

``taskloom [PROMPT]`` starts the interactive REPL (in a terminal); ``taskloom -p PROMPT
[flags]`` follows Claude Code's print mode. Subcommand
modules are imported inside their commands so each pays only for what it uses at start-up.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from typing import Any

SUBCOMMANDS = ("demo", "tasks", "agents", "teams", "worktrees")


_MODES = ("default", "acceptEdits", "plan", "bypassPermissions", "dontAsk")


def _print_parser() -> argparse.ArgumentParser:
    # argparse, not typer, on this path: print mode is what scripts start again and again,
    # and typer costs ~0.1 s at import.
    parser = argparse.ArgumentParser(
        prog="taskloom",
        description=(
            "Work with an agent interactively (the REPL), or run a prompt headless with -p "
            "(Claude Code's print mode)."
        ),
        epilog=f"Other commands: {', '.join(SUBCOMMANDS)} (taskloom COMMAND --help).",
    )
    parser.add_argument("prompt", nargs="?", help="The prompt (default: stdin).")
    parser.add_argument(
        "-p",
        "--print",
        dest="print_",
        action="store_true",
        help="Print the response and exit (headless).",
    )
    parser.add_argument("--output-format", default="text", choices=("text", "json", "stream-json"))
    parser.add_argument(
        "--input-format",
        default="text",
        choices=("text", "stream-json"),
        help="stream-json: a session driven over stdin (claude-agent-sdk's protocol).",
    )
    parser.add_argument(
        "--include-partial-messages",
        action="store_true",
        help="stream-json: also stream the model's events as they arrive (stream_event).",
    )
    parser.add_argument(
        "--include-hook-events",
        action="store_true",
        help="stream-json: also show hook runs (system hook_started / hook_response).",
    )
    parser.add_argument(
        "--replay-user-messages",
        action="store_true",
        help="With --input-format stream-json: echo each user message read on stdout.",
    )
    parser.add_argument(
        "--permission-prompt-tool",
        metavar="TOOL",
        help="stdio: ask the program driving --input-format stream-json (can_use_tool).",
    )
    parser.add_argument("--verbose", action="store_true", help="Full turn-by-turn output.")
    parser.add_argument("--model", help="claude-…, sonnet|opus|haiku, openai:ID or scripted:FILE.")
    parser.add_argument("--max-turns", type=_positive_int, help="Most model turns.")
    parser.add_argument(
        "--max-output-tokens",
        type=_positive_int,
        metavar="N",
        help="Cap on each model response, in tokens (default: CLAUDE_CODE_MAX_OUTPUT_TOKENS, "
        "else the setting maxOutputTokens, else 16000).",
    )
    parser.add_argument("--permission-mode", choices=_MODES)
    parser.add_argument(
        "--dangerously-skip-permissions",
        dest="skip_permissions",
        action="store_true",
        help="Allow every tool call.",
    )
    parser.add_argument(
        "--allowedTools",
        "--allowed-tools",
        dest="allowed_tools",
        nargs="+",
        action="extend",
        default=[],
        metavar="RULE",
        help="Permission rules to allow.",
    )
    parser.add_argument(
        "--disallowedTools",
        "--disallowed-tools",
        dest="disallowed_tools",
        nargs="+",
        action="extend",
        default=[],
        metavar="RULE",
        help="Permission rules to deny.",
    )
    parser.add_argument("--system-prompt", help="Replaces the system prompt ('' sends none).")
    parser.add_argument("--append-system-prompt", help="Added to the system prompt.")
    parser.add_argument("--settings", help="A settings file or JSON string.")
    parser.add_argument(
        "--skip-broken-settings",
        action="store_true",
        help="Run without settings files that do not parse (with a warning) instead of stopping.",
    )
    parser.add_argument(
        "-d", "--debug", action="store_true", help="Show tracebacks and debug logs on stderr."
    )
    parser.add_argument("-r", "--resume", help="Continue this session id.")
    parser.add_argument(
        "-c",
        "--continue",
        dest="continue_session",
        action="store_true",
        help="Continue the latest conversation in this directory.",
    )
    parser.add_argument("--session-id", metavar="UUID", help="The new session's id.")
    parser.add_argument(
        "--fork-session",
        action="store_true",
        help="With --resume or --continue: a new session from a copy of that conversation.",
    )
    parser.add_argument(
        "--setting-sources",
        metavar="LIST",
        help="Settings files to read: user,project,local (default all; --settings always).",
    )
    parser.add_argument(
        "--system-prompt-file", metavar="FILE", help="Replaces the system prompt with FILE."
    )
    parser.add_argument(
        "--tools",
        metavar="LIST",
        help="Offer only these built-in tools (comma-separated; '' for none, 'default' all).",
    )
    parser.add_argument(
        "--add-dir",
        dest="add_dirs",
        nargs="+",
        action="extend",
        default=[],
        metavar="DIR",
        help="More directories the session may edit in acceptEdits mode.",
    )
    parser.add_argument(
        "--json-schema",
        metavar="SCHEMA",
        help="The final answer must be JSON this JSON Schema accepts (result.structured_output).",
    )
    parser.add_argument(
        "--fallback-model",
        metavar="MODEL",
        help="Go on with this model when the main one fails after its retries.",
    )
    parser.add_argument(
        "--max-budget-usd",
        type=_positive_float,
        metavar="USD",
        help="Stop once the session has cost this much (by the price table).",
    )
    parser.add_argument(
        "--max-budget-tokens",
        type=_positive_int,
        metavar="TOKENS",
        help="The token budget of the whole session, its agents included.",
    )
    parser.add_argument(
        "--no-session-persistence",
        dest="persist_session",
        action="store_false",
        help="Keep no transcript: the session cannot be resumed.",
    )
    parser.add_argument("--agents", help="Extra agent definitions as a JSON object.")
    parser.add_argument(
        "--mcp-config",
        nargs="+",
        action="extend",
        default=[],
        metavar="CONFIG",
        help='MCP servers from files or JSON strings ({"mcpServers": {...}}).',
    )
    parser.add_argument(
        "--strict-mcp-config",
        action="store_true",
        help="Use only the MCP servers of --mcp-config, ignoring every other MCP configuration.",
    )
    parser.add_argument(
        "--coordinator",
        action="store_true",
        default=None,
        help="Coordinator mode: orchestrate background workers (Agent, SendMessage, TaskStop).",
    )
    parser.add_argument(
        "--teams",
        action="store_true",
        default=None,
        help="Agent teams: Agent with a name spawns a teammate; TeamCreate, the task list.",
    )
    parser.add_argument(
        "--teammate-mode",
        choices=("in-process", "tmux", "auto"),
        default=None,
        help="Where teammates run: in this process, each in a tmux pane, or tmux inside tmux.",
    )
    parser.add_argument(
        "--listen",
        action="store_true",
        default=None,
        help="Receive messages from other sessions on a Unix socket in the session directory.",
    )
    parser.add_argument("-v", "--version", action="store_true", help="Print the version and exit.")
    # Options claude-agent-sdk may pass that have no effect here yet: accepted (and said so)
    # rather than refused, so that a program setting them still runs.
    ignored = parser.add_argument_group("accepted for compatibility, no effect yet")
    for flag in ("--thinking", "--thinking-display", "--effort", "--betas", "--task-budget"):
        ignored.add_argument(flag, metavar="VALUE")
    ignored.add_argument("--max-thinking-tokens", type=int, metavar="N")
    ignored.add_argument("--plugin-dir", action="append", default=[], metavar="DIR")
    return parser


def _json_schema(parser: argparse.ArgumentParser, text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    import json

    from taskloom.errors import UsageError
    from taskloom.tools.structured import check_schema

    try:
        return check_schema(json.loads(text))
    except json.JSONDecodeError as exc:
        parser.error(f"--json-schema is not JSON: {exc}")
    except UsageError as exc:
        parser.error(str(exc))


def _tool_names(text: str | None) -> list[str] | None:
    if text is None or text.strip() == "default":
        return None
    return [t for t in (p.strip() for p in text.replace(" ", ",").split(",")) if t]


def _system_prompt(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> str | None:
    if ns.system_prompt_file is None:
        return ns.system_prompt  # type: ignore[no-any-return]
    if ns.system_prompt is not None:
        parser.error("give --system-prompt or --system-prompt-file, not both")
    try:
        with open(ns.system_prompt_file, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        parser.error(f"--system-prompt-file {ns.system_prompt_file}: {exc.strerror or exc}")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def run_print_mode(args: list[str]) -> int:
    """Parse print-mode arguments and run; returns the exit code (2 for usage errors)."""
    parser = _print_parser()
    ns = parser.parse_args(args)
    if ns.version:
        from taskloom._version import __version__

        print(f"{__version__} (taskloom)")
        return 0
    setting_sources = None
    if ns.setting_sources is not None:
        from taskloom.errors import UsageError
        from taskloom.settings import parse_setting_sources

        try:
            setting_sources = parse_setting_sources(ns.setting_sources)
        except UsageError as exc:
            parser.error(str(exc))
    streamed = ns.input_format == "stream-json"
    if streamed and ns.output_format != "stream-json":
        parser.error("--input-format stream-json requires --output-format stream-json")
    if streamed and ns.prompt is not None:
        parser.error("--input-format stream-json reads its prompts from stdin, not an argument")
    interactive = not ns.print_ and not streamed
    if interactive:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            which = "stdin" if not sys.stdin.isatty() else "stdout"
            parser.error(
                f"interactive mode needs a terminal, and {which} is not one: pass -p/--print "
                "to run a prompt headless"
            )
        if ns.output_format != "text":
            parser.error("--output-format applies to -p/--print only")
    # pydantic looks for plugins by scanning every installed distribution the first time a
    # model is built (~10 ms). We use none; skip the scan without leaking the setting into
    # the environment of the commands we run.
    previous = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    try:
        from taskloom.cli.print_mode import PrintOptions, main_print
        from taskloom.harness import Options
    finally:
        if previous is None:
            del os.environ["PYDANTIC_DISABLE_PLUGINS"]
        else:
            os.environ["PYDANTIC_DISABLE_PLUGINS"] = previous

    options = PrintOptions(
        prompt=ns.prompt,
        output_format=ns.output_format,
        verbose=ns.verbose,
        debug=ns.debug,
        permission_prompt_tool=ns.permission_prompt_tool,
        max_budget_usd=ns.max_budget_usd,
        include_partial_messages=ns.include_partial_messages,
        include_hook_events=ns.include_hook_events,
        replay_user_messages=ns.replay_user_messages,
        session=Options(
            model=ns.model,
            cwd=os.getcwd(),
            max_turns=ns.max_turns,
            max_output_tokens=ns.max_output_tokens,
            max_budget_tokens=ns.max_budget_tokens,
            max_budget_usd=ns.max_budget_usd,
            permission_mode=ns.permission_mode,
            skip_permissions=ns.skip_permissions,
            allowed_tools=list(ns.allowed_tools),
            disallowed_tools=list(ns.disallowed_tools),
            system_prompt=_system_prompt(parser, ns),
            append_system_prompt=ns.append_system_prompt,
            settings=ns.settings,
            skip_broken_settings=ns.skip_broken_settings,
            resume=ns.resume,
            continue_session=ns.continue_session,
            session_id=ns.session_id,
            fork_session=ns.fork_session,
            setting_sources=setting_sources,
            builtin_tools=_tool_names(ns.tools),
            add_dirs=list(ns.add_dirs),
            persist_session=ns.persist_session,
            json_schema=_json_schema(parser, ns.json_schema),
            fallback_model=ns.fallback_model,
            agents=ns.agents,
            mcp_config=list(ns.mcp_config),
            strict_mcp_config=ns.strict_mcp_config,
            coordinator=ns.coordinator,
            listen=ns.listen,
            teams=ns.teams,
            teammate_mode=ns.teammate_mode,
        ),
    )
    if streamed:
        from taskloom.cli.stream_mode import main_stream

        return main_stream(options)
    if interactive:
        from taskloom.repl.app import run_repl

        return main_print(options, runner=lambda o: run_repl(o.session, o.prompt))
    return main_print(options)


def main() -> None:
    """Console-script entry point: subcommands, or print mode."""
    args = sys.argv[1:]
    if args and args[0] == "remote":  # the cluster; or one remote agent's process
        from taskloom.cli.remote_cmd import main_remote

        sys.exit(main_remote(args[1:]))
    if args and args[0] == "teammate":  # the process of a teammate in a tmux pane
        from taskloom.cli.teammate_cmd import main_teammate

        sys.exit(main_teammate(args[1:]))
    if args and args[0] in SUBCOMMANDS:
        from taskloom.cli.commands import app  # typer is loaded only for subcommands
        from taskloom.errors import TaskloomError, UsageError, describe_os_error

        try:
            app(args=args, prog_name="taskloom")
        except (TaskloomError, OSError) as exc:
            # One line, as in print mode: a symlinked home or a broken store is not a crash.
            text = str(exc) if isinstance(exc, TaskloomError) else describe_os_error(exc)
            sys.stderr.write(f"Error: {text}\n")
            sys.exit(2 if isinstance(exc, UsageError) else 1)
        return
    # Start-up makes tens of thousands of objects and frees almost none: collecting them
    # before the first request is wasted time (print mode turns collection back on once the
    # session is built). At exit the store is committed and closed and every child is
    # stopped: freezing what is left spares the interpreter a last full collection.
    gc.disable()
    try:
        code = run_print_mode(args)
    finally:
        gc.freeze()
        gc.enable()
    sys.exit(code)
