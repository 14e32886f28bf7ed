"""Dreaming (``dream`` tasks): agent memory consolidated by a background agent, in process.

The dream's model is scripted; its tools, its task, its budget and its kill are real. The
process-level kill of an atomic write is in ``test_dream_e2e.py``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from helpers import TIME_FACTOR, harness, wait_until
from taskloom.agents.dream import DreamSettings, memory_targets
from taskloom.agents.dream_tools import (
    TEMP_SUFFIX,
    Change,
    MemoryDelete,
    MemoryRead,
    MemoryScope,
    MemoryWrite,
    sweep_leftovers,
)
from taskloom.agents.inputs.dream_tools import MemoryDeleteInput, MemoryReadInput, MemoryWriteInput
from taskloom.agents.memory import MAX_CHARS, MAX_LINES, memory_dir
from taskloom.errors import UsageError
from taskloom.models.base import ModelRequest
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.types import AgentTaskState, TaskStatus, TaskType
from taskloom.testing import FunctionModel, ToolCall, Turn
from taskloom.tools.base import ToolContext

AGENTS = json.dumps(
    {"notetaker": {"description": "Takes notes.", "prompt": "You take notes.", "memory": "project"}}
)
BUILD = "# Build\nThe build needs GO=1.\n"
OLD = "# Release freeze (temporary)\nNo merges until 2020-01-31; lifted since.\n"


def _memory(root: Path) -> Path:
    """A notetaker's memory with an index over its caps, a duplicate note and a stale one."""
    where = memory_dir("project", "notetaker", root)
    where.mkdir(parents=True)
    (where / "build.md").write_text(BUILD)
    (where / "build-again.md").write_text(BUILD)  # the same fact, twice
    (where / "freeze.md").write_text(OLD)
    lines = ["- build: see build.md", "- build: see build-again.md", "- freeze: see freeze.md"]
    lines += [f"- the build needs GO=1 (seen in run {n})" for n in range(MAX_LINES + 50)]
    (where / "MEMORY.md").write_text("\n".join(lines) + "\n")
    return where


def _is_dream(request: ModelRequest) -> bool:
    return request.system.startswith("You are dreaming")


def _consolidation(where: Path) -> list[Turn]:
    """What a dream over ``_memory`` does, step by step."""
    index = str(where / "MEMORY.md")
    new_index = "- build: see build.md (GO=1)\n"
    return [
        Turn(tool_calls=(ToolCall("MemoryList", {}), ToolCall("MemoryRead", {"file_path": index}))),
        Turn(
            tool_calls=(
                ToolCall(
                    "MemoryWrite",
                    {"file_path": index, "content": new_index, "reason": "merged 250 duplicates"},
                ),
            )
        ),
        Turn(
            tool_calls=(
                ToolCall("MemoryRead", {"file_path": str(where / "build-again.md")}),
                ToolCall("MemoryRead", {"file_path": str(where / "freeze.md")}),
                ToolCall(
                    "MemoryDelete",
                    {"file_path": str(where / "build-again.md"), "reason": "same as build.md"},
                ),
                ToolCall(
                    "MemoryDelete",
                    {"file_path": str(where / "freeze.md"), "reason": "stale: lifted in 2020"},
                ),
            )
        ),
        Turn(text="Merged the build notes, dropped the lifted freeze."),
    ]


def _scripted(steps: list[Any]) -> FunctionModel:
    """The dream answers with ``steps`` in order (a step may be awaitable); the main: 'main'."""
    left = list(steps)

    async def respond(request: ModelRequest) -> Turn | str:
        if not _is_dream(request):
            return "main"
        step = left.pop(0)
        return await step() if callable(step) else step

    return FunctionModel(respond)


