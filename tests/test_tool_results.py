"""One rule for every tool: a text result over the tool's inline limit is saved to a file under
the session's directory and the model gets a preview with its path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import taskloom
from helpers import PERSISTED
from taskloom.engine import Engine, EngineConfig, ToolDone
from taskloom.tasks.runtime import TaskRuntime
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools.base import Tool, ToolResult


async def run_calls(cwd: Path, turns: list[Turn], tools: list[Tool[Any]]) -> list[ToolResult]:
    """Run the scripted turns in one engine; the results of its tool calls, in order."""
    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(
                model=ScriptedModel([*turns, "done"]),
                system_prompt="",
                tools=tools,
                owner=rt.session_id,
                cwd=cwd,
            ),
            rt,
        )
        return [e.result async for e in engine.run("go") if isinstance(e, ToolDone)]


async def test_any_tools_result_over_its_limit_is_saved(tmp_path: Path, home: Path) -> None:
    def text(n: int) -> str:
        return ("é" * 99 + "\n") * (n // 100) + "x" * (n % 100)

    @taskloom.tool
    def big(n: int) -> str:
        """Return n characters."""
        return text(n)

    turns = [
        Turn(tool_calls=(ToolCall("big", {"n": 100_000}, id="t_inline"),)),
        Turn(tool_calls=(ToolCall("big", {"n": 100_001}, id="t_saved"),)),
        # An id is the model's: one that is not a plain name does not name the file.
        Turn(tool_calls=(ToolCall("big", {"n": 100_001}, id="../../escape"),)),
    ]
    inline, saved, odd = await run_calls(tmp_path, turns, [big])
    assert len(inline.content) == 100_000 and "persisted-output" not in inline.content
    match = PERSISTED.fullmatch(saved.content)
    assert match, saved.content[:300]
    path = Path(match["path"])
    assert path.name == "t_saved.txt"
    assert path.read_text(encoding="utf-8") == text(100_001)
    assert match["size"] == "194.3KB"  # 199,001 bytes of UTF-8, as the file holds them
    other = PERSISTED.fullmatch(odd.content)
    assert other and Path(other["path"]).parent == path.parent
    assert len(list(path.parent.iterdir())) == 2


def test_a_saved_results_file_name_never_leaves_its_directory(tmp_path: Path) -> None:
    from taskloom.tools.overflow import save_text

    directory = tmp_path / "tool-results"
    names = []
    for tool_use_id in ("../../escape", "a/b", "", "toolu_01", "toolu_01"):
        shown = PERSISTED.fullmatch(save_text("x" * 3000, directory, tool_use_id))
        assert shown is not None
        names.append(Path(shown["path"]).name)
        assert Path(shown["path"]).parent == directory
    assert all(re.fullmatch(r"id-[0-9a-f]{24}\.txt", n) for n in names[:3])
    assert names[3:] == ["toolu_01.txt", "toolu_01-1.txt"]  # the same id twice: both kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tool-results"]


@pytest.mark.parametrize(
    ("size", "shown"),
    [(0, "0 bytes"), (1023, "1023 bytes"), (1024, "1KB"), (2000, "2KB"), (100_000, "97.7KB"),
     (32 * 1024**2, "32MB"), (5 * 1024**3, "5GB")],
)  # fmt: skip
def test_sizes_are_written_as_the_reference_writes_them(size: int, shown: str) -> None:
    from taskloom.tools.overflow import format_size

    assert format_size(size) == shown


async def test_an_error_of_any_tool_is_cut_in_the_middle(tmp_path: Path) -> None:
    # A library tool (or an MCP server) may return an error of any size; ours are cut at
    # 10,000 characters by tool_error, and so are theirs, head and tail kept.
    @taskloom.tool
    def failing() -> ToolResult:
        """Fail loudly."""
        return ToolResult("HEAD" + "e" * 50_000 + "TAIL", is_error=True)

    @taskloom.tool
    def raising() -> str:
        """Raise with a long message."""
        raise ValueError("v" * 50_000)

    turns = [
        Turn(tool_calls=(ToolCall("failing", {}),)),
        Turn(tool_calls=(ToolCall("raising", {}),)),
    ]
    theirs, ours = await run_calls(tmp_path, turns, [failing, raising])
    assert theirs.is_error and len(theirs.content) < 10_100
    assert theirs.content.startswith("HEAD") and theirs.content.endswith("TAIL")
    assert "characters cut" in theirs.content
    assert ours.content.startswith("<tool_use_error>") and ours.content.endswith(
        "</tool_use_error>"
    )


async def test_a_read_under_a_raised_token_cap_is_shown_whole(tmp_path: Path) -> None:
    # Read bounds itself (its token cap, which a setting may raise): it is never saved.
    from taskloom.tools.read import Read

    big = tmp_path / "big.txt"
    big.write_text("".join(f"line {i:06d} " + "w" * 100 + "\n" for i in range(1700)))  # ~190 KB
    read = Turn(tool_calls=(ToolCall("Read", {"file_path": str(big)}),))
    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(
                model=ScriptedModel([read, "done"]),
                system_prompt="",
                tools=[Read()],
                owner=rt.session_id,
                cwd=tmp_path,
                settings={"readMaxTokens": 60_000},
            ),
            rt,
        )
        (shown,) = [e.result async for e in engine.run("go") if isinstance(e, ToolDone)]
    assert "persisted-output" not in shown.content
    assert "line 001699" in shown.content
