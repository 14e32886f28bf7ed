"""The flags' table, and the documentation of the flags and of ``Options``, checked.

The table (:data:`taskloom.cli.flags.FLAGS`) builds both the parser and the options, so it is
what the docs are checked against: every flag in docs/contracts.md §4, every ``Options``
field in docs/library.md and in the class's own docstring, and nothing documented that is
not there.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from taskloom.cli.flags import FLAGS, print_parser
from taskloom.cli.print_options import PrintOptions
from taskloom.options import Options

DOCS = Path(__file__).resolve().parent.parent / "docs"

#: A flag name in backticks, perhaps followed by its value (``--model SPEC``).
_FLAG_NAME = re.compile(r"`(--?[A-Za-z][\w-]*)")


def table_rows(text: str, after: str) -> list[list[str]]:
    """The cells of the first Markdown table after the line starting with ``after``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after))
    rows = []
    for line in lines[start + 1 :]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if not set(cells[0]) <= {"-", ":"}:
            rows.append(cells)
    return rows[1:]  # the header


def cli_flag_rows() -> list[list[str]]:
    return table_rows((DOCS / "contracts.md").read_text(), "## 4. Command line")


def options_rows() -> dict[str, str]:
    """The ``Options`` table of library.md: each field named, and its flag cell."""
    rows = table_rows((DOCS / "library.md").read_text(), "`Options` carries")
    return {name: row[1] for row in rows for name in re.findall(r"`(\w+)`", row[0])}


def test_every_flag_of_the_table_is_documented_in_the_contracts() -> None:
    documented = {name for row in cli_flag_rows() for name in _FLAG_NAME.findall(row[0])}
    missing = [n for f in FLAGS for n in f.names if n.startswith("-") and n not in documented]
    assert missing == [], f"flags missing from docs/contracts.md §4: {missing}"


def test_the_contracts_document_no_flag_the_table_lacks() -> None:
    names = {n for f in FLAGS for n in f.names}
    documented = [name for row in cli_flag_rows() for name in _FLAG_NAME.findall(row[0])]
    assert [n for n in documented if n not in names] == []


def test_every_options_field_is_documented_in_the_library_guide() -> None:
    rows = options_rows()
    fields = [f.name for f in dataclasses.fields(Options)]
    assert [f for f in fields if f not in rows] == [], "Options fields missing from library.md"
    assert [r for r in rows if r not in fields] == [], "library.md names fields Options lacks"


def test_the_library_guide_names_the_flag_of_each_options_field() -> None:
    flags = {f.option: f for f in FLAGS if f.option is not None}
    wrong = []
    for field, cell in options_rows().items():
        flag = flags.get(field)
        named = set(_FLAG_NAME.findall(cell))
        if flag is None and cell != "—":
            wrong.append(f"{field}: no flag fills it, the guide says {cell}")
        elif flag is not None and not named & set(flag.names):
            wrong.append(f"{field}: filled by {flag.names[-1]}, the guide says {cell}")
    assert wrong == []


def test_the_options_docstring_lists_every_field() -> None:
    listed = set(re.findall(r"^        (\w+): ", Options.__doc__ or "", re.MULTILINE))
    assert [f.name for f in dataclasses.fields(Options) if f.name not in listed] == []


def test_each_field_a_flag_fills_exists_and_is_read_from_where_argparse_puts_it() -> None:
    parsed = vars(print_parser().parse_args([]))
    options = {f.name for f in dataclasses.fields(Options)}
    printed = {f.name for f in dataclasses.fields(PrintOptions)}
    for flag in FLAGS:
        assert flag.key in parsed, flag.names
        assert flag.option is None or flag.option in options, flag.names
        assert flag.printed is None or flag.printed in printed, flag.names
    # Every print-mode field but the session's options comes from a flag.
    filled = {f.printed for f in FLAGS if f.printed is not None}
    assert printed - filled == {"session"}