async def test_a_dream_merges_duplicates_drops_stale_notes_and_lists_its_changes(
    tmp_path: Path,
) -> None:
    where = _memory(tmp_path)
    async with harness(tmp_path, _scripted(_consolidation(where)), agents=AGENTS) as h:
        task_id = h.dream()
        assert task_id.startswith("d")
        state = await h.runtime.wait(task_id, 30 * TIME_FACTOR)
        assert state.status == TaskStatus.COMPLETED
        index = (where / "MEMORY.md").read_text()
        assert index.count("\n") <= MAX_LINES and len(index) <= MAX_CHARS
        assert index == "- build: see build.md (GO=1)\n"
        assert sorted(p.name for p in where.iterdir()) == ["MEMORY.md", "build.md"]
        assert (where / "build.md").read_text() == BUILD  # kept: nothing justified its removal
        result = kind_of(state).result(state) or ""
        assert result.startswith("Changes (3):")
        assert f"rewrote {where / 'MEMORY.md'}" in result and "merged 250 duplicates" in result
        assert f"removed {where / 'freeze.md'}" in result and "stale: lifted in 2020" in result
        assert "Merged the build notes" in result
        # The output file has the change list, and the text of what was removed.
        output = Path(state.output_file).read_text()
        assert "same as build.md" in output and "No merges until 2020-01-31" in output
        assert kind_of(state).status_note(state) == " 3 changed"
        # Housekeeping: no notification for the model, nothing left in the mailbox.
        assert h.runtime.drain() == []
        await h.end()


async def test_a_dream_killed_mid_run_leaves_every_file_whole(tmp_path: Path) -> None:
    where = _memory(tmp_path)
    before = {p.name: p.read_bytes() for p in where.iterdir()}
    steps: list[Any] = _consolidation(where)[:2]  # list and read, then rewrite the index
    asked, forever = asyncio.Event(), asyncio.Event()

    async def blocked() -> Turn:
        asked.set()
        await forever.wait()  # killed here, between two writes of the dream
        return Turn(text="never")

    steps.append(blocked)
    async with harness(tmp_path, _scripted(steps), agents=AGENTS) as h:
        task_id = h.dream()
        await asyncio.wait_for(asked.wait(), 30 * TIME_FACTOR)
        state = await h.runtime.kill(task_id)
        assert state.status == TaskStatus.KILLED
        after = {p.name: p.read_bytes() for p in where.iterdir()}
        assert set(after) == set(before)  # nothing removed yet, nothing half-made left
        assert after["MEMORY.md"] == b"- build: see build.md (GO=1)\n"  # as it ended
        for name in ("build.md", "build-again.md", "freeze.md"):
            assert after[name] == before[name]  # as it was
        assert not list(where.rglob(f"*{TEMP_SUFFIX}"))
        result = kind_of(state).result(state) or ""
        assert "Changes (1):" in result and "[stopped before it finished]" in result
        assert h.dreamer.running() is None
        await h.end()


async def test_one_dream_at_a_time_and_none_without_memory(tmp_path: Path) -> None:
    gate = asyncio.Event()

    async def hold() -> Turn:
        await gate.wait()
        return Turn(text="nothing to do")

    async with harness(tmp_path, _scripted([hold]), agents=AGENTS) as h:
        with pytest.raises(UsageError, match="No agent memory to tidy"):
            h.dream()
        _memory(tmp_path)
        first = h.dream()
        with pytest.raises(UsageError, match=f"already at work \\({first}\\)"):
            h.dream()
        gate.set()
        state = await h.runtime.wait(first, 30 * TIME_FACTOR)
        assert state.status == TaskStatus.COMPLETED
        assert "No changes." in (kind_of(state).result(state) or "")
        await h.end()


async def test_a_dream_stops_at_its_turn_limit_and_at_its_token_budget(tmp_path: Path) -> None:
    where = _memory(tmp_path)
    listing = Turn(tool_calls=(ToolCall("MemoryList", {}),))
    settings = json.dumps({"dreamMaxTurns": 2})
    async with harness(tmp_path, _scripted([listing] * 5), agents=AGENTS, settings=settings) as h:
        state = await h.runtime.wait(h.dream(), 30 * TIME_FACTOR)
        assert state.status == TaskStatus.COMPLETED
        assert "[stopped at its turn limit (2)]" in (kind_of(state).result(state) or "")
        await h.end()
    costly = Turn(tool_calls=(ToolCall("MemoryList", {}),), usage={"input_tokens": 900})
    async with harness(
        tmp_path,
        _scripted([costly] * 5),
        agents=AGENTS,
        settings=json.dumps({"dreamMaxTokens": 1000}),
    ) as h:
        state = await h.runtime.wait(h.dream(), 30 * TIME_FACTOR)
        assert state.status == TaskStatus.KILLED
        assert "token" in (state.stopped_reason or "")
        await h.end()
    assert (where / "MEMORY.md").exists()


