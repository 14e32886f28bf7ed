"""Glob as models know it from Claude Code: ripgrep glob semantics, newest last, 100 at most."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from taskloom.tools.base import ToolContext, ToolResult
from taskloom.tools.glob import Glob


async def run(ctx: ToolContext, **raw: Any) -> ToolResult:
    tool = Glob()
    params = tool.validate(raw)
    assert not isinstance(params, ToolResult), params.content
    return await tool.call(params, ctx)


def make(root: Path, files: dict[str, int]) -> None:
    """Create each file with its mtime (seconds)."""
    for rel, mtime in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
        os.utime(path, ns=(0, mtime * 1_000_000_000))


async def test_a_pattern_without_a_slash_matches_at_any_depth(ctx: ToolContext) -> None:
    make(ctx.cwd, {"top.py": 1, "src/a/deep.py": 2, "src/mid.py": 3, "src/a/notes.md": 4})
    root = await run(ctx, pattern="*.py")
    assert root.content.split("\n") == [
        str(ctx.cwd / p) for p in ("top.py", "src/a/deep.py", "src/mid.py")
    ]
    under = await run(ctx, pattern="*.py", path="src")
    assert under.content.split("\n") == [
        str(ctx.cwd / "src/a/deep.py"),
        str(ctx.cwd / "src/mid.py"),
    ]
    by_name = await run(ctx, pattern="deep.py")
    assert by_name.content == str(ctx.cwd / "src/a/deep.py")


async def test_a_pattern_with_a_slash_is_anchored_at_the_path(ctx: ToolContext) -> None:
    make(ctx.cwd, {"src/a.py": 1, "src/sub/b.py": 2, "lib/src/c.py": 3})
    direct = await run(ctx, pattern="src/*.py")
    assert direct.content == str(ctx.cwd / "src/a.py")
    below = await run(ctx, pattern="src/**/*.py")
    assert below.content.split("\n") == [str(ctx.cwd / "src/a.py"), str(ctx.cwd / "src/sub/b.py")]
    anywhere = await run(ctx, pattern="**/src/*.py")
    assert anywhere.content.split("\n") == [
        str(ctx.cwd / "src/a.py"),
        str(ctx.cwd / "lib/src/c.py"),
    ]
    absolute = await run(ctx, pattern=f"{ctx.cwd}/lib/*/*.py")
    assert absolute.content == str(ctx.cwd / "lib/src/c.py")


async def test_results_are_sorted_by_mtime_newest_last(ctx: ToolContext) -> None:
    # Modification order unlike name or walk order.
    make(ctx.cwd, {"b.txt": 30, "d/a.txt": 10, "c.txt": 20, "d/e/z.txt": 5, "a.txt": 40})
    result = await run(ctx, pattern="*.txt")
    assert result.content.split("\n") == [
        str(ctx.cwd / p) for p in ("d/e/z.txt", "d/a.txt", "c.txt", "b.txt", "a.txt")
    ]


async def test_101_files_show_the_100_newest_and_the_note(ctx: ToolContext) -> None:
    make(ctx.cwd, {f"n/f{i:03}.log": 1000 - i for i in range(101)})  # f100 is the oldest
    result = await run(ctx, pattern="*.log")
    lines = result.content.split("\n")
    assert lines[:100] == [str(ctx.cwd / f"n/f{i:03}.log") for i in range(99, -1, -1)]
    assert lines[100:] == [
        "(Results are truncated. Consider using a more specific path or pattern.)"
    ]
    assert result.data == {"numFiles": 101, "truncated": True}


async def test_gitignore_is_honoured_and_vcs_skipped(ctx: ToolContext) -> None:
    make(ctx.cwd, {"keep.py": 1, "build/gen.py": 2, "skip.py": 3, ".git/hook.py": 4})
    (ctx.cwd / ".gitignore").write_text("build/\nskip.py\n")
    (ctx.cwd / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    result = await run(ctx, pattern="*.py")
    assert result.content == str(ctx.cwd / "keep.py")
    none = await run(ctx, pattern="gen.py")
    assert none.content == "No files found"
