"""The print-mode flags, in one table that builds both the parser and the session's options.

Each :class:`Flag` says how argparse reads it and what it fills: a field of
:class:`taskloom.Options` (``option``), of :class:`taskloom.cli.print_mode.PrintOptions`
(``printed``), or both. :func:`print_parser` turns :data:`FLAGS` into the parser and
:func:`fields_of` the parsed namespace into the keyword arguments of both classes, so a flag
added here cannot be parsed and then forgotten. The documentation is checked against the
table (tests/test_flag_docs.py).

argparse, as every command of taskloom: print mode is what scripts start again and again, and
a command-line library (typer, click) costs ~0.1 s at import. Nothing heavier than argparse is
imported here; a conversion imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from taskloom._dataclass import dataclass
from taskloom.cli.flag_kinds import (
    Convert,
    Flag,
    FlagError,
    inert,
    optional,
    positive_float,
    positive_int,
    repeated,
    switch,
)

#: The subcommands, named in the epilog (``taskloom COMMAND --help``).
SUBCOMMANDS = ("demo", "tasks", "agents", "plugins", "peers", "teams", "worktrees")

MODES = ("default", "acceptEdits", "plan", "bypassPermissions", "dontAsk")

#: Permission modes Claude Code takes that taskloom reads as ``default``: ``manual`` is its
#: newer name for it; ``auto`` (a classifier approving calls) taskloom does not have.
MODE_ALIASES = {"manual": "default", "auto": "default"}


def _setting_sources(text: str | None, ns: argparse.Namespace) -> tuple[str, ...] | None:
    if text is None:
        return None
    from taskloom.errors import UsageError
    from taskloom.settings import parse_setting_sources

    try:
        return parse_setting_sources(text)
    except UsageError as exc:
        raise FlagError(str(exc)) from None


def _text_or_file(flag: str) -> Convert:
    """The conversion of ``flag``: its text, or that of the file ``flag-file`` names (not both).

    The ``-file`` flag is read from the namespace: the two fill one field.
    """

    def convert(text: str | None, ns: argparse.Namespace) -> str | None:
        path = getattr(ns, flag[2:].replace("-", "_") + "_file")
        if path is None:
            return text
        if text is not None:
            raise FlagError(f"give {flag} or {flag}-file, not both")
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except OSError as exc:
            raise FlagError(f"{flag}-file {path}: {exc.strerror or exc}") from None

    return convert


def _tool_names(text: str | None, ns: argparse.Namespace) -> list[str] | None:
    if text is None or text.strip() == "default":
        return None
    return [t for t in (p.strip() for p in text.replace(" ", ",").split(",")) if t]


def _json_schema(text: str | None, ns: argparse.Namespace) -> dict[str, Any] | None:
    if text is None:
        return None
    import json

    from taskloom.errors import UsageError
    from taskloom.tools.structured import check_schema

    try:
        return check_schema(json.loads(text))
    except json.JSONDecodeError as exc:
        raise FlagError(f"--json-schema is not JSON: {exc}") from None
    except UsageError as exc:
        raise FlagError(str(exc)) from None


def _permission_mode(mode: str | None, ns: argparse.Namespace) -> str | None:
    return None if mode is None else MODE_ALIASES.get(mode, mode)


def _mode_note(mode: str) -> str | None:
    if mode != "auto":
        return None
    return (
        "--permission-mode auto: taskloom has no auto mode (a classifier approving calls); "
        "default mode applies"
    )


def _prompt_tool(tool: str | None, ns: argparse.Namespace) -> str | None:
    """``--permission-prompt-tool``, unless ``--permission-prompts none``.

    With ``none`` no one is asked: a call that needs approval is denied, as in a headless run.
    """
    return None if ns.permission_prompts == "none" else tool


def _debug(value: bool | str, ns: argparse.Namespace) -> bool:
    return bool(value) or ns.debug_to_stderr


def _debug_note(value: bool | str) -> str | None:
    if not isinstance(value, str):
        return None
    return f"--debug {value}: taskloom does not filter its debug log by category; all of it shows"


#: Every flag of ``taskloom [PROMPT]`` and ``taskloom -p``, in the order ``--help`` lists them.
FLAGS: tuple[Flag, ...] = (
    Flag(("prompt",), nargs="?", help="The prompt (default: stdin).", printed="prompt"),
    Flag(
        ("-p", "--print"),
        dest="print_",
        action="store_true",
        help="Print the response and exit (headless).",
    ),
    Flag(
        ("--output-format",),
        default="text",
        choices=("text", "json", "stream-json"),
        printed="output_format",
    ),
    Flag(
        ("--input-format",),
        default="text",
        choices=("text", "stream-json"),
        help="stream-json: a session driven over stdin (claude-agent-sdk's protocol).",
    ),
    Flag(
        ("--include-partial-messages",),
        action="store_true",
        help="stream-json: also stream the model's events as they arrive (stream_event).",
        printed="include_partial_messages",
    ),
    Flag(
        ("--include-hook-events",),
        action="store_true",
        help="stream-json: also show hook runs (system hook_started / hook_response).",
        printed="include_hook_events",
    ),
    Flag(
        ("--replay-user-messages",),
        action="store_true",
        help="With --input-format stream-json: echo each user message read on stdout.",
        printed="replay_user_messages",
    ),
    Flag(
        ("--await-initialize",),
        action="store_true",
        help="With --input-format stream-json: start the session only once the initialize "
        "request came (its MCP servers are started with it).",
        printed="await_initialize",
    ),
    Flag(
        ("--permission-prompt-tool",),
        metavar="TOOL",
        help="stdio: ask the program driving --input-format stream-json (can_use_tool).",
        printed="permission_prompt_tool",
        convert=_prompt_tool,
    ),
    Flag(
        ("--permission-prompts",),
        choices=("host", "none"),
        default="host",
        help="none: ask no one; a call that needs approval is denied (host: as above).",
        # Read by --permission-prompt-tool's conversion.
    ),
    Flag(
        ("--verbose",),
        action="store_true",
        help="Accepted; no effect (the output is always complete).",
        printed="verbose",
    ),
    Flag(
        ("--model",),
        help="claude-…, sonnet|opus|haiku, openai:ID or scripted:FILE.",
        option="model",
    ),
    Flag(("--max-turns",), type=positive_int, help="Most model turns.", option="max_turns"),
    Flag(
        ("--max-output-tokens",),
        type=positive_int,
        metavar="N",
        help="Cap on each model response, in tokens (default: CLAUDE_CODE_MAX_OUTPUT_TOKENS, "
        "else the setting maxOutputTokens, else 16000).",
        option="max_output_tokens",
    ),
    Flag(
        ("--permission-mode",),
        choices=MODES + tuple(MODE_ALIASES),
        help="manual is default; auto (Claude Code's classifier) runs as default.",
        option="permission_mode",
        convert=_permission_mode,
        note=_mode_note,
    ),
    Flag(
        ("--dangerously-skip-permissions",),
        dest="skip_permissions",
        action="store_true",
        help="Allow every tool call.",
        option="skip_permissions",
    ),
    Flag(
        ("--allowedTools", "--allowed-tools"),
        dest="allowed_tools",
        nargs="+",
        action="extend",
        default=[],
        metavar="RULE",
        help="Permission rules to allow.",
        option="allowed_tools",
    ),
    Flag(
        ("--disallowedTools", "--disallowed-tools"),
        dest="disallowed_tools",
        nargs="+",
        action="extend",
        default=[],
        metavar="RULE",
        help="Permission rules to deny.",
        option="disallowed_tools",
    ),
    Flag(
        ("--system-prompt",),
        help="Replaces the system prompt ('' sends none).",
        option="system_prompt",
        convert=_text_or_file("--system-prompt"),
    ),
    Flag(
        ("--append-system-prompt",),
        help="Added to the system prompt.",
        option="append_system_prompt",
        convert=_text_or_file("--append-system-prompt"),
    ),
    Flag(("--settings",), help="A settings file or JSON string.", option="settings"),
    Flag(
        ("--skip-broken-settings",),
        action="store_true",
        help="Run without settings files that do not parse (with a warning) instead of stopping.",
        option="skip_broken_settings",
    ),
    Flag(
        ("-d", "--debug"),
        nargs="?",
        const=True,
        default=False,
        metavar="FILTER",
        help="Show tracebacks and debug logs on stderr (a category FILTER is not applied).",
        printed="debug",
        convert=_debug,
        note=_debug_note,
    ),
    Flag(
        ("--debug-to-stderr", "-d2e"),
        dest="debug_to_stderr",
        action="store_true",
        help="The same as --debug.",
        # Read by --debug's conversion.
    ),
    Flag(
        ("--debug-file",),
        metavar="PATH",
        help="Also write the debug log to PATH (appended).",
        printed="debug_file",
    ),
    Flag(("-r", "--resume"), help="Continue this session id.", option="resume"),
    Flag(
        ("-c", "--continue"),
        dest="continue_session",
        action="store_true",
        help="Continue the latest conversation in this directory.",
        option="continue_session",
    ),
    Flag(("--session-id",), metavar="UUID", help="The new session's id.", option="session_id"),
    Flag(
        ("--fork-session",),
        action="store_true",
        help="With --resume or --continue: a new session from a copy of that conversation.",
        option="fork_session",
    ),
    Flag(
        ("--setting-sources",),
        metavar="LIST",
        help="Settings files to read: user,project,local (default all; --settings always).",
        option="setting_sources",
        convert=_setting_sources,
    ),
    Flag(
        ("--system-prompt-file",),
        metavar="FILE",
        help="Replaces the system prompt with FILE.",
        # Read by --system-prompt's conversion: the two fill one field.
    ),
    Flag(
        ("--append-system-prompt-file",),
        metavar="FILE",
        help="Adds the text of FILE to the system prompt.",
        # Read by --append-system-prompt's conversion.
    ),
    Flag(
        ("--tools",),
        metavar="LIST",
        help="Offer only these built-in tools (comma-separated; '' for none, 'default' all).",
        option="builtin_tools",
        convert=_tool_names,
    ),
    Flag(
        ("--add-dir",),
        dest="add_dirs",
        nargs="+",
        action="extend",
        default=[],
        metavar="DIR",
        help="More directories the session may edit in acceptEdits mode.",
        option="add_dirs",
    ),
    Flag(
        ("--json-schema",),
        metavar="SCHEMA",
        help="The final answer must be JSON this JSON Schema accepts (result.structured_output).",
        option="json_schema",
        convert=_json_schema,
    ),
    Flag(
        ("--fallback-model",),
        metavar="MODEL",
        help="Go on with this model when the main one fails after its retries.",
        option="fallback_model",
    ),
    Flag(
        ("--max-budget-usd",),
        type=positive_float,
        metavar="USD",
        help="Stop once the session has cost this much (by the price table).",
        option="max_budget_usd",
        printed="max_budget_usd",
    ),
    Flag(
        ("--max-budget-tokens",),
        type=positive_int,
        metavar="TOKENS",
        help="The token budget of the whole session, its agents included.",
        option="max_budget_tokens",
    ),
    Flag(
        ("--no-session-persistence",),
        dest="persist_session",
        action="store_false",
        help="Keep no transcript: the session cannot be resumed.",
        option="persist_session",
    ),
    Flag(("--agents",), help="Extra agent definitions as a JSON object.", option="agents"),
    Flag(
        ("--mcp-config",),
        nargs="+",
        action="extend",
        default=[],
        metavar="CONFIG",
        help='MCP servers from files or JSON strings ({"mcpServers": {...}}).',
        option="mcp_config",
    ),
    Flag(
        ("--strict-mcp-config",),
        action="store_true",
        help="Use only the MCP servers of --mcp-config, ignoring every other MCP configuration.",
        option="strict_mcp_config",
    ),
    Flag(
        ("--plugin-dir",),
        dest="plugin_dirs",
        action="append",
        default=[],
        metavar="DIR",
        help="Load the Claude Code plugin in DIR for this session (repeatable).",
        option="plugin_dirs",
    ),
    # None when absent, not False: then the settings decide (see Options).
    Flag(
        ("--coordinator",),
        action="store_true",
        default=None,
        help="Coordinator mode: orchestrate background workers (Agent, SendMessage, TaskStop).",
        option="coordinator",
    ),
    Flag(
        ("--teams",),
        action="store_true",
        default=None,
        help="Agent teams: Agent with a name spawns a teammate; TeamCreate, the task list.",
        option="teams",
    ),
    Flag(
        ("--teammate-mode",),
        choices=("in-process", "tmux", "iterm2", "auto"),
        default=None,
        help=(
            "Where teammates run: in this process, each in a tmux pane, in an iTerm2 pane "
            "(experimental), or the terminal's own panes when inside tmux or iTerm2."
        ),
        option="teammate_mode",
    ),
    Flag(
        ("--listen",),
        action="store_true",
        default=None,
        help=(
            "Receive messages from other sessions: on a Unix socket in the session directory "
            "(uds:) and, with a Ray cluster configured, at bridge:<session id>."
        ),
        option="listen",
    ),
    Flag(("-v", "--version"), action="store_true", help="Print the version and exit."),
    Flag(("--restricted",), action="store_true", help="Refused (exit 1): see REFUSED."),
    # Claude Code 2.1.328's print-mode flags and those the Agent SDKs pass that taskloom has
    # no feature for (the --debug log names each one given).
    switch("--allow-dangerously-skip-permissions"),
    Flag(("--agent",), metavar="AGENT", help="Refused (exit 1): see REFUSED."),
    inert("--autocompact"),
    switch("--ax-screen-reader"),
    switch("--bg", "--background"),
    switch("--bare"),
    inert("--betas", nargs="+", action="extend", default=[], metavar="VALUE"),
    switch("--brief"),
    switch("--chrome"),
    switch("--no-chrome"),
    optional("--cloud"),
    switch("--desktop"),
    switch("--disable-slash-commands"),
    inert("--effort"),
    inert("--environment"),
    switch("--exclude-dynamic-system-prompt-sections"),
    inert("--file", nargs="+", action="extend", default=[], metavar="SPEC"),
    switch("--forward-subagent-text"),
    optional("--from-pr"),
    switch("--ide"),
    inert("-n", "--name"),
    repeated("--plugin-url"),
    optional("--prompt-suggestions"),
    optional("--remote-control"),
    inert("--remote-control-session-name-prefix"),
    switch("--safe-mode"),
    inert("--system-prompt-snapshot", choices=("on", "off")),
    optional("--teleport"),
    optional("--tmux"),
    Flag(("-w", "--worktree"), nargs="?", const=True, metavar="NAME", help="Refused (exit 1)."),
    # Passed by the Agent SDKs (not in --help).
    inert("--thinking"),
    inert("--thinking-display"),
    inert("--max-thinking-tokens", type=int),
    inert("--task-budget"),
    repeated("--channels"),
    switch("--session-mirror"),
    inert("--project-config-root"),
    repeated("--plugin-dir-no-mcp"),
    inert("--resume-session-at"),
    inert("--resume-drops-turn"),
    Flag(("--initialize-fields",), metavar="FIELDS", help="Refused (exit 1)."),
    Flag(("--managed-settings-in-initialize",), action="store_true", help="Refused (exit 1)."),
    Flag(("--managed-settings",), metavar="JSON", help="Refused (exit 1)."),
    switch("--proactive"),
    inert("--workload"),
    switch("--await-claim"),
    switch("--assistant"),
)


def print_parser() -> argparse.ArgumentParser:
    """The parser of ``taskloom [PROMPT] [flags]``, built from :data:`FLAGS`."""
    parser = argparse.ArgumentParser(
        prog="taskloom",
        description=(
            "Work with an agent interactively (the REPL), or run a prompt headless with -p "
            "(Claude Code's print mode)."
        ),
        epilog=f"Other commands: {', '.join(SUBCOMMANDS)} (taskloom COMMAND --help).",
    )
    groups: dict[str, argparse._ArgumentGroup] = {}
    for flag in FLAGS:
        target: argparse._ActionsContainer = parser
        if flag.group is not None:
            if flag.group not in groups:
                groups[flag.group] = parser.add_argument_group(flag.group)
            target = groups[flag.group]
        flag.add_to(target)
    return parser


#: Flags taskloom refuses (exit 1), by their argparse names: accepted and ignored, each would
#: run a session with less confinement or policy than the program asked for.
REFUSED = {
    "restricted": "taskloom has no restricted mode (it cannot confine the file tools to the "
    "working directories nor guard settings and git files)",
    "agent": "taskloom cannot run the main thread as an agent definition (its prompt, tools "
    "and model)",
    "worktree": "taskloom cannot start a session in a new worktree",
    "managed_settings": "taskloom does not read managed (policy) settings",
    "managed_settings_in_initialize": "taskloom does not read managed (policy) settings",
    "initialize_fields": "taskloom does not read settings or disallowedTools from initialize "
    "(pass them as --settings and --disallowedTools)",
}


#: The ``--initialize-fields`` whose values, left unread, would loosen the session.
_LOOSENING_FIELDS = ("settings", "disallowedTools")


def refusals(ns: argparse.Namespace) -> list[str]:
    """One line for each flag given that taskloom refuses (see :data:`REFUSED`)."""
    lines = []
    for dest, why in REFUSED.items():
        value = getattr(ns, dest, None)
        if dest == "initialize_fields" and value is not None:
            # Only what would loosen: directories left out of initialize narrow the session.
            value = [f for f in value.split(",") if f.strip() in _LOOSENING_FIELDS]
        if value not in (None, False, [], ""):
            flag = next(f for f in FLAGS if f.key == dest)
            lines.append(f"{flag.names[-1]}: {why}; run without it")
    return lines


def inert_notes(ns: argparse.Namespace) -> list[str]:
    """One line for each flag given that (in part) has no effect, for the ``--debug`` log."""
    notes = []
    for flag in FLAGS:
        value = getattr(ns, flag.key)
        if flag.note is not None and value not in (None, False, []):
            note = flag.note(value)
            if note is not None:
                notes.append(note)
    return notes


@dataclass
class Fields:
    """The keyword arguments the flags give ``Options`` and ``PrintOptions``."""

    session: dict[str, Any]
    printed: dict[str, Any]


def fields_of(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> Fields:
    """The fields the parsed flags fill, each converted, in the table's order.

    A value a conversion refuses exits through ``parser.error`` (exit code 2).
    """
    fields = Fields(session={}, printed={})
    for flag in FLAGS:
        if flag.option is None and flag.printed is None:
            continue
        try:
            value = flag.value(ns)
        except ValueError as exc:
            parser.error(str(exc))
        if flag.option is not None:
            fields.session[flag.option] = value
        if flag.printed is not None:
            fields.printed[flag.printed] = value
    return fields
