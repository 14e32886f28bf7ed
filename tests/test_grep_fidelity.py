"""Grep as models know it from Claude Code: default cap, paging, context, -o, relative paths.

Every test runs on both back ends (ripgrep when installed, and the pure-Python search), but
the last, on the ripgrep process itself.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from helpers import TIME_FACTOR, run_processes, wait_until
from taskloom.process.spawn import TASK_ENV
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tools import grep_search
from taskloom.tools.base import ToolContext, ToolResult
from taskloom.tools.grep import DEFAULT_HEAD_LIMIT, Grep
from taskloom.tools.grep_search import MAX_COLLECT, Query, ripgrep, run_ripgrep


@pytest.fixture(params=["rg", "python"])
def grep(request: pytest.FixtureRequest) -> Grep:
    if request.param == "rg" and ripgrep() is None:
        pytest.skip("ripgrep (rg) is not installed")
    return Grep(use_ripgrep=request.param == "rg")


async def run(grep: Grep, ctx: ToolContext, **raw: Any) -> ToolResult:
    params = grep.validate(raw)
    assert not isinstance(params, ToolResult), params.content
    return await grep.call(params, ctx)


#: Long enough that 300 of them pass the 30,000 characters the old result was cut at.
FILLER = "x" * 120


def write_hits(path: Path, n: int) -> None:
    """``n`` lines, each with one match of ``hit``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"hit {i:03} {FILLER}\n" for i in range(1, n + 1)))


def content_line(i: int, name: str = "hits.txt") -> str:
    return f"{name}:{i}:hit {i:03} {FILLER}"


async def test_content_stops_at_250_lines_with_a_pagination_note(
    ctx: ToolContext, grep: Grep
) -> None:
    write_hits(ctx.cwd / "hits.txt", 300)
    result = await run(grep, ctx, pattern="hit", output_mode="content")
    body, note = result.content.rsplit("\n\n", 1)
    assert body.split("\n") == [content_line(i) for i in range(1, 251)]
    assert note == (
        "[Showing results with pagination = limit: 250, offset: 0; 300 lines in all, 50 more: "
        "offset: 250 shows the next page, head_limit: 0 all of them]"
    )
    assert DEFAULT_HEAD_LIMIT == 250
    assert result.data == {
        "mode": "content",
        "numEntries": 300,
        "appliedLimit": 250,
        "appliedOffset": None,
    }


async def test_head_limit_zero_returns_everything_uncut(ctx: ToolContext, grep: Grep) -> None:
    write_hits(ctx.cwd / "hits.txt", 300)
    result = await run(grep, ctx, pattern="hit", output_mode="content", head_limit=0)
    assert result.content.split("\n") == [content_line(i) for i in range(1, 301)]
    assert len(result.content) > 30_000  # no characters cut any more


async def test_offset_pages_through_the_rest(ctx: ToolContext, grep: Grep) -> None:
    write_hits(ctx.cwd / "hits.txt", 300)
    last = await run(grep, ctx, pattern="hit", output_mode="content", offset=250)
    body, note = last.content.rsplit("\n\n", 1)
    assert body.split("\n") == [content_line(i) for i in range(251, 301)]
    assert note == "[Showing results with pagination = limit: 250, offset: 250; 300 lines in all]"
    middle = await run(grep, ctx, pattern="hit", output_mode="content", offset=10, head_limit=5)
    body, note = middle.content.rsplit("\n\n", 1)
    assert body.split("\n") == [content_line(i) for i in range(11, 16)]
    assert note.startswith("[Showing results with pagination = limit: 5, offset: 10; ")
    past = await run(grep, ctx, pattern="hit", output_mode="content", offset=400)
    assert past.content == "No lines at offset 400: there are 300 in all."


async def test_files_and_counts_are_capped_as_entries(ctx: ToolContext, grep: Grep) -> None:
    for i in range(260):
        (ctx.cwd / f"f{i:03}.txt").write_text("hit\nhit\n")
    files = await run(grep, ctx, pattern="hit")
    lines = files.content.split("\n")
    assert lines[0] == "Found 250 files" and len(lines) == 1 + 250 + 2
    assert all(line.startswith("f") and "/" not in line for line in lines[1:251])
    assert lines[-1].startswith("[Showing results with pagination = limit: 250, offset: 0; ")
    assert "260 files in all, 10 more" in lines[-1]
    counts = await run(grep, ctx, pattern="hit", output_mode="count", head_limit=0)
    *entries, _, summary = counts.content.split("\n")
    assert entries == [f"f{i:03}.txt:2" for i in range(260)]
    assert summary == "Found 520 total occurrences across 260 files."
    first = await run(grep, ctx, pattern="hit", output_mode="count", head_limit=1)
    assert first.content.split("\n")[:3] == [
        "f000.txt:2",
        "",
        "Found 2 total occurrences across 1 file.",
    ]