async def test_an_idle_session_dreams_once_with_auto_dream_on(tmp_path: Path) -> None:
    _memory(tmp_path)
    settings = json.dumps({"autoDream": True, "dreamIdleSeconds": 0.05})
    steps = [Turn(text="tidy already"), Turn(text="again")]
    async with harness(tmp_path, _scripted(steps), agents=AGENTS, settings=settings) as h:
        h.session_idle(True)

        def dreams() -> list[Any]:
            return h.runtime.list(types=[TaskType.DREAM], include_evicted=True)

        await wait_until(lambda: len(dreams()) == 1, 10 * TIME_FACTOR, "an idle dream")
        state = await h.runtime.wait(dreams()[0].id, 30 * TIME_FACTOR)
        assert state.status == TaskStatus.COMPLETED
        assert kind_of(state).event_fields(state)["dream"]["trigger"] == "idle"  # type: ignore[index]
        h.session_idle(True)  # idle again with no turn between: no second dream
        h.session_idle(False)  # a turn starts and is interrupted at once: none either
        await asyncio.sleep(0)
        assert len(dreams()) == 1
        await h.end()


async def test_an_idle_dream_waits_while_an_agent_works(tmp_path: Path) -> None:
    _memory(tmp_path)
    settings = json.dumps({"autoDream": True, "dreamIdleSeconds": 0.05})
    async with harness(
        tmp_path, _scripted([Turn(text="tidy")]), agents=AGENTS, settings=settings
    ) as h:
        agent = AgentTaskState(id=h.runtime.new_id(TaskType.LOCAL_AGENT), status=TaskStatus.RUNNING)
        h.runtime.register(agent.replace(owner=h.session_id))
        h.session_idle(True)

        def dreams() -> list[Any]:
            return h.runtime.list(types=[TaskType.DREAM], include_evicted=True)

        # Put off at least twice while the agent works: the timer is armed again each time.
        await wait_until(lambda: h.dreamer._timer is not None, 10 * TIME_FACTOR, "armed")
        first = h.dreamer._timer
        await wait_until(lambda: h.dreamer._timer is not first, 10 * TIME_FACTOR, "re-armed")
        assert dreams() == []
        h.runtime.update(agent.id, lambda s: s.replace(status=TaskStatus.COMPLETED))
        await wait_until(lambda: len(dreams()) == 1, 10 * TIME_FACTOR, "a dream once it ended")
        await h.runtime.wait(dreams()[0].id, 30 * TIME_FACTOR)
        await h.end()


async def test_without_auto_dream_an_idle_session_never_dreams(tmp_path: Path) -> None:
    _memory(tmp_path)
    async with harness(tmp_path, _scripted([]), agents=AGENTS) as h:
        h.session_idle(True)
        assert h._dreamer is None  # nothing armed, nothing imported for it
        await h.end()


def test_dream_settings_are_checked_by_name() -> None:
    assert DreamSettings.read({}) == DreamSettings(False, 600.0, 30, 200_000)
    with pytest.raises(UsageError, match="autoDream must be true or false, got 'yes'"):
        DreamSettings.read({"autoDream": "yes"})
    with pytest.raises(UsageError, match="dreamMaxTurns must be a whole number above 0"):
        DreamSettings.read({"dreamMaxTurns": 2.5})
    with pytest.raises(UsageError, match="dreamIdleSeconds must be a number above 0, got 0"):
        DreamSettings.read({"dreamIdleSeconds": 0})


# -- the tools' guarantees ---------------------------------------------------------------------


def _scope(tmp_path: Path) -> tuple[MemoryScope, list[Change], Path]:
    where = _memory(tmp_path)
    changes: list[Change] = []
    return MemoryScope([where], changes.append), changes, where


def _ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(runtime=None, owner="d00000000", cwd=tmp_path)  # type: ignore[arg-type]


async def test_the_tools_refuse_what_lies_outside_the_memory(tmp_path: Path) -> None:
    scope, changes, where = _scope(tmp_path)
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (where / "link.md").symlink_to(outside)
    ctx = _ctx(tmp_path)
    for raw in (str(outside), str(where / ".." / "secret.txt"), str(where / "link.md"), "b.md"):
        read = await MemoryRead(scope).call(MemoryReadInput(file_path=raw), ctx)
        assert read.is_error and "secret" not in read.content.replace("secret.txt", "")
        wrote = await MemoryWrite(scope).call(
            MemoryWriteInput(file_path=raw, content="x", reason="test"), ctx
        )
        assert wrote.is_error
    assert outside.read_text() == "secret" and changes == []


