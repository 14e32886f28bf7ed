"""A same-size rewrite by Edit or Write within the second moves the mtime on.

Python's bytecode cache judges a source unchanged by its mtime in whole seconds and its size:
a model that edits a module and runs the tests at once (the coordinator demo does) would run
the old code from a stale ``.pyc``.
"""

from __future__ import annotations

import os
import py_compile
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from taskloom.tools.base import Tool, ToolContext, ToolResult
from taskloom.tools.edit import Edit
from taskloom.tools.read import Read
from taskloom.tools.write import Write

OLD = "def answer():\n    return (1 + 2) * 3\n"
NEW = "def answer():\n    return (3 + 2) * 1\n"  # the same size


async def run(tool: Tool[Any], ctx: ToolContext, **raw: Any) -> ToolResult:
    params = tool.validate(raw)
    assert not isinstance(params, ToolResult), params.content
    return await tool.call(params, ctx)


def compiled_module(ctx: ToolContext) -> Path:
    """``calc.py`` with OLD, its mtime at the start of this second, its ``.pyc`` written."""
    source = ctx.cwd / "calc.py"
    source.write_text(OLD)
    second = time.time_ns() // 10**9 * 10**9
    os.utime(source, ns=(second, second))
    py_compile.compile(str(source), doraise=True)
    return source


def answer(cwd: Path) -> str:
    """What ``calc.answer()`` gives a fresh interpreter that may use the bytecode cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(
        [sys.executable, "-c", "import calc; print(calc.answer())"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.mark.parametrize("tool", ["Edit", "Write"])
async def test_a_same_size_rewrite_in_the_same_second_is_not_hidden_by_a_pyc(
    ctx: ToolContext, tool: str
) -> None:
    source = compiled_module(ctx)
    before = source.stat().st_mtime_ns
    assert answer(ctx.cwd) == "9"
    await run(Read(), ctx, file_path=str(source))
    if tool == "Edit":
        result = await run(Edit(), ctx, file_path=str(source), old_string="(1 + 2) * 3",
                           new_string="(3 + 2) * 1")  # fmt: skip
    else:
        result = await run(Write(), ctx, file_path=str(source), content=NEW)
    assert not result.is_error, result.content
    assert source.read_text() == NEW
    # Whatever the clock did meanwhile, the whole second differs from the old one's...
    assert source.stat().st_mtime_ns // 10**9 != before // 10**9
    # ... so the cache is judged stale and the new code runs.
    assert answer(ctx.cwd) == "5"
    # And the tool knows the mtime it left: a second edit needs no new Read.
    again = await run(Edit(), ctx, file_path=str(source), old_string="* 1", new_string="* 2")
    assert not again.is_error, again.content


async def test_a_rewrite_that_changes_the_size_keeps_the_clocks_mtime(ctx: ToolContext) -> None:
    source = compiled_module(ctx)
    await run(Read(), ctx, file_path=str(source))
    started = time.time_ns()
    await run(Write(), ctx, file_path=str(source), content=OLD + "\n")
    # The size tells the cache already: the mtime is the write's own, not moved on.
    assert source.stat().st_mtime_ns <= time.time_ns()
    assert source.stat().st_mtime_ns >= started - 10**9
