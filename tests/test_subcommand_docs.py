"""The subcommands' flags and ``taskloom tasks --json``'s fields, checked against the docs.

docs/contracts.md §4 has a table of the subcommands, a row each; print mode's flags are
checked in test_flag_docs.py.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re

from test_flag_docs import DOCS, table_rows

SECTION = "**Subcommands**"

#: A flag in a command cell: ``[--session ID]``, ``--spec FILE``.
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def _rows() -> dict[str, str]:
    """Each subcommand's row: its command cell (``taskloom NAME [...]``) by its name."""
    rows = table_rows((DOCS / "contracts.md").read_text(), SECTION)
    named = [(re.match(r"`taskloom ((?:\w+ )*?\w+)(?: \[| --|`)", r[0]), r[0]) for r in rows]
    return {m.group(1): cell for m, cell in named if m is not None}


def _argparse_flags(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings if o not in ("-h", "--help")]


def _subcommand_flags(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, list[str]]:
    """Each subcommand of ``parser`` (named ``prefix`` + its name) and its flags."""
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {f"{prefix}{n}": _argparse_flags(p) for n, p in sub.choices.items()}


def _command_flags() -> dict[str, list[str]]:
    """The commands of :mod:`taskloom.cli.commands`, by the name they are run as."""
    from taskloom.cli import commands

    return _subcommand_flags(commands._parser())


def _own_flags() -> dict[str, list[str]]:
    """The commands with a parser of their own, by the name they are run as."""
    from taskloom.cli import acp_cmd, remote_cmd, teammate_cmd

    flags = _subcommand_flags(remote_cmd._parser(), "remote ")
    flags["teammate"] = _argparse_flags(teammate_cmd._parser())
    flags["acp"] = _argparse_flags(acp_cmd._parser())
    return flags


def undocumented(rows: dict[str, str], commands: dict[str, list[str]]) -> list[str]:
    """Each command of ``commands`` (its flags by its name) or flag that ``rows`` lack."""
    missing = []
    for name, flags in commands.items():
        row = rows.get(name)
        if row is None:
            missing.append(f"taskloom {name}")
            continue
        documented = set(_FLAG.findall(row))
        missing += [f"taskloom {name} {f}" for f in flags if f not in documented]
    return missing


def test_every_subcommand_and_its_flags_are_documented() -> None:
    missing = undocumented(_rows(), {**_command_flags(), **_own_flags()})
    assert missing == [], f"missing from docs/contracts.md §4's subcommands: {missing}"


def test_the_docs_name_no_subcommand_that_does_not_exist() -> None:
    known = {*_command_flags(), *_own_flags()}
    assert [n for n in _rows() if n not in known] == []


def _task_row_fields() -> list[str]:
    """The keys of the rows ``taskloom tasks --json`` prints (the dict literal it builds)."""
    from taskloom.cli import tasks_cmd

    tree = ast.parse(inspect.getsource(tasks_cmd.collect))
    (row,) = [n for n in ast.walk(tree) if isinstance(n, ast.Dict) and len(n.keys) > 5]
    return [k.value for k in row.keys if isinstance(k, ast.Constant)]


def test_every_field_of_a_task_row_is_documented() -> None:
    row = _rows()["tasks"]
    cell = table_rows((DOCS / "contracts.md").read_text(), SECTION)
    text = next(r[1] for r in cell if r[0] == row)
    documented = set(re.findall(r"`(\w+)`", text.split("JSON rows:")[1]))
    fields = _task_row_fields()
    assert [f for f in fields if f not in documented] == []
    assert [f for f in documented if f not in fields] == []


def test_the_checker_finds_a_command_or_flag_the_docs_lack() -> None:
    commands = {**_command_flags(), **_own_flags()}
    rows = _rows()
    rows["tasks"] = rows["tasks"].replace("[--json]", "")
    del rows["teams"]
    assert undocumented(rows, commands) == ["taskloom tasks --json", "taskloom teams"]
