"""The print-mode flags, in one table that builds both the parser and the session's options.

Each :class:`Flag` says how argparse reads it and what it fills: a field of
:class:`taskloom.Options` (``option``), of :class:`taskloom.cli.print_mode.PrintOptions`
(``printed``), or both. :func:`print_parser` turns :data:`FLAGS` into the parser and
:func:`fields_of` the parsed namespace into the keyword arguments of both classes, so a flag
added here cannot be parsed and then forgotten. The documentation is checked against the
table (tests/test_flag_docs.py).

argparse, not typer, on this path: print mode is what scripts start again and again, and typer
costs ~0.1 s at import. Nothing heavier than argparse is imported here; a conversion imports
what it needs when it runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The subcommands, named in the epilog (``taskloom COMMAND --help``).
SUBCOMMANDS = ("demo", "tasks", "agents", "teams", "worktrees")

MODES = ("default", "acceptEdits", "plan", "bypassPermissions", "dontAsk")

#: The argument group of the flags ``claude-agent-sdk`` may pass that have no effect here yet:
#: accepted (and said so) rather than refused, so that a program setting them still runs.
COMPAT = "accepted for compatibility, no effect yet"

_UNSET: Any = object()

#: Turns a flag's parsed value into its field's value; the namespace is there for a flag that
#: depends on another. A ``ValueError`` is a usage error, its text the message (exit 2).
Convert = Callable[[Any, argparse.Namespace], Any]


class FlagError(ValueError):
    """A flag's value that its conversion refuses; the text says what is wrong."""


@dataclass(frozen=True)
class Flag:
    """One command-line flag: how argparse reads it and which fields it fills.

    Attributes:
        names: The flag's names (``-p``, ``--print``), or one positional name.
        help: The help text (None: none).
        dest: The namespace attribute (None: argparse's, from the first long name).
        action: argparse's action (``store_true``, ``store_false``, ``extend``, ``append``).
        nargs: argparse's ``nargs``.
        type: Parses one value; raises ``argparse.ArgumentTypeError`` to refuse it.
        choices: The values allowed.
        default: The value when the flag is absent (unset: argparse's).
        metavar: The value's name in the help.
        option: The field of ``Options`` this flag fills, if any.
        printed: The field of ``PrintOptions`` this flag fills, if any.
        convert: Turns the parsed value into the fields' value (None: as parsed; a list is
            copied).
        group: The argument group it is listed under (None: the main one).
    """

    names: tuple[str, ...]
    help: str | None = None
    dest: str | None = None
    action: str | None = None
    nargs: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    default: Any = _UNSET
    metavar: str | None = None
    option: str | None = None
    printed: str | None = None
    convert: Convert | None = None
    group: str | None = None

    @property
    def key(self) -> str:
        """The namespace attribute argparse stores the value in."""
        if self.dest is not None:
            return self.dest
        longs = [n for n in self.names if n.startswith("--")]
        name = longs[0][2:] if longs else self.names[0].lstrip("-")
        return name.replace("-", "_")

    def add_to(self, target: argparse._ActionsContainer) -> None:
        """Add this flag to a parser or an argument group."""
        kwargs: dict[str, Any] = {
            "help": self.help,
            "dest": self.dest,
            "action": self.action,
            "nargs": self.nargs,
            "type": self.type,
            "choices": self.choices,
            "metavar": self.metavar,
        }
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if self.default is not _UNSET:
            kwargs["default"] = self.default
        target.add_argument(*self.names, **kwargs)

    def value(self, ns: argparse.Namespace) -> Any:
        """The value of the fields this flag fills, from the parsed namespace."""
        raw = getattr(ns, self.key)
        if self.convert is not None:
            return self.convert(raw, ns)
        return list(raw) if isinstance(raw, list) else raw


def positive_float(text: str) -> float:
    """A number above 0 (``--max-budget-usd``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def positive_int(text: str) -> int:
    """A whole number of at least 1 (``--max-turns`` and the other counts)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _setting_sources(text: str | None, ns: argparse.Namespace) -> tuple[str, ...] | None:
    if text is None:
        return None
    from taskloom.errors import UsageError
    from taskloom.settings import parse_setting_sources

    try:
        return parse_setting_sources(text)
    except UsageError as exc:
        raise FlagError(str(exc)) from None


def _system_prompt(text: str | None, ns: argparse.Namespace) -> str | None:
    """``--system-prompt``, or the text of ``--system-prompt-file`` (not both)."""
    path = ns.system_prompt_file
    if path is None:
        return text
    if text is not None:
        raise FlagError("give --system-prompt or --system-prompt-file, not both")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise FlagError(f"--system-prompt-file {path}: {exc.strerror or exc}") from None


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
    Flag(("--permission-mode",), choices=MODES, option="permission_mode"),
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
        convert=_system_prompt,
    ),
    Flag(
        ("--append-system-prompt",),
        help="Added to the system prompt.",
        option="append_system_prompt",
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
        action="store_true",
        help="Show tracebacks and debug logs on stderr.",
        printed="debug",
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
        choices=("in-process", "tmux", "auto"),
        default=None,
        help="Where teammates run: in this process, each in a tmux pane, or tmux inside tmux.",
        option="teammate_mode",
    ),
    Flag(
        ("--listen",),
        action="store_true",
        default=None,
        help="Receive messages from other sessions on a Unix socket in the session directory.",
        option="listen",
    ),
    Flag(("-v", "--version"), action="store_true", help="Print the version and exit."),
    *(
        Flag((name,), metavar="VALUE", group=COMPAT)
        for name in ("--thinking", "--thinking-display", "--effort", "--betas", "--task-budget")
    ),
    Flag(("--max-thinking-tokens",), type=int, metavar="N", group=COMPAT),
    Flag(("--plugin-dir",), action="append", default=[], metavar="DIR", group=COMPAT),
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
