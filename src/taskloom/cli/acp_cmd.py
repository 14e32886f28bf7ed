"""``taskloom acp [flags]``: serve the Agent Client Protocol on stdio, for an editor.

The editor starts this process and speaks JSON-RPC on its stdin and stdout (see
docs/editors.md); the log goes to stderr. The flags are print mode's that shape a session
(the model, settings, permissions, directories, plugins, MCP servers...): every session the
editor opens gets them, with its own working directory and MCP servers. A bad flag is exit 2.

argparse, built from print mode's flag table: the flags mean what they mean for ``-p``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from taskloom.cli.flag_kinds import FlagError
from taskloom.cli.flags import FLAGS

if TYPE_CHECKING:
    from taskloom.options import Options

#: The print-mode flags ``taskloom acp`` takes, by their first name. The ``-file`` ones are
#: read by the conversion of the flag they belong to.
ACP_FLAGS = (
    "--model",
    "--max-turns",
    "--max-output-tokens",
    "--permission-mode",
    "--dangerously-skip-permissions",
    "--allowedTools",
    "--disallowedTools",
    "--system-prompt",
    "--system-prompt-file",
    "--append-system-prompt",
    "--append-system-prompt-file",
    "--settings",
    "--skip-broken-settings",
    "--setting-sources",
    "--tools",
    "--add-dir",
    "--fallback-model",
    "--max-budget-usd",
    "--max-budget-tokens",
    "--agents",
    "--mcp-config",
    "--strict-mcp-config",
    "--plugin-dir",
    "--coordinator",
    "--teams",
    "--teammate-mode",
    "--listen",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="taskloom acp",
        description=(
            "Serve the Agent Client Protocol on stdin/stdout: an editor (Zed, a JetBrains IDE, "
            "an ACP client) starts this and drives taskloom sessions. See docs/editors.md."
        ),
    )
    for flag in FLAGS:
        if flag.names[0] in ACP_FLAGS:
            flag.add_to(parser)
    parser.add_argument("--debug", action="store_true", help="Log what happens to stderr.")
    return parser


def options_of(args: list[str]) -> tuple[Options, bool]:
    """The sessions' options the flags ask for, and ``--debug``; a bad flag exits (code 2)."""
    from taskloom.harness import Options

    parser = _parser()
    ns = parser.parse_args(args)
    fields: dict[str, Any] = {}
    for flag in FLAGS:
        if flag.names[0] not in ACP_FLAGS or flag.option is None:
            continue
        try:
            fields[flag.option] = flag.value(ns)
        except (FlagError, ValueError) as exc:
            parser.error(str(exc))
    return Options(cwd=os.getcwd(), **fields), ns.debug


def main_acp(args: list[str]) -> int:
    """Serve ACP until the editor closes stdin; the exit code (2: a bad command line)."""
    from taskloom.cli._run import configure_logging, run_main
    from taskloom.errors import TaskloomError, UsageError, describe

    options, debug = options_of(args)
    configure_logging(debug)

    async def serve() -> int:
        from taskloom.acp import run_acp

        return await run_acp(options)

    try:
        return run_main(serve)
    except (TaskloomError, OSError) as exc:
        sys.stderr.write(describe(exc) + "\n")
        return 2 if isinstance(exc, UsageError) else 1


__all__ = ["ACP_FLAGS", "main_acp", "options_of"]
