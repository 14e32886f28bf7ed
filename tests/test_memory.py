"""Agent memory: an agent with ``memory: project`` writes a note; its next run starts with it."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from helpers import harness, main_context
from taskloom.agents.memory import MAX_CHARS, MAX_LINES, load_memory, memory_dir
from taskloom.agents.service import SpawnRequest
from taskloom.models.base import ModelRequest
from taskloom.models.scripted import FunctionModel, ToolCall, Turn
from taskloom.tasks.types import TaskStatus

AGENTS = json.dumps(
    {
        "notetaker": {
            "description": "Takes notes.",
            "prompt": "You take notes.",
            "memory": "project",
        }
    }
)


async def test_a_project_memory_written_in_one_run_is_in_the_next_run_s_first_request(
    tmp_path: Path,
) -> None:
    systems: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        if "You take notes." not in request.system:
            return "main"
        if len(request.messages) == 1:
            systems.append(request.system)
            if len(systems) == 1:  # the first run: remember something
                (index,) = re.findall(r'<memory file="([^"]+)">', request.system)
                note = {"file_path": index, "content": "- the build needs GO=1\n"}
                return Turn(tool_calls=(ToolCall("Write", note),))
        return "noted"

    for _ in range(2):  # two sessions of the same project
        async with harness(tmp_path, FunctionModel(respond), agents=AGENTS) as h:
            launched = await h.agents.spawn(
                SpawnRequest(description="notes", prompt="go", subagent_type="notetaker"),
                main_context(h),
            )
            state = h.runtime.get(launched.agent_id)
            assert state is not None and state.status == TaskStatus.COMPLETED
    first, second = systems
    where = memory_dir("project", "notetaker", tmp_path)
    assert str(where) in first and "nothing remembered yet" in first
    assert "the build needs GO=1" in second and "nothing remembered yet" not in second
    assert (where / "MEMORY.md").read_text() == "- the build needs GO=1\n"


async def test_a_worktree_agent_keeps_its_memory_in_the_main_checkout_outside_its_worktree(
    tmp_path: Path,
) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "README.md").write_text("hi\n")
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], cwd=tmp_path, check=True)
    results: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        if "You take notes." not in request.system:
            return "main"
        if len(request.messages) == 1:
            (index,) = re.findall(r'<memory file="([^"]+)">', request.system)
            note = {"file_path": index, "content": "- kept outside the worktree\n"}
            return Turn(tool_calls=(ToolCall("Write", note),))
        results.append(json.dumps(request.messages[-1].full()))
        return "noted"

    async with harness(tmp_path, FunctionModel(respond), agents=AGENTS) as h:
        request = SpawnRequest(
            description="notes", prompt="go", subagent_type="notetaker", isolation="worktree"
        )
        launched = await h.agents.spawn(request, main_context(h))
        state = h.runtime.get(launched.agent_id)
        assert state is not None and state.status == TaskStatus.COMPLETED
    (written,) = results
    assert "outside" not in written and "File created" in written, written
    index = memory_dir("project", "notetaker", tmp_path) / "MEMORY.md"
    assert index.read_text() == "- kept outside the worktree\n"
    # Nothing else changed in it: the worktree went with the agent's end.
    assert getattr(state, "worktree_path", None) is None or not Path(state.worktree_path).exists()


def test_the_memory_of_any_agent_working_in_a_worktree_is_the_main_checkout_s(
    tmp_path: Path,
) -> None:
    from taskloom.agents.memory import memory_project

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "src").mkdir()
    (repo / "src" / "a.txt").write_text("a\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    tree = tmp_path / "tree"
    subprocess.run([*git, "worktree", "add", "-q", str(tree)], check=True)
    try:
        # A child of a worktree agent works in it too, not isolated itself: the same memory.
        assert memory_project(tree / "src") == repo.resolve()
        assert memory_project(repo / "src") == repo
        assert memory_project(tmp_path / "elsewhere") == tmp_path / "elsewhere"  # no git
    finally:
        subprocess.run([*git, "worktree", "remove", "--force", str(tree)], check=True)


def test_a_memory_s_scopes_are_claude_code_s_places_and_a_long_index_is_cut(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config"
    assert memory_dir("user", "a/b", tmp_path, config) == config / "agent-memory/a-b"
    # Without one given, Claude Code's: $CLAUDE_CONFIG_DIR (conftest sets it), not ~/.claude.
    assert memory_dir("user", "a", tmp_path) == Path(os.environ["CLAUDE_CONFIG_DIR"]) / (
        "agent-memory/a"
    )
    assert memory_dir("local", "x", tmp_path) == tmp_path / ".claude/agent-memory-local/x"
    assert load_memory(None, "x", tmp_path) is None
    memory = load_memory("project", "x", tmp_path)
    assert memory is not None and memory.directory.is_dir() and memory.text == ""
    memory.index.write_text("".join(f"line {n}\n" for n in range(MAX_LINES + 50)))
    again = load_memory("project", "x", tmp_path)
    assert again is not None
    assert f"line {MAX_LINES - 1}\n" in again.text and f"line {MAX_LINES}\n" not in again.text
    assert f"[more in {memory.index}]" in again.text
    memory.index.write_text("x" * (MAX_CHARS * 4) + "\n")  # one huge line
    huge = load_memory("project", "x", tmp_path)
    assert huge is not None and huge.text == "x" * MAX_CHARS + f"\n[more in {memory.index}]\n"


def test_a_memory_agent_s_policy_follows_the_session_s_mode(tmp_path: Path) -> None:
    from taskloom.permissions import PermissionPolicy

    session = PermissionPolicy.from_settings({}, mode="acceptEdits", project_root=tmp_path)
    agent = session.with_directories([tmp_path / "memory"])
    assert agent.additional_directories[-1] == tmp_path / "memory"
    session.switch_mode("plan")  # the user switches the session's mode
    assert str(agent.mode) == "plan"
    own = session.with_mode("default")  # a definition's own mode stays its own
    session.switch_mode("acceptEdits")
    assert str(agent.mode) == "acceptEdits" and str(own.mode) == "default"