async def test_context_shows_two_lines_either_side(ctx: ToolContext, grep: Grep) -> None:
    (ctx.cwd / "ctx.txt").write_text("".join(f"line {i}\n" for i in range(1, 10)))
    result = await run(grep, ctx, pattern="line 5", output_mode="content", context=2)
    assert result.content.split("\n") == [
        "ctx.txt-3-line 3",
        "ctx.txt-4-line 4",
        "ctx.txt:5:line 5",
        "ctx.txt-6-line 6",
        "ctx.txt-7-line 7",
    ]
    same = await run(grep, ctx, pattern="line 5", output_mode="content", context=2, **{"-C": 2})
    assert same.content == result.content
    both = await run(grep, ctx, pattern="line 5", output_mode="content", context=1, **{"-C": 2})
    assert both.is_error
    assert "-C (2) and context (1) are the same option" in both.content


async def test_only_matching_and_no_line_numbers(ctx: ToolContext, grep: Grep) -> None:
    (ctx.cwd / "src").mkdir()
    (ctx.cwd / "src" / "v.py").write_text("a = 'v1.2' + 'v3.45'\nnone here\nb = 'v6.7'\n")
    only = await run(grep, ctx, pattern=r"v\d+\.\d+", output_mode="content", **{"-o": True})
    assert only.content.split("\n") == ["src/v.py:1:v1.2", "src/v.py:1:v3.45", "src/v.py:3:v6.7"]
    bare = await run(
        grep, ctx, pattern=r"v\d+\.\d+", output_mode="content", **{"-o": True, "-n": False}
    )
    assert bare.content.split("\n") == ["src/v.py:v1.2", "src/v.py:v3.45", "src/v.py:v6.7"]
    lines = await run(grep, ctx, pattern="none", output_mode="content", **{"-n": False})
    assert lines.content == "src/v.py:none here"


async def test_paths_are_relative_to_cwd_and_absolute_outside_it(
    ctx: ToolContext, grep: Grep, tmp_path: Path
) -> None:
    (ctx.cwd / "pkg" / "sub").mkdir(parents=True)
    (ctx.cwd / "pkg" / "sub" / "m.py").write_text("needle\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "o.py").write_text("needle\n")
    root = await run(grep, ctx, pattern="needle")
    assert root.content == "Found 1 file\npkg/sub/m.py"
    under = await run(grep, ctx, pattern="needle", path="pkg", output_mode="content")
    assert under.content == "pkg/sub/m.py:1:needle"
    a_file = await run(grep, ctx, pattern="needle", path=str(ctx.cwd / "pkg/sub/m.py"))
    assert a_file.content == "Found 1 file\npkg/sub/m.py"
    away = await run(grep, ctx, pattern="needle", path=str(outside), output_mode="count")
    assert away.content.split("\n")[0] == f"{outside / 'o.py'}:1"


async def test_no_result_wording(ctx: ToolContext, grep: Grep) -> None:
    (ctx.cwd / "a.txt").write_text("hay\n")
    assert (await run(grep, ctx, pattern="needle")).content == "No files found"
    for mode in ("content", "count"):
        result = await run(grep, ctx, pattern="needle", output_mode=mode)
        assert result.content == "No matches found"


async def test_collection_stops_at_the_memory_bound_with_a_note(
    ctx: ToolContext, grep: Grep
) -> None:
    line = "hit " + "y" * 95 + "\n"  # 100 bytes
    lines = MAX_COLLECT // len(line) + 2000  # a little past the bound once paths are added
    (ctx.cwd / "big.txt").write_text(line * lines)
    result = await run(grep, ctx, pattern="hit", output_mode="content", head_limit=0)
    body, note = result.content.rsplit("\n\n", 1)
    assert note.startswith("(The search stopped collecting after 8 MiB of output")
    shown = body.split("\n")
    assert lines // 3 < len(shown) < lines
    assert shown[-1] == f"big.txt:{len(shown)}:{line.strip()}"
    assert os.path.getsize(ctx.cwd / "big.txt") > MAX_COLLECT


async def test_ripgrep_is_recorded_and_ends_with_the_call_or_its_time_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rg = ripgrep()
    if rg is None:
        pytest.skip("ripgrep (rg) is not installed")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # rg waits to open it for ever: nobody writes to it
    query = Query(pattern="x", root=str(fifo), mode="files_with_matches")

    def searching() -> list[psutil.Process]:
        return run_processes(lambda p: (p.info.get("cmdline") or [""])[0] == rg)

    async with TaskRuntime() as rt:
        search = asyncio.ensure_future(run_ripgrep(query, rg))
        await wait_until(lambda: bool(searching()), what="rg to start")
        [proc] = searching()
        # Recorded for the orphan sweep before it started, under the tag it carries.
        assert [t.tag for t in rt.store.list_tags()] == [proc.environ()[TASK_ENV]]
        search.cancel()
        with pytest.raises(asyncio.CancelledError):
            await search
        assert searching() == [] and rt.store.list_tags() == []

        monkeypatch.setattr(grep_search, "TIMEOUT_S", 1.0)
        started = time.monotonic()
        result = await run_ripgrep(query, rg)
        assert time.monotonic() - started < 1.0 + 3.0 * TIME_FACTOR
        assert isinstance(result, ToolResult) and result.is_error
        assert "Grep timed out after 1s" in result.content
        assert searching() == [] and rt.store.list_tags() == []
