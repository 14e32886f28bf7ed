"""Each tool's ``tool_response`` (what PostToolUse hooks read) in the cases one run rarely meets.

The shapes of a plain run are checked end to end in ``test_hook_payloads.py``; here, the diff
hunks of ``structuredPatch`` (and what they cost), Edit's and Write's shapes made only for a
hook, and Bash's timed-out, backgrounded and "no match" answers.
"""

from __future__ import annotations

import difflib
import random
import time
from pathlib import Path
from typing import Any

from helpers import TIME_FACTOR
from taskloom.engine import Engine, EngineConfig, ToolDone
from taskloom.hooks import HookConfig
from taskloom.tasks.runtime import TaskRuntime
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools import responses
from taskloom.tools.base import FileState, ToolContext, ToolResult
from taskloom.tools.bash import BashTool
from taskloom.tools.edit import Edit
from taskloom.tools.inputs.write import WriteInput
from taskloom.tools.write import Write


def test_a_patch_of_a_new_file_adds_every_line_from_line_zero() -> None:
    assert responses.structured_patch("", "a\nb\n") == [
        {"oldStart": 0, "oldLines": 0, "newStart": 1, "newLines": 2, "lines": ["+a", "+b"]}
    ]


def test_no_change_is_no_hunk_and_emptying_a_file_removes_every_line() -> None:
    assert responses.structured_patch("same\n", "same\n") == []
    assert responses.structured_patch("a\nb\n", "") == [
        {"oldStart": 1, "oldLines": 2, "newStart": 0, "newLines": 0, "lines": ["-a", "-b"]}
    ]


def test_changes_far_apart_are_separate_hunks_with_three_lines_of_context() -> None:
    before = "".join(f"{i}\n" for i in range(1, 21))
    after = before.replace("2\n", "two\n", 1).replace("18\n", "eighteen\n")
    first, second = responses.structured_patch(before, after)
    assert first == {
        "oldStart": 1,
        "oldLines": 5,
        "newStart": 1,
        "newLines": 5,
        "lines": [" 1", "-2", "+two", " 3", " 4", " 5"],
    }
    assert second == {
        "oldStart": 15,
        "oldLines": 6,
        "newStart": 15,
        "newLines": 6,
        "lines": [" 15", " 16", " 17", "-18", "+eighteen", " 19", " 20"],
    }


def test_an_edit_response_counts_the_replacement_everywhere() -> None:
    response = responses.edit("/f", "x", "y", original="x\nx\n", updated="y\ny\n", replace_all=True)
    assert response["replaceAll"] is True and response["originalFile"] == "x\nx\n"
    assert response["structuredPatch"][0]["lines"] == ["-x", "-x", "+y", "+y"]


def test_an_agent_response_gives_its_latest_usage_and_its_kept_worktree() -> None:
    done = responses.agent_completed(
        "a1", "general-purpose", "do it", "done", duration_ms=5, total_tokens=40, tool_uses=2,
        usage={"input_tokens": 30, "output_tokens": 4}, model="opus",
        worktree=("/w/a1", "agent-a1"),
    )  # fmt: skip
    assert done["usage"] == {
        "input_tokens": 30,
        "output_tokens": 4,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "server_tool_use": None,
        "service_tier": None,
        "cache_creation": None,
    }
    assert (done["resolvedModel"], done["worktreePath"], done["worktreeBranch"]) == (
        "opus", "/w/a1", "agent-a1",
    )  # fmt: skip
    unreported = responses.agent_completed(
        "a1", "general-purpose", "do it", "done", duration_ms=5, total_tokens=0, tool_uses=0,
        usage=None,
    )  # fmt: skip
    assert unreported["usage"]["input_tokens"] == unreported["usage"]["output_tokens"] == 0
    assert "resolvedModel" not in unreported and "worktreePath" not in unreported
    launched = responses.agent_launched("a2", "sub", "do it", "/tmp/a2.output")
    assert launched["canContinueAgent"] is True and launched["status"] == "async_launched"


