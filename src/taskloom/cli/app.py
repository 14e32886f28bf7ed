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
from typing import TYPE_CHECKING

from taskloom.cli.flags import SUBCOMMANDS, fields_of, inert_notes, print_parser, refusals

if TYPE_CHECKING:
    from taskloom.cli.print_options import PrintOptions


def run_print_mode(args: list[str]) -> int:
    """Parse print-mode arguments and run; returns the exit code (2 for usage errors)."""
    parser = print_parser()
    ns = parser.parse_args(args)
    if ns.version:
        from taskloom._version import __version__

        print(f"{__version__} (taskloom)")
        return 0
    streamed, interactive = _check_mode(parser, ns)
    refused = refusals(ns)
    if refused:  # ignoring one would run with what it is meant to take away
        sys.stderr.write("".join(f"Error: {line}\n" for line in refused))
        return 1
    options = _print_options(parser, ns)
    try:
        _start_debug_log(options, inert_notes(ns))
    except OSError as exc:
        parser.error(f"--debug-file {options.debug_file}: {exc.strerror or exc}")
    if streamed:
        from taskloom.cli.stream_mode import main_stream

        return main_stream(options)
    from taskloom.cli.print_mode import main_print

    if interactive:
        from taskloom.repl.app import run_repl

        return main_print(options, runner=lambda o: run_repl(o.session, o.prompt))
    return main_print(options)


def _check_mode(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> tuple[bool, bool]:
    """Whether the session is driven over stdin, and whether it is the REPL; usage errors exit.

    The REPL is what runs without -p and without stream-json input, and it needs a terminal.
    """
    streamed = ns.input_format == "stream-json"
    if streamed and ns.output_format != "stream-json":
        parser.error("--input-format stream-json requires --output-format stream-json")
    # An empty argument is no prompt: the TypeScript SDK passes extra flags as a name and a
    # value, and an empty value of a switch (``--replay-user-messages ""``) lands here.
    if streamed and ns.prompt:
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
    return streamed, interactive


def _start_debug_log(options: PrintOptions, notes: list[str]) -> None:
    """Log to ``--debug-file`` too, and say which flags given have no effect (``--debug``).

    Print mode sets up the stderr log again when it starts; the file's handler and the
    logger's level stay.
    """
    import logging

    from taskloom.cli._run import configure_logging

    configure_logging(options.debug)
    log = logging.getLogger("taskloom.cli")
    if options.debug_file is not None:
        handler = logging.FileHandler(options.debug_file, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("taskloom").addHandler(handler)
        logging.getLogger("taskloom").setLevel(logging.DEBUG)
    for note in notes:
        log.debug("%s", note)


def _print_options(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> PrintOptions:
    """What the flags ask for (the flags' table fills both classes); bad values exit."""
    from taskloom.cli.print_mode import PrintOptions
    from taskloom.harness import Options

    fields = fields_of(parser, ns)
    session = Options(cwd=os.getcwd(), **fields.session)
    return PrintOptions(**fields.printed, session=session)


def main() -> None:
    """Console-script entry point: subcommands, or print mode."""
    args = sys.argv[1:]
    if args and args[0] == "remote":  # the cluster; or one remote agent's process
        from taskloom.cli.remote_cmd import main_remote

        sys.exit(main_remote(args[1:]))
    if args and args[0] == "acp":  # an editor's agent, on stdio
        from taskloom.cli.acp_cmd import main_acp

        sys.exit(main_acp(args[1:]))
    if args and args[0] == "teammate":  # the process of a teammate in a tmux pane
        from taskloom.cli.teammate_cmd import main_teammate

        sys.exit(main_teammate(args[1:]))
    if args and args[0] in SUBCOMMANDS:
        from taskloom.cli.commands import main_command
        from taskloom.errors import TaskloomError, UsageError, describe

        try:
            sys.exit(main_command(args))
        except (TaskloomError, OSError) as exc:
            # One line, as in print mode: a symlinked home or a broken store is not a crash.
            sys.stderr.write(describe(exc) + "\n")
            sys.exit(2 if isinstance(exc, UsageError) else 1)
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