async def test_the_index_stays_within_its_caps_and_indexed_notes_stay(tmp_path: Path) -> None:
    scope, changes, where = _scope(tmp_path)
    ctx, index = _ctx(tmp_path), str(where / "MEMORY.md")
    before = (where / "MEMORY.md").read_bytes()
    too_long = "".join(f"- line {n}\n" for n in range(MAX_LINES + 1))
    result = await MemoryWrite(scope).call(
        MemoryWriteInput(file_path=index, content=too_long, reason="r"), ctx
    )
    assert result.is_error and f"at most {MAX_LINES} lines" in result.content
    assert (where / "MEMORY.md").read_bytes() == before
    await MemoryRead(scope).call(MemoryReadInput(file_path=str(where / "build.md")), ctx)
    for path, why in ((index, "never removed"), (str(where / "build.md"), "still names it")):
        result = await MemoryDelete(scope).call(
            MemoryDeleteInput(file_path=path, reason="tidy"), ctx
        )
        assert result.is_error and why in result.content
    blank = await MemoryDelete(scope).call(
        MemoryDeleteInput(file_path=str(where / "freeze.md"), reason="   "), ctx
    )
    assert blank.is_error and "give the reason" in blank.content
    assert (where / "build.md").exists() and (where / "freeze.md").exists() and changes == []


def test_a_killed_process_s_temporary_files_are_swept(tmp_path: Path) -> None:
    where = _memory(tmp_path)
    left = where / f".MEMORY.md.abc{TEMP_SUFFIX}"
    left.write_text("half")
    assert sweep_leftovers([where]) == [left] and not left.exists()
    assert memory_targets is not None  # the module's public names import without a session


class _Host:
    """The REPL's side of a command, as a test's: what it says."""

    def __init__(self, harness: Any) -> None:
        self.harness = harness
        self.busy = False
        self.said: list[tuple[str, str]] = []

    def say(self, text: str, style: str = "info") -> None:
        self.said.append((text, style))


async def test_the_repl_s_dream_command_starts_one_or_says_why_not(tmp_path: Path) -> None:
    from taskloom.repl.commands import run_command

    gate = asyncio.Event()

    async def hold() -> Turn:
        await gate.wait()
        return Turn(text="done")

    _memory(tmp_path)
    async with harness(tmp_path, _scripted([hold]), agents=AGENTS) as h:
        host = _Host(h)
        await run_command(host, "/dream")  # type: ignore[arg-type]
        await run_command(host, "/dream")  # type: ignore[arg-type]
        (started, style), (refused, error) = host.said
        task_id = started.split("(")[1].split(")")[0]
        assert style == "info" and started.startswith("Dreaming in the background (d")
        assert error == "error" and f"/dream: A dream is already at work ({task_id})" in refused
        gate.set()
        state = await h.runtime.wait(task_id, 30 * TIME_FACTOR)
        assert state.status == TaskStatus.COMPLETED
        await h.end()


async def test_a_file_is_changed_only_as_the_dream_read_it(tmp_path: Path) -> None:
    scope, changes, where = _scope(tmp_path)
    ctx, note = _ctx(tmp_path), where / "freeze.md"
    write, delete = MemoryWrite(scope), MemoryDelete(scope)
    unread = await write.call(
        MemoryWriteInput(file_path=str(note), content="merged", reason="merge"), ctx
    )
    assert unread.is_error and "read it first (MemoryRead)" in unread.content
    await MemoryRead(scope).call(MemoryReadInput(file_path=str(note)), ctx)
    note.write_text(OLD + "An agent added this meanwhile.\n")  # after the dream read it
    for result in (
        await write.call(MemoryWriteInput(file_path=str(note), content="x", reason="r"), ctx),
        await delete.call(MemoryDeleteInput(file_path=str(note), reason="stale"), ctx),
    ):
        assert result.is_error and "changed since it was read" in result.content
    assert "added this meanwhile" in note.read_text() and changes == []
    # A new file needs no read; once written, the dream may rewrite it.
    new = str(where / "merged.md")
    for content in ("one", "two"):
        done = await write.call(MemoryWriteInput(file_path=new, content=content, reason="r"), ctx)
        assert not done.is_error, done.content
    assert [c.action for c in changes] == ["created", "rewrote"]