def patched(before: list[str], hunks: list[dict[str, Any]]) -> list[str]:
    """``before`` with ``hunks`` applied, each checked against the lines it says it replaces."""
    out: list[str] = []
    at = 0
    for hunk in hunks:
        start = hunk["oldStart"] - (1 if hunk["oldLines"] else 0)
        lines = hunk["lines"]
        assert [line[1:] for line in lines if line[0] in " -"] == before[
            start : start + hunk["oldLines"]
        ]
        assert sum(1 for line in lines if line[0] in " +") == hunk["newLines"]
        out += before[at:start] + [line[1:] for line in lines if line[0] in " +"]
        at = start + hunk["oldLines"]
    return out + before[at:]


def test_patches_of_random_edits_apply_and_change_no_more_than_difflib_does() -> None:
    chance = random.Random(28)
    for _ in range(300):
        kinds = chance.choice([2, 3, 20])  # few kinds of line: many ways to align them
        before = [f"l{chance.randrange(kinds)}" for _ in range(chance.randrange(40))]
        after = list(before)
        for _ in range(chance.randrange(6)):
            at = chance.randrange(len(after) + 1)
            if chance.random() < 0.5:
                after.insert(at, f"n{chance.randrange(kinds)}")
            elif after:
                del after[min(at, len(after) - 1)]
        hunks = responses.structured_patch("\n".join(before), "\n".join(after))
        assert patched(before, hunks) == after
        changed = sum(1 for h in hunks for line in h["lines"] if line[0] != " ")
        smallest = difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes()
        assert changed <= sum(i2 - i1 + j2 - j1 for t, i1, i2, j1, j2 in smallest if t != "equal")


def test_edits_far_apart_in_a_huge_file_are_two_small_hunks() -> None:
    before = [f"line {i}" for i in range(200_000)]
    after = list(before)
    after[100_000], after[150_000] = "changed", "changed too"
    first, second = responses.structured_patch("\n".join(before), "\n".join(after))
    around = [f" line {i}" for i in (99_997, 99_998, 99_999)]
    after_it = [f" line {i}" for i in (100_001, 100_002, 100_003)]
    assert first["lines"] == [*around, "-line 100000", "+changed", *after_it]
    assert (first["oldStart"], second["oldStart"], second["oldLines"]) == (99_998, 149_998, 7)


def test_a_change_too_costly_to_diff_is_one_hunk_made_in_bounded_time() -> None:
    # Few kinds of line, shuffled: difflib takes minutes on this (cubic in the lines).
    before = [f"x{i % 2}" for i in range(5000)]
    after = [f"x{i * 3 % 6}" for i in range(5000)]
    started = time.monotonic()
    (hunk,) = responses.structured_patch("\n".join(before), "\n".join(after))
    assert time.monotonic() - started < 10 * TIME_FACTOR
    assert patched(before, [hunk]) == after
    # The first line, shared, is its context; every other line is removed, then added.
    assert (hunk["oldStart"], hunk["oldLines"], hunk["newLines"]) == (1, 5000, 5000)
    assert hunk["lines"][:2] == [" x0", "-x1"] and hunk["lines"][5000] == "+x3"


async def write_once(path: Path, content: str, *, hooked: bool) -> ToolResult:
    """A Write of ``path`` (read before, as if by Read), a hook reading its response or not."""
    async with TaskRuntime() as rt:
        read = FileState({str(path): path.stat().st_mtime_ns})
        ctx = ToolContext(rt, rt.session_id, path.parent, files=read, hook_response=hooked)
        return await Write().call(WriteInput(file_path=str(path), content=content), ctx)


def bytes_read() -> int:
    """Bytes this process has read so far (the kernel's count, every file and thread)."""
    with open("/proc/self/io") as io:
        return int(next(line for line in io if line.startswith("rchar:")).split()[1])


