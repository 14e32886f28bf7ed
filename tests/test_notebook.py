"""Jupyter notebooks: Read shows their cells as Claude Code does; NotebookEdit edits a cell.

Real ``.ipynb`` files, written and read back with nbformat; real sessions for the permission
and read-before-edit rules.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import nbformat
import pytest

import taskloom
from taskloom.messages import ImageBlock, TextBlock
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools.base import Tool, ToolContext, ToolResult
from taskloom.tools.notebook_edit import NotebookEdit
from taskloom.tools.read import Read

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360f80f0000010101005b5b8d5f0000000049454e44ae426082"
    )
).decode()


async def run(tool: Tool[Any], ctx: ToolContext, **raw: Any) -> ToolResult:
    params = tool.validate(raw)
    assert not isinstance(params, ToolResult), params.content
    return await tool.call(params, ctx)


def write_notebook(path: Path, *, minor: int = 5, language: str | None = None) -> Path:
    """A notebook of a markdown cell and a code cell with a stream, an image and an error."""
    nb = nbformat.v4.new_notebook()
    nb.nbformat_minor = minor
    if language:
        nb.metadata["language_info"] = {"name": language}
    intro = nbformat.v4.new_markdown_cell("# Analysis", id="intro")
    code = nbformat.v4.new_code_cell("print(41 + 1)\nplot()", id="calc", execution_count=3)
    code.outputs = [
        nbformat.v4.new_output("stream", text="42\n"),
        nbformat.v4.new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"}),
        nbformat.v4.new_output(
            "error", ename="NameError", evalue="x", traceback=["\x1b[31mTraceback\x1b[0m", "here"]
        ),
    ]
    nb.cells = [intro, code]
    if minor < 5:
        for cell in nb.cells:
            del cell["id"]
    nbformat.write(nb, str(path))
    return path


async def test_read_shows_cells_and_outputs_as_claude_code_does(ctx: ToolContext) -> None:
    path = write_notebook(ctx.cwd / "a.ipynb")

    result = await run(Read(), ctx, file_path=str(path))

    assert not result.is_error
    assert result.content == (
        '<cell id="intro"><cell_type>markdown</cell_type># Analysis</cell id="intro">\n'
        '<cell id="calc">print(41 + 1)\nplot()</cell id="calc">\n\n42\n\n\n<Figure>'
    )
    assert result.blocks is not None
    image, error = result.blocks
    assert isinstance(image, ImageBlock) and image.source.data == PNG  # type: ignore[union-attr]
    assert isinstance(error, TextBlock) and error.text == "\nNameError: x\nTraceback\nhere"
    assert ctx.files.seen[str(path)] == path.stat().st_mtime_ns
    assert result.response is not None and result.response["type"] == "notebook"


async def test_read_names_cells_without_ids_by_index_and_says_the_language(
    ctx: ToolContext,
) -> None:
    path = write_notebook(ctx.cwd / "old.ipynb", minor=4, language="R")

    result = await run(Read(), ctx, file_path=str(path))

    assert result.content.startswith(
        '<cell id="cell-0"><cell_type>markdown</cell_type># Analysis</cell id="cell-0">\n'
        '<cell id="cell-1"><language>R</language>print(41 + 1)'
    )


async def test_read_cuts_outputs_too_large_to_show(ctx: ToolContext) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("spam()")
    cell.outputs = [nbformat.v4.new_output("stream", text="x" * 20_000)]
    nb.cells = [cell]
    path = ctx.cwd / "big.ipynb"
    nbformat.write(nb, str(path))

    result = await run(Read(), ctx, file_path=str(path))

    assert "x" * 100 not in result.content
    assert f'Outputs are too large to include. Use Bash with: cat "{path}"' in result.content
    assert "jq '.cells[0].outputs'" in result.content


async def test_replace_clears_outputs_and_keeps_the_rest(ctx: ToolContext) -> None:
    path = write_notebook(ctx.cwd / "a.ipynb")
    await run(Read(), ctx, file_path=str(path))

    result = await run(
        NotebookEdit(), ctx, notebook_path=str(path), cell_id="calc", new_source="x = 2"
    )

    assert result.content == "Updated cell calc with x = 2"
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    assert [c.source for c in nb.cells] == ["# Analysis", "x = 2"]
    assert nb.cells[1].outputs == [] and nb.cells[1].execution_count is None
    # Written as Jupyter writes it; the read-before-edit record follows the new mtime.
    assert path.read_text() == nbformat.writes(nb) + "\n"
    assert ctx.files.seen[str(path)] == path.stat().st_mtime_ns
    assert result.response is not None
    assert result.response["edit_mode"] == "replace" and result.response["cell_type"] == "code"
    assert json.loads(result.response["original_file"])["cells"][1]["source"] != "x = 2"


async def test_insert_after_a_cell_and_at_the_start_then_delete(ctx: ToolContext) -> None:
    path = write_notebook(ctx.cwd / "a.ipynb")
    await run(Read(), ctx, file_path=str(path))
    edit = NotebookEdit()

    after = await run(
        edit,
        ctx,
        notebook_path=str(path),
        cell_id="intro",
        new_source="## Method",
        cell_type="markdown",
        edit_mode="insert",
    )
    first = await run(
        edit, ctx, notebook_path=str(path), new_source="import os", cell_type="code",
        edit_mode="insert",
    )  # fmt: skip
    nb = nbformat.read(str(path), as_version=4)
    assert [c.source for c in nb.cells] == [
        "import os",
        "# Analysis",
        "## Method",
        "print(41 + 1)\nplot()",
    ]
    assert [c.cell_type for c in nb.cells] == ["code", "markdown", "markdown", "code"]
    new_id = nb.cells[2].id
    assert after.content == f"Inserted cell {new_id} with ## Method"
    assert first.content == f"Inserted cell {nb.cells[0].id} with import os"

    deleted = await run(
        edit, ctx, notebook_path=str(path), cell_id=new_id, new_source="", edit_mode="delete"
    )

    assert deleted.content == f"Deleted cell {new_id}"
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    assert [c.source for c in nb.cells] == ["import os", "# Analysis", "print(41 + 1)\nplot()"]


async def test_a_notebook_without_cell_ids_is_edited_by_index(ctx: ToolContext) -> None:
    path = write_notebook(ctx.cwd / "old.ipynb", minor=4)
    await run(Read(), ctx, file_path=str(path))

    result = await run(
        NotebookEdit(), ctx, notebook_path=str(path), cell_id="cell-0", new_source="x",
        cell_type="code",
    )  # fmt: skip
    inserted = await run(
        NotebookEdit(), ctx, notebook_path=str(path), cell_id="cell-1", new_source="y",
        cell_type="markdown", edit_mode="insert",
    )  # fmt: skip

    assert result.content == "Updated cell cell-0 with x"
    assert inserted.content == "Inserted cell cell-2 with y"
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat_minor == 4 and all("id" not in c for c in nb.cells)
    assert [(c.cell_type, c.source) for c in nb.cells] == [
        ("code", "x"),
        ("code", "print(41 + 1)\nplot()"),
        ("markdown", "y"),
    ]
    assert nb.cells[0].outputs == []


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"cell_id": "nope"}, 'Cell with ID "nope" not found in notebook.'),
        ({"cell_id": "cell-9"}, "Cell with index 9 does not exist in notebook (2 cells)."),
        ({}, "Cell ID must be specified when not inserting a new cell."),
        ({"edit_mode": "insert"}, "Cell type is required when using edit_mode=insert."),
    ],
)
async def test_bad_edits_are_errors_that_change_nothing(
    ctx: ToolContext, raw: dict[str, Any], message: str
) -> None:
    path = write_notebook(ctx.cwd / "a.ipynb")
    await run(Read(), ctx, file_path=str(path))
    before = path.read_bytes()

    result = await run(NotebookEdit(), ctx, notebook_path=str(path), new_source="z", **raw)

    assert result.is_error and message in result.content
    assert path.read_bytes() == before


async def test_the_notebook_must_be_read_first_and_unchanged_since(ctx: ToolContext) -> None:
    path = write_notebook(ctx.cwd / "a.ipynb")
    edit = NotebookEdit()
    args = {"notebook_path": str(path), "cell_id": "calc", "new_source": "z"}

    unread = await run(edit, ctx, **args)
    await run(Read(), ctx, file_path=str(path))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    changed = await run(edit, ctx, **args)

    assert unread.is_error and "has not been read yet" in unread.content
    assert changed.is_error and "has been modified since it was read" in changed.content
    assert nbformat.read(str(path), as_version=4).cells[1].source.startswith("print")


async def test_other_files_and_broken_notebooks_are_refused(ctx: ToolContext) -> None:
    text = ctx.cwd / "a.py"
    text.write_text("x = 1\n")
    broken = ctx.cwd / "b.ipynb"
    broken.write_text("{not json")
    await run(Read(), ctx, file_path=str(broken))
    ctx.files.seen[str(broken)] = broken.stat().st_mtime_ns

    not_notebook = await run(
        NotebookEdit(), ctx, notebook_path=str(text), cell_id="c", new_source=""
    )
    not_json = await run(NotebookEdit(), ctx, notebook_path=str(broken), cell_id="c", new_source="")
    missing = await run(
        NotebookEdit(), ctx, notebook_path=str(ctx.cwd / "c.ipynb"), cell_id="c", new_source=""
    )
    read_broken = await run(Read(), ctx, file_path=str(broken))

    assert "File must be a Jupyter notebook (.ipynb file)" in not_notebook.content
    assert not_json.is_error and "Notebook is not valid JSON" in not_json.content
    assert missing.is_error and "File does not exist" in missing.content
    assert read_broken.is_error and "Cannot read" in read_broken.content
    assert broken.read_text() == "{not json"


def script(path: Path) -> list[Turn]:
    return [
        Turn(tool_calls=(ToolCall("Read", {"file_path": str(path)}),)),
        Turn(
            tool_calls=(
                ToolCall(
                    "NotebookEdit",
                    {"notebook_path": str(path), "cell_id": "intro", "new_source": "# Results"},
                ),
            )
        ),
        Turn(text="done"),
    ]


async def test_accept_edits_lets_a_session_edit_a_notebook_and_default_mode_does_not(
    tmp_path: Path,
) -> None:
    path = write_notebook(tmp_path / "a.ipynb")
    model = ScriptedModel(script(path))

    async with taskloom.Harness(model=model, cwd=tmp_path, permission_mode="acceptEdits") as h:
        [event async for event in h.run("retitle the notebook")]

    assert nbformat.read(str(path), as_version=4).cells[0].source == "# Results"
    assert "Updated cell intro with # Results" in str(model.requests[2].messages[-1].content)
    # The tool is offered with Claude Code's schema.
    spec = next(t for t in model.requests[0].tools if t.name == "NotebookEdit")
    assert spec.input_schema["required"] == ["notebook_path", "new_source"]

    path = write_notebook(tmp_path / "b.ipynb")
    denied = ScriptedModel(script(path))
    async with taskloom.Harness(model=denied, cwd=tmp_path) as h:
        [event async for event in h.run("retitle the notebook")]
    assert nbformat.read(str(path), as_version=4).cells[0].source == "# Analysis"
    assert "Updated cell" not in str(denied.requests[2].messages[-1].content)


def test_reading_a_notebook_is_the_only_path_that_imports_nbformat() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from taskloom.tools.registry import core_tools\n"
        "core_tools()\n"
        "print('nbformat' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
