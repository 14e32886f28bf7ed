"""The composition root and the public API: Harness, Options, run(), @tool, and the
documented examples, run as they are written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import taskloom
from helpers import run_python
from taskloom.cli.print_mode import init_event
from taskloom.errors import SettingsError
from taskloom.testing import ScriptedModel, ToolCall, Turn

ROOT = Path(__file__).resolve().parent.parent


def code_blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", path.read_text(), re.S | re.M)


def test_the_readme_example_runs_as_written(tmp_path: Path) -> None:
    readme = ROOT / "README.md"
    (turns,) = code_blocks(readme, "yaml")
    (code,) = code_blocks(readme, "python")
    (tmp_path / "turns.yaml").write_text(turns)
    proc = run_python(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "tool: hello from a tool",
        "answer: The command printed its greeting.",
    ]


def test_the_library_example_with_a_tool_and_a_background_agent_runs(tmp_path: Path) -> None:
    doc = ROOT / "docs" / "library.md"
    (turns,) = code_blocks(doc, "yaml")
    example = next(c for c in code_blocks(doc, "python") if "@taskloom.tool" in c)
    (tmp_path / "turns.yaml").write_text(turns)
    (tmp_path / "README.md").write_text("one two three four\n")
    proc = run_python(example, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("notified: a")
    assert lines[1] == "README.md has 4 words, and the helper says it is a short list of numbers."
    (task,) = lines[2:]
    assert task.split()[1:] == ["local_agent", "completed"]
    assert task.split()[0] == lines[0].removeprefix("notified: ")


def test_the_runtime_example_runs(tmp_path: Path) -> None:
    doc = ROOT / "docs" / "library.md"
    example = next(c for c in code_blocks(doc, "python") if "run_shell" in c)
    proc = run_python(example, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "<status>completed</status>" in proc.stdout
    assert 'Background command "echo built" completed (exit code 0)' in proc.stdout


def test_the_public_names_are_exported_and_documented() -> None:
    for name in taskloom.__all__:
        value = getattr(taskloom, name)
        if name != "__version__" and name != "EngineEvent":
            assert (value.__doc__ or "").strip(), f"taskloom.{name} has no docstring"
    assert set(taskloom.__all__) == {"__version__", *taskloom._EXPORTS}
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = taskloom.nope  # type: ignore[attr-defined]


def test_importing_taskloom_imports_nothing_heavy() -> None:
    code = (
        "import sys, taskloom; heavy = [m for m in ('pydantic', 'httpx', 'taskloom.engine') "
        "if m in sys.modules]; print(heavy)"
    )
    proc = run_python(code, check=True)
    assert proc.stdout.strip() == "[]"


# -- @taskloom.tool ------------------------------------------------------------------------------


@taskloom.tool
def add(a: int, b: int = 2) -> int:
    """Add two numbers.

    Takes its time.

    Args:
        a: The first number.
        b: The second number, which has a
            default.
    """
    return a + b


@taskloom.tool(name="where", kind="read")
async def where_am_i(ctx: taskloom.ToolContext, detail: bool = False) -> str:
    """Say where the call runs."""
    return f"{ctx.cwd}:{detail}"


@taskloom.tool
def broken(text: str) -> str:
    """Always fails."""
    raise ValueError(f"cannot handle {text}")


def test_a_function_tool_has_a_closed_schema_from_its_signature_and_docstring() -> None:
    assert add.name == "add"
    assert add.description == "Add two numbers."
    assert add.input_schema() == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "The first number."},
            "b": {
                "type": "integer",
                "default": 2,
                "description": "The second number, which has a default.",
            },
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    assert where_am_i.name == "where" and where_am_i.kind == "read"
    assert "ctx" not in where_am_i.input_schema()["properties"]


async def test_function_tools_validate_run_and_report_errors(tmp_path: Path) -> None:
    from taskloom.tasks.runtime import TaskRuntime

    async with TaskRuntime() as rt:
        ctx = taskloom.ToolContext(rt, rt.session_id, tmp_path)
        bad = add.validate({"a": "x", "c": 1})
        assert isinstance(bad, taskloom.ToolResult) and bad.is_error
        assert "a:" in bad.content and "c: unexpected field" in bad.content
        params = add.validate({"a": 40})
        assert (await add.call(params, ctx)).content == "42"
        params = where_am_i.validate({"detail": True})
        assert (await where_am_i.call(params, ctx)).content == f"{tmp_path}:True"
        failed = await broken.call(broken.validate({"text": "this"}), ctx)
        assert failed.is_error and "broken failed: ValueError: cannot handle this" in failed.content


def test_bad_tool_functions_are_refused_when_decorated() -> None:
    with pytest.raises(TypeError, match="needs a type annotation"):

        @taskloom.tool
        def untyped(x) -> str:  # type: ignore[no-untyped-def]
            return str(x)

    with pytest.raises(TypeError, match="must match"):
        taskloom.tool(name="no spaces")(lambda: "x")


# -- Harness -------------------------------------------------------------------------------------


async def test_the_model_calls_a_function_tool_through_the_harness(tmp_path: Path) -> None:
    model = ScriptedModel(
        [Turn(tool_calls=[ToolCall("add", {"a": 1, "b": 1})]), Turn(text="It is 2.")]
    )
    events: list[Any] = []
    async with taskloom.Harness(model=model, cwd=tmp_path, tools=[add]) as h:
        assert "add" in init_event(h)["tools"]
        events = [e async for e in h.run("What is 1 + 1?")]
        await h.end()
    done = [e for e in events if isinstance(e, taskloom.ToolDone)]
    assert [(d.call.name, d.result.content) for d in done] == [("add", "2")]
    assert isinstance(events[-1], taskloom.Finished) and events[-1].result == "It is 2."
    offered = [t.name for t in model.requests[0].tools]
    assert "add" in offered and "Bash" in offered


async def test_run_returns_the_final_answer(tmp_path: Path) -> None:
    model = ScriptedModel([Turn(text="All done.")])
    assert await taskloom.run("go", model=model, cwd=tmp_path) == "All done."


async def test_stop_task_stops_a_background_command(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            Turn(tool_calls=[ToolCall("Bash", {"command": "sleep 60", "run_in_background": True})]),
            Turn(text="Started."),
            Turn(text="It was stopped."),
        ]
    )
    async with taskloom.Harness(model=model, cwd=tmp_path, skip_permissions=True) as h:
        events = h.run("start a long command")
        async for event in events:
            if isinstance(event, taskloom.AssistantTurn) and event.message.text() == "Started.":
                break
        (task,) = h.tasks()
        assert task.status.value == "running"
        stopped = await h.stop_task(task.id)
        assert stopped.status.value == "killed"
        rest = [e async for e in events]
        await h.end()
    assert isinstance(rest[-1], taskloom.Finished) and rest[-1].result == "It was stopped."


async def test_a_harness_that_fails_to_start_holds_nothing_open(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text("{broken")
    harness = taskloom.Harness(model=ScriptedModel([]), cwd=tmp_path)
    with pytest.raises(SettingsError):
        await harness.start()
    with pytest.raises(RuntimeError, match="not started"):
        _ = harness.runtime
    await harness.aclose()  # nothing to undo, and no error


async def test_a_start_that_fails_late_leaves_no_part_of_the_session_behind(
    tmp_path: Path,
) -> None:
    # The schema is checked once the runtime has claimed the session and the agents exist.
    harness = taskloom.Harness(model=ScriptedModel([]), cwd=tmp_path, json_schema={"type": 7})
    with pytest.raises(taskloom.UsageError, match="json-schema"):
        await harness.start()
    assert harness.claimed  # it existed, and was given back
    for part in ("started", "runtime", "session", "model", "policy", "agents", "settings", "tools"):
        with pytest.raises(RuntimeError, match="not started"):
            getattr(harness, part)
    await harness.aclose()  # nothing to undo, and no error


async def test_session_end_hooks_run_once_when_the_harness_closes(tmp_path: Path) -> None:
    import json

    log = tmp_path / "ended.log"
    hook = {"hooks": [{"type": "command", "command": f"echo ended >> {log}"}]}
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(
        json.dumps({"hooks": {"SessionEnd": [hook]}})
    )
    async with taskloom.Harness(model=ScriptedModel([Turn(text="hi")]), cwd=tmp_path) as h:
        _ = [e async for e in h.run("hello")]
    assert log.read_text() == "ended\n"
    await h.end()  # after the close: nothing runs again
    assert log.read_text() == "ended\n"


async def test_session_start_hooks_run_once_a_session_and_say_resume_when_resumed(
    tmp_path: Path,
) -> None:
    import json

    log = tmp_path / "starts.jsonl"
    hooks = {
        "hooks": {
            "SessionStart": [
                {"hooks": [{"type": "command", "command": f"cat >> {log}; echo >> {log}"}]}
            ]
        }
    }
    settings = json.dumps(hooks)
    model = ScriptedModel([Turn(text="one"), Turn(text="two"), Turn(text="three")])
    async with taskloom.Harness(model=model, cwd=tmp_path, settings=settings) as h:
        session = h.session_id
        for prompt in ("first", "second"):
            _ = [e async for e in h.run(prompt)]
    async with taskloom.Harness(
        model=model, cwd=tmp_path, settings=settings, resume=session
    ) as again:
        _ = [e async for e in again.run("third")]
    starts = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert [s["source"] for s in starts] == ["startup", "resume"]
    assert {s["session_id"] for s in starts} == {session}


async def test_a_model_object_passed_in_is_not_closed_and_serves_a_second_harness(
    tmp_path: Path,
) -> None:
    class Counted(ScriptedModel):
        closes = 0

        async def aclose(self) -> None:
            Counted.closes += 1
            await super().aclose()

    model = Counted([Turn(text="one"), Turn(text="two")])
    for prompt in ("first", "second"):
        async with taskloom.Harness(model=model, cwd=tmp_path) as h:
            events = [e async for e in h.run(prompt)]
            assert isinstance(events[-1], taskloom.Finished)
    assert Counted.closes == 0  # the caller's to close
    assert len(model.requests) == 2


async def test_a_session_is_recorded_in_its_own_cwd_so_continue_finds_it_from_anywhere(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    model = ScriptedModel([Turn(text="one"), Turn(text="two")])
    # The process runs elsewhere (the test's cwd): the session is the project's all the same.
    async with taskloom.Harness(model=model, cwd=project) as first:
        _ = [e async for e in first.run("hello")]
        session = first.session_id
    async with taskloom.Harness(model=model, cwd=project, continue_session=True) as again:
        assert again.session_id == session
        _ = [e async for e in again.run("again")]
    assert [m.role for m in model.requests[-1].messages] == ["user", "assistant", "user"]


async def test_session_start_context_waits_for_a_prompt_that_is_recorded(tmp_path: Path) -> None:
    import json

    from taskloom.errors import UserError

    # A word no session id (hex) or path holds: "bad" alone is in one UUID of ~140.
    guard = "grep -q 'a bad prompt' && { echo refused >&2; exit 2; }; exit 0"
    hooks = {
        "hooks": {
            "SessionStart": [{"hooks": [{"type": "command", "command": "echo CONTEXT-X"}]}],
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": guard}]}],
        }
    }
    model = ScriptedModel([Turn(text="ok")])
    async with taskloom.Harness(model=model, cwd=tmp_path, settings=json.dumps(hooks)) as h:
        with pytest.raises(UserError, match="refused"):
            _ = [e async for e in h.run("a bad prompt")]
        _ = [e async for e in h.run("a good prompt")]
    [request] = model.requests
    sent = request.messages[-1].content[0]
    assert "a good prompt" in sent.text and "CONTEXT-X" in sent.text  # type: ignore[union-attr]


_TURN_WRITES = """
import asyncio
from pathlib import Path
import taskloom
from taskloom import _dataclass
from taskloom.testing import ScriptedModel, ToolCall, Turn

async def main() -> None:
    work = Path.cwd()
    (work / "a.txt").write_text("hello\\n")
    model = ScriptedModel([
        Turn(text="Reading", tool_calls=[ToolCall("Read", {"file_path": str(work / "a.txt")})]),
        Turn(text="Done."),
    ])
    async with taskloom.Harness(model=model, cwd=work) as h:
        if WHEN == "ahead":
            h.write_turn_records()
        before = set(_dataclass._WAITING)
        [e async for e in h.run("go")]
        written = before - set(_dataclass._WAITING)
        print(len(written), sorted(c.__qualname__ for c in written)[:3])
        await h.end()

asyncio.run(main())
"""


@pytest.mark.parametrize("when", ["ahead", "in the turn"])
def test_the_records_a_turn_makes_can_be_written_ahead(tmp_path: Path, when: str) -> None:
    # A fresh interpreter: a turn with a tool call writes its record classes (their methods
    # are written on first use), unless write_turn_records wrote them all before it.
    out = run_python(f"WHEN = {when!r}\n" + _TURN_WRITES, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    count = int(out.stdout.split()[0])
    assert count == 0 if when == "ahead" else count >= 10, out.stdout