async def test_a_write_reads_the_file_it_replaces_only_for_a_hook(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text("old line\n" * 500_000)  # 4.5 MB
    before = bytes_read()
    unhooked = await write_once(big, "new\n", hooked=False)
    assert bytes_read() - before < 1_000_000 and unhooked.response is None
    big.write_text("old line\n" * 500_000)
    before = bytes_read()
    hooked = await write_once(big, "new\n", hooked=True)
    assert bytes_read() - before >= 4_500_000
    assert hooked.response is not None and hooked.response["type"] == "update"
    assert len(hooked.response["originalFile"]) == 4_500_000


async def test_a_file_over_10_mib_is_neither_read_nor_diffed_for_a_hook(tmp_path: Path) -> None:
    huge = tmp_path / "huge.txt"
    huge.write_text("0123456789" * (1024 * 1024 + 1))
    before = bytes_read()
    result = await write_once(huge, "small\n", hooked=True)
    assert bytes_read() - before < 1_000_000
    assert result.response is not None
    assert result.response["type"] == "update"  # there was a file, too large to give
    assert (result.response["originalFile"], result.response["structuredPatch"]) == (None, [])
    assert huge.read_text() == "small\n"


async def test_only_a_tool_a_post_tool_use_hook_matches_builds_its_response(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "a.txt")
    hooks = HookConfig.from_settings(
        {
            "hooks": {
                "PostToolUse": [
                    {"matcher": "Edit", "hooks": [{"type": "command", "command": "true"}]}
                ]
            }
        }
    )
    calls = [
        ToolCall("Write", {"file_path": path, "content": "one\ntwo\n"}),
        ToolCall("Edit", {"file_path": path, "old_string": "two", "new_string": "three"}),
    ]
    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(
                model=ScriptedModel([*(Turn(tool_calls=(c,)) for c in calls), "done"]),
                system_prompt="",
                tools=[Write(), Edit()],
                owner=rt.session_id,
                cwd=tmp_path,
                hooks=hooks,
            ),
            rt,
        )
        written, edited = [e.result async for e in engine.run("go") if isinstance(e, ToolDone)]
    assert not written.is_error and written.response is None  # no hook reads Write's
    assert edited.response is not None and edited.response["originalFile"] == "one\ntwo\n"
    assert edited.response["structuredPatch"][0]["lines"] == [" one", "-two", "+three"]


async def bash_results(cwd: Path, *calls: dict[str, Any], **settings: Any) -> list[ToolResult]:
    """Run each call as its own Bash call in one engine; the results, in order."""
    turns = [Turn(tool_calls=(ToolCall("Bash", call),)) for call in calls]
    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(
                # A second answer for the notification of a command sent to the background.
                model=ScriptedModel([*turns, "done", "noted"]),
                system_prompt="",
                tools=[BashTool()],
                owner=rt.session_id,
                cwd=cwd,
                settings=settings,
            ),
            rt,
        )
        return [e.result async for e in engine.run("go") if isinstance(e, ToolDone)]


async def test_bash_killed_at_its_timeout_is_interrupted_with_what_it_printed(
    tmp_path: Path,
) -> None:
    (killed,) = await bash_results(tmp_path, {"command": "echo started; sleep 30", "timeout": 300})
    assert killed.response == {
        "stdout": "started",
        "stderr": "",
        "interrupted": True,
        "isImage": False,
        "noOutputExpected": False,
    }


async def test_bash_sent_to_the_background_by_its_timeout_says_so(tmp_path: Path) -> None:
    (moved,) = await bash_results(
        tmp_path, {"command": "sleep 0.5", "timeout": 100}, autoBackgroundShells=True
    )
    assert moved.response is not None and moved.data is not None
    assert moved.response["backgroundTaskId"] == moved.data["task_id"]
    assert (moved.response["timedOutAfterMs"], moved.response["interrupted"]) == (100, False)


async def test_bash_exit_that_means_no_match_gives_its_interpretation(tmp_path: Path) -> None:
    (found,) = await bash_results(tmp_path, {"command": "grep needle /dev/null"})
    assert not found.is_error and found.response is not None
    assert found.response["stdout"] == ""
    assert found.response["returnCodeInterpretation"]
