"""Jupyter notebooks (``.ipynb``) as Read shows them and NotebookEdit changes them.

Read shows each cell as Claude Code does, so that models see the form they are trained on:
``<cell id="ID">SOURCE</cell id="ID">``, with ``<cell_type>markdown</cell_type>`` before the
source of a cell that is not code and ``<language>R</language>`` before that of a code cell in
another language than Python; then each output's text on a new line and its image as an image
block. A cell without an id (notebook format before 4.5) is named ``cell-N`` by its index, and
NotebookEdit takes that name too.

nbformat parses and writes the files (older formats are upgraded to 4 when read); it is
imported here only, when a notebook is read or edited: the start-up of a run that touches none
never pays for it.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from taskloom.messages import Base64Source, ImageBlock, TextBlock, ToolResultContent
from taskloom.tools.base import ToolResult, tool_error

#: Outputs of one cell longer than this (characters of their JSON) are not shown, as in Claude
#: Code: a plot or a long log would crowd out the rest of the notebook.
MAX_CELL_OUTPUT_CHARS = 10_000
#: The file extension of notebooks.
NOTEBOOK_SUFFIX = ".ipynb"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_INDEX_ID = re.compile(r"^cell-(\d+)$")


class NotebookError(Exception):
    """A notebook that cannot be read as one (the message says why, for the model)."""


def is_notebook(path: str) -> bool:
    """Whether ``path`` names a Jupyter notebook (by its extension, as Claude Code decides)."""
    return path.lower().endswith(NOTEBOOK_SUFFIX)


def parse(text: str) -> Any:
    """The notebook in ``text`` as an nbformat ``NotebookNode`` of format 4.

    It is not validated: a notebook Jupyter would warn about is still read as it is (the cell
    ids Read shows are the file's, never ones made up by a repair).

    Raises:
        NotebookError: It is not JSON, or not a notebook nbformat can read.
    """
    import nbformat
    from nbformat import reader

    try:
        json.loads(text)
    except ValueError as exc:
        raise NotebookError(f"Notebook is not valid JSON: {exc}") from None
    try:
        notebook = reader.reads(text)  # type: ignore[no-untyped-call]
        if notebook.nbformat < 4:
            notebook = nbformat.convert(notebook, 4)  # type: ignore[no-untyped-call]
    except Exception as exc:  # nbformat raises many kinds for a file that is no notebook
        raise NotebookError(f"Not a Jupyter notebook nbformat can read: {exc}") from None
    if not isinstance(notebook.get("cells"), list):
        raise NotebookError("Not a Jupyter notebook: it has no list of cells.")
    return notebook


def dumps(notebook: Any) -> str:
    """``notebook`` as Jupyter writes it (one-space indent, sorted keys, a final newline).

    Writing repairs what nbformat repairs (a cell of format 4.5 without an id gets one);
    its warnings about the file as it was are not shown.
    """
    import warnings

    import nbformat

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return str(nbformat.writes(notebook)) + "\n"  # type: ignore[no-untyped-call]


def language(notebook: Any) -> str:
    """The notebook's language (``metadata.language_info.name``), Python when it says none."""
    info = notebook.get("metadata", {}).get("language_info", {})
    name = info.get("name") if isinstance(info, dict) else None
    return name if isinstance(name, str) and name else "python"


def cell_id(cell: Any, index: int) -> str:
    """The cell's id, else ``cell-INDEX`` (what Read shows and NotebookEdit accepts)."""
    found = cell.get("id")
    return found if isinstance(found, str) and found else f"cell-{index}"


def find_cell(notebook: Any, wanted: str) -> int | None:
    """The index of the cell whose id is ``wanted``, or that ``cell-N`` names; None if none."""
    for index, cell in enumerate(notebook.cells):
        if cell.get("id") == wanted:
            return index
    match = _INDEX_ID.match(wanted)
    if match is not None and int(match.group(1)) < len(notebook.cells):
        return int(match.group(1))
    return None


def has_cell_ids(notebook: Any) -> bool:
    """Whether the notebook's format gives cells ids (4.5 and later)."""
    return (notebook.nbformat, notebook.nbformat_minor) >= (4, 5)


def read_notebook(path: str, max_chars: int) -> tuple[ToolResult, int | None]:
    """Read's view of the notebook at ``path``: its cells and their outputs; its mtime.

    Args:
        path: An absolute path.
        max_chars: The most text the view may have (Read's output cap); over it, an error
            that says how to read parts with jq.
    """
    with open(path, "rb") as f:
        # The mtime before reading: a change during the read then shows up as "modified".
        mtime = os.fstat(f.fileno()).st_mtime_ns
        raw = f.read()
    try:
        notebook = parse(raw.decode("utf-8"))
    except (UnicodeDecodeError, NotebookError) as exc:
        return tool_error(f"Cannot read {path} as a notebook: {exc}"), None
    lang = language(notebook)
    cells = [_cell_view(cell, i, lang, path) for i, cell in enumerate(notebook.cells)]
    blocks = _merged([block for cell in cells for block in _cell_blocks(cell)])
    size = sum(len(b.text) for b in blocks if isinstance(b, TextBlock))
    if size > max_chars:
        return tool_error(_too_large(path, size, max_chars)), None
    if not blocks:
        text = "<system-reminder>Warning: the notebook exists but has no cells.</system-reminder>"
        return ToolResult(text, response=_response(path, [])), mtime
    first = blocks[0]
    content = first.text if isinstance(first, TextBlock) else ""
    rest = blocks[1:] if isinstance(first, TextBlock) else blocks
    data = {"type": "notebook", "filePath": path, "numCells": len(cells)}
    return (
        ToolResult(content, data=data, blocks=rest or None, response=_response(path, cells)),
        mtime,
    )


def _cell_view(cell: Any, index: int, lang: str, path: str) -> dict[str, Any]:
    """One cell as Claude Code describes it to Read's caller (``cellType``, ``source``, …)."""
    view: dict[str, Any] = {
        "cellType": cell.cell_type,
        "source": cell.source,
        "cell_id": cell_id(cell, index),
    }
    if cell.cell_type != "code":
        return view
    view["language"] = lang
    if cell.get("execution_count"):
        view["execution_count"] = cell.execution_count
    outputs = [out for out in (_output(o) for o in cell.get("outputs", [])) if out]
    if outputs and len(json.dumps(outputs)) > MAX_CELL_OUTPUT_CHARS:
        outputs = [
            {
                "output_type": "stream",
                "text": "Outputs are too large to include. Use Bash with: "
                f"cat {json.dumps(path)} | jq '.cells[{index}].outputs'",
            }
        ]
    if outputs:
        view["outputs"] = outputs
    return view


def _output(output: Any) -> dict[str, Any] | None:
    """An output's text (and image, for a plot), as Read shows it; None for other kinds."""
    kind = output.get("output_type")
    if kind == "stream":
        return {"output_type": kind, "text": _text(output.get("text", ""))}
    if kind in ("execute_result", "display_data"):
        data = output.get("data", {})
        shown: dict[str, Any] = {"output_type": kind, "text": _text(data.get("text/plain", ""))}
        for media_type in ("image/png", "image/jpeg"):
            image = data.get(media_type)
            if isinstance(image, str):
                shown["image"] = {
                    "image_data": re.sub(r"\s", "", image),
                    "media_type": media_type,
                }
                break
        return shown
    if kind == "error":
        traceback = "\n".join(_text(line) for line in output.get("traceback", []))
        text = f"{output.get('ename', '')}: {output.get('evalue', '')}\n{traceback}"
        return {"output_type": kind, "text": text}
    return None


def _text(value: Any) -> str:
    """An output's text (nbformat may keep it as a list of lines), without terminal colours."""
    text = "".join(value) if isinstance(value, list) else str(value or "")
    return _ANSI.sub("", text)


def _cell_blocks(view: dict[str, Any]) -> list[ToolResultContent]:
    tags = ""
    if view["cellType"] != "code":
        tags = f"<cell_type>{view['cellType']}</cell_type>"
    elif view.get("language") != "python":
        tags = f"<language>{view.get('language')}</language>"
    ident = view["cell_id"]
    blocks: list[ToolResultContent] = [
        TextBlock(text=f'<cell id="{ident}">{tags}{view["source"]}</cell id="{ident}">')
    ]
    for output in view.get("outputs", []):
        if output.get("text"):
            blocks.append(TextBlock(text=f"\n{output['text']}"))
        image = output.get("image")
        if image is not None:
            source = Base64Source(media_type=image["media_type"], data=image["image_data"])
            blocks.append(ImageBlock(source=source))
    return blocks


def _merged(blocks: list[ToolResultContent]) -> list[ToolResultContent]:
    """Adjacent text blocks joined by a newline, as Claude Code sends a notebook."""
    merged: list[ToolResultContent] = []
    for block in blocks:
        last = merged[-1] if merged else None
        if isinstance(last, TextBlock) and isinstance(block, TextBlock):
            merged[-1] = TextBlock(text=f"{last.text}\n{block.text}")
        else:
            merged.append(block)
    return merged


def _too_large(path: str, size: int, max_chars: int) -> str:
    quoted = json.dumps(path)
    return (
        f"Notebook content ({size:,} characters) exceeds the maximum allowed size "
        f"({max_chars:,}). Use Bash with jq to read parts of it:\n"
        f"  cat {quoted} | jq '.cells[:20]'  # the first 20 cells\n"
        f"  cat {quoted} | jq '.cells[100:120]'  # cells 100 to 119\n"
        f"  cat {quoted} | jq '.cells | length'  # how many cells\n"
        f"  cat {quoted} | jq '.cells[] | select(.cell_type==\"code\") | .source'  # code only"
    )


def _response(path: str, cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Read's ``tool_response`` for a notebook, in Claude Code's shape."""
    return {"type": "notebook", "file": {"filePath": path, "cells": cells}}
