"""The Skill tool through a real session: listed, loaded, and its allowed-tools holding.

Only the model is scripted; the skill files, the permission gate, the policy and Bash are real.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import taskloom
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools.base import generated_schema, input_key
from taskloom.tools.skill import SkillTool

STAMP = """\
---
name: stamp
description: Stamp a file with today's mark. Use when the user asks to stamp.
allowed-tools: Bash(touch:*)
---
# Stamp

Run `touch $ARGUMENTS` and report it.
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    skill = root / ".claude" / "skills" / "stamp" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text(STAMP)
    notes = root / ".claude" / "skills" / "notes" / "SKILL.md"
    notes.parent.mkdir(parents=True)
    notes.write_text("---\ndescription: How we write notes\n---\nWrite notes in NOTES.md.\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def done(events: list[Any]) -> list[tuple[str, str, bool]]:
    return [
        (e.call.name, e.result.content, e.result.is_error)
        for e in events
        if isinstance(e, taskloom.ToolDone)
    ]


async def session(project: Path, turns: list[Any], **options: Any) -> tuple[list[Any], Any]:
    model = ScriptedModel(turns)
    async with taskloom.Harness(model=model, cwd=project, **options) as h:
        events = [e async for e in h.run("stamp a.txt")]
        granted = h.policy.granted
        await h.end()
    return events, (model, granted)


async def test_a_skill_is_listed_loaded_and_its_allowed_tools_hold(project: Path) -> None:
    turns = [
        Turn(tool_calls=[ToolCall("Skill", {"skill": "stamp", "args": "a.txt"})]),
        Turn(tool_calls=[ToolCall("Bash", {"command": "touch a.txt"})]),
        "Stamped.",
    ]
    # Allowed to load the skill (it grants a tool, so it asks); Bash is not allowed otherwise.
    events, (model, granted) = await session(project, turns, allowed_tools=["Skill(stamp)"])
    listed = {t.name: t for t in model.requests[0].tools}["Skill"]
    assert "- notes: How we write notes" in listed.description
    assert "- stamp: Stamp a file with today's mark." in listed.description
    assert "Write notes in NOTES.md" not in listed.description  # bodies load on invocation
    (skill, bash) = done(events)
    base = project / ".claude" / "skills" / "stamp"
    assert skill[0] == "Skill" and not skill[2]
    assert skill[1].startswith(f"Launching skill: stamp\n\nBase directory for this skill: {base}")
    assert "Run `touch a.txt` and report it." in skill[1]
    assert bash == ("Bash", bash[1], False)
    assert (project / "a.txt").exists()
    assert granted == ()  # ended with the turn


async def test_without_the_skill_its_tools_still_ask(project: Path) -> None:
    turns = [Turn(tool_calls=[ToolCall("Bash", {"command": "touch b.txt"})]), "No."]
    events, _ = await session(project, turns)
    ((name, text, is_error),) = done(events)
    assert name == "Bash" and is_error and "non-interactive" in text
    assert not (project / "b.txt").exists()


async def test_a_skill_that_grants_tools_asks_and_a_deny_rule_refuses(project: Path) -> None:
    turns = [
        Turn(tool_calls=[ToolCall("Skill", {"skill": "stamp"})]),
        Turn(tool_calls=[ToolCall("Skill", {"skill": "notes"})]),
        Turn(tool_calls=[ToolCall("Skill", {"skill": "nope"})]),
        "ok",
    ]
    events, _ = await session(project, turns, disallowed_tools=["Skill(notes)"])
    stamp, notes, nope = done(events)
    assert stamp[2] and 'Allow it with --allowedTools "Skill' in stamp[1]
    assert notes[2] and "Skill(notes)" in notes[1]
    assert nope == ("Skill", "<tool_use_error>Unknown skill: nope</tool_use_error>", True)


async def test_a_skill_granting_nothing_runs_without_asking(project: Path) -> None:
    turns = [Turn(tool_calls=[ToolCall("Skill", {"skill": "/notes"})]), "ok"]
    events, _ = await session(project, turns)
    ((name, text, is_error),) = done(events)
    assert name == "Skill" and not is_error and text.endswith("Write notes in NOTES.md.")


async def test_no_skill_tool_without_skills(tmp_path: Path) -> None:
    model = ScriptedModel(["hi"])
    async with taskloom.Harness(model=model, cwd=tmp_path) as h:
        assert "Skill" not in [t.name for t in h.tools]
        await h.end()


def test_the_static_schema_is_the_generated_one() -> None:
    assert SkillTool.static_schema is not None
    key, schema = SkillTool.static_schema
    assert key == input_key(SkillTool)
    assert json.dumps(schema) == json.dumps(generated_schema(SkillTool.Input))


async def test_an_agent_preloads_its_definitions_skills(project: Path) -> None:
    agent = project / ".claude" / "agents" / "scribe.md"
    agent.parent.mkdir(parents=True)
    agent.write_text(
        "---\nname: scribe\ndescription: Writes notes\nskills: [notes, missing]\n---\nYou write.\n"
    )
    model = ScriptedModel(
        [
            Turn(
                tool_calls=[
                    ToolCall(
                        "Agent",
                        {"description": "d", "prompt": "Note it.", "subagent_type": "scribe"},
                    )
                ]
            ),
            "ok",
        ],
        subagents={"scribe": "Noted."},
    )
    async with taskloom.Harness(model=model, cwd=project, skip_permissions=True) as h:
        [e async for e in h.run("go")]
        await h.end()
    (first,) = model.agent_requests
    text = json.dumps(first.messages[0].wire())
    base = project / ".claude" / "skills" / "notes"
    assert f"Base directory for this skill: {base}" in text
    assert text.index("Write notes in NOTES.md.") < text.index("Note it.")


def test_the_coordinator_is_told_which_skills_its_workers_can_load() -> None:
    from taskloom.agents.coordinator import worker_context

    context = worker_context(["Bash", "Skill"], [], ["stamp", "notes"])
    assert context.splitlines()[-1] == (
        "Skills available to workers (the Skill tool loads them): notes, stamp"
    )
    assert "Skills" not in worker_context(["Bash"], [], ["stamp"])  # nothing to load them with


async def test_a_skill_s_grants_are_its_agent_s_alone(project: Path) -> None:
    turns = [
        Turn(tool_calls=[ToolCall("Skill", {"skill": "stamp", "args": "a.txt"})]),
        Turn(tool_calls=[ToolCall("Agent", {"description": "d", "prompt": "touch sub.txt"})]),
        Turn(tool_calls=[ToolCall("Bash", {"command": "touch sub.txt"})]),  # the subagent's
        "sub done",
        Turn(tool_calls=[ToolCall("Bash", {"command": "touch main.txt"})]),  # the main thread's
        "main done",
    ]
    events, _ = await session(project, turns, allowed_tools=["Skill(stamp)"])
    # The subagent has no grant of the main thread's turn (headless: refused, not asked)...
    assert not (project / "sub.txt").exists()
    # ...and its end did not take the main thread's grant away.
    assert (project / "main.txt").exists()
    assert [name for name, _, error in done(events) if error] == []  # the Agent call ended well
