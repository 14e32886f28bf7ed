"""The NotebookEdit tool: replace, insert or delete one cell of a Jupyter notebook.

Claude Code's tool, with its input, checks and result texts. The notebook must have been Read
in this conversation and be unchanged since (the rule Edit and Write keep, on the same
``ctx.files``). Cells are named by their id, or ``cell-N`` by their index (what Read shows for
a cell without an id). A replaced code cell loses its outputs and execution count: they belong
to the old source. The file is written as Jupyter writes it (nbformat, imported only here).
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error
from taskloom.tools.read import check_fresh, missing_file_error, resolve_file_path, target_path
from taskloom.tools.write import settled_mtime

if TYPE_CHECKING:
    from taskloom.tools.inputs.notebook_edit import NotebookEditInput


#: :class:`NotebookEditInput`'s closed schema written out, so that offering the tool does not
#: build the model (it is built when a call is first validated); tests check it is the one
#: generated, byte for byte.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`NotebookEdit`.",
    "properties": {
        "notebook_path": {
            "description": "The absolute path to the Jupyter notebook file to edit (must be "
            "absolute, not relative)",
            "type": "string",
        },
        "cell_id": {
            "type": "string",
            "description": "The ID of the cell to edit. When inserting a new cell, the new cell "
            "will be inserted after the cell with this ID, or at the beginning if not specified.",
        },
        "new_source": {"description": "The new source for the cell", "type": "string"},
        "cell_type": {
            "enum": ["code", "markdown"],
            "type": "string",
            "description": "The type of the cell (code or markdown). If not specified, it "
            "defaults to the current cell type. If using edit_mode=insert, this is required.",
        },
        "edit_mode": {
            "enum": ["replace", "insert", "delete"],
            "type": "string",
            "description": "The type of edit to make (replace, insert, delete). Defaults to "
            "replace.",
        },
    },
    "required": ["notebook_path", "new_source"],
    "type": "object",
}


class NotebookEdit(Tool["NotebookEditInput"]):
    """Replaces, inserts or deletes one cell of a notebook that was Read first."""

    name = "NotebookEdit"
    description = (
        "Completely replaces the contents of a specific cell in a Jupyter notebook (.ipynb "
        "file) with new source. Jupyter notebooks are interactive documents that combine code, "
        "text, and visualizations, commonly used for data analysis and scientific computing. "
        "The notebook_path parameter must be an absolute path, not a relative path. The cell_id "
        "is the id Read shows for the cell (cell-N, 0-indexed, for a cell without one). Use "
        "edit_mode=insert to add a new cell after the cell with cell_id (at the beginning "
        "without one). Use edit_mode=delete to delete the cell with cell_id. You must Read the "
        "notebook in this conversation before editing it."
    )
    input_model = "taskloom.tools.inputs.notebook_edit:NotebookEditInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "edit"

    def permission_target(self, params: NotebookEditInput, ctx: ToolContext) -> str | None:
        """The absolute path of the notebook (Edit's rules and ``acceptEdits`` cover it)."""
        return target_path(params.notebook_path, ctx)

    async def call(self, params: NotebookEditInput, ctx: ToolContext) -> ToolResult:
        """Make the edit, or say precisely why it cannot be made."""
        from taskloom.tools._notebook import is_notebook  # the notebook code loads at a call

        path = resolve_file_path(params.notebook_path, ctx)
        if isinstance(path, ToolResult):
            return path
        if not is_notebook(path):
            return tool_error(
                "File must be a Jupyter notebook (.ipynb file). For editing other file types, "
                "use the Edit tool."
            )
        mode = params.edit_mode or "replace"
        if mode == "insert" and params.cell_type is None:
            return tool_error("Cell type is required when using edit_mode=insert.")
        if not params.cell_id and mode != "insert":
            return tool_error("Cell ID must be specified when not inserting a new cell.")
        if not os.path.isfile(path):
            return missing_file_error(path, ctx)
        try:
            # Parsing and writing a large notebook: keep the loop free.
            return await asyncio.to_thread(_edit, path, params, mode, ctx)
        except OSError as exc:
            return tool_error(f"Cannot edit {path}: {exc.strerror or exc}")


def _edit(path: str, params: NotebookEditInput, mode: str, ctx: ToolContext) -> ToolResult:
    from taskloom.tools._notebook import NotebookError, cell_id, dumps, language, parse

    with open(path, "r+b") as f:  # held open across check, read and write
        before = os.fstat(f.fileno())
        stale = check_fresh(path, before.st_mtime_ns, ctx, "editing")
        if stale is not None:
            return stale
        try:
            original = f.read().decode("utf-8")
            notebook = parse(original)
        except UnicodeDecodeError:
            return tool_error(f"{path} is not UTF-8 text; it is no notebook NotebookEdit can edit.")
        except NotebookError as exc:
            return tool_error(str(exc))
        done = _apply(notebook, params, mode)
        if isinstance(done, ToolResult):
            return done
        mode, cell, index = done
        updated = dumps(notebook)  # may give the cell an id: named after
        ident, kind = cell_id(cell, index), str(cell.cell_type)
        f.seek(0)
        f.write(updated.encode("utf-8"))
        f.truncate()
        f.flush()
        ctx.files.seen[path] = settled_mtime(f.fileno(), before)
    if mode == "delete":
        text = f"Deleted cell {ident}"
    else:
        verb = "Updated" if mode == "replace" else "Inserted"
        text = f"{verb} cell {ident} with {params.new_source}"
    response = {
        "new_source": params.new_source,
        "cell_id": ident,
        "cell_type": kind,
        "language": language(notebook),
        "edit_mode": mode,
        "error": "",
        "notebook_path": path,
        "original_file": original,
        "updated_file": updated,
    }
    data = {"type": "notebook", "filePath": path, "editMode": mode, "cellId": ident}
    return ToolResult(text, data=data, response=response)


def _apply(
    notebook: Any, params: NotebookEditInput, mode: str
) -> tuple[str, Any, int] | ToolResult:
    """Edit ``notebook`` in place: (the mode done, the cell, its index), or an error."""
    import nbformat

    from taskloom.tools._notebook import find_cell, has_cell_ids

    cells = notebook.cells
    index = 0
    if params.cell_id:
        found = find_cell(notebook, params.cell_id)
        if found is None:
            return tool_error(_not_found(params.cell_id, len(cells)))
        index = found + 1 if mode == "insert" else found
    if mode == "delete":
        return mode, cells.pop(index), index
    if mode == "insert":
        kind = params.cell_type or "code"
        new = nbformat.v4.new_markdown_cell if kind == "markdown" else nbformat.v4.new_code_cell
        cell = new(params.new_source)  # type: ignore[no-untyped-call]
        if not has_cell_ids(notebook):
            del cell["id"]  # the format has no cell ids: Read names it by its index
        cells.insert(index, cell)
        return mode, cell, index
    cell = cells[index]
    cell.source = params.new_source
    if params.cell_type is not None and params.cell_type != cell.cell_type:
        _retype(cell, params.cell_type)
    if cell.cell_type == "code":
        cell.outputs, cell.execution_count = [], None
    return mode, cell, index


def _retype(cell: Any, kind: str) -> None:
    """Make ``cell`` a ``kind`` cell, with the fields that type has and no others."""
    cell.cell_type = kind
    if kind == "code":
        cell.outputs, cell.execution_count = [], None
        cell.pop("attachments", None)  # only markdown and raw cells have them
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)


def _not_found(wanted: str, count: int) -> str:
    if wanted.startswith("cell-") and wanted[5:].isdigit():
        return f"Cell with index {int(wanted[5:])} does not exist in notebook ({count} cells)."
    return f'Cell with ID "{wanted}" not found in notebook.'
