"""``!`command``` in custom commands and skills, and a skill's ``model`` for the Skill tool.

Real command and skill files in a real git repository, a real session, permission policy and
shell; only the model is scripted (it records what it was shown).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import taskloom
from helpers import clean_env
from taskloom.messages import Message, TextBlock
from taskloom.models.base import ModelRequest
from taskloom.testing import FunctionModel, ScriptedModel, ToolCall, Turn
from taskloom.tools import prompt_shell
from taskloom.tools.prompt_shell import PATTERN, PromptShellError

STATUS = """\
---
description: Commit what changed
allowed-tools: Bash(git status:*), Bash(echo:*)
---
## Context
- Status: !`git status --short`
- Topic: !`echo "$ARGUMENTS"`

```!
echo one
echo two >&2
```

Write a commit message for the changes above.
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    commands = root / ".claude" / "commands"
    commands.mkdir(parents=True)
    (commands / "status.md").write_text(STATUS)
    (commands / "touchy.md").write_text("Marked: !`touch marker.txt`\n")
    (commands / "broken.md").write_text(
        "---\nallowed-tools: Bash(ls:*)\n---\nListing: !`ls no-such-dir`\n"
    )
    (commands / "slow.md").write_text("---\nallowed-tools: Bash(sleep:*)\n---\n!`sleep 30`\n")
    (commands / "big.md").write_text("---\nallowed-tools: Bash(seq:*)\n---\n!`seq 1 100000`\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "new.txt").write_text("x\n")
    return root


def texts(message: Message) -> list[str]:
    return [b.text for b in message.content if isinstance(b, TextBlock)]


def recording() -> tuple[list[ModelRequest], FunctionModel]:
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> str:
        seen.append(request)
        return "ok"

    return seen, FunctionModel(respond)


async def test_a_command_s_shell_commands_are_replaced_by_their_output(project: Path) -> None:
    seen, model = recording()
    async with taskloom.Harness(model=model, cwd=project) as h:
        [e async for e in h.run("/status the parser")]
        await h.end()
    shown = texts(seen[0].messages[0])[1]
    assert shown.startswith(
        "## Context\n- Status: ?? .claude/\n?? new.txt\n- Topic: the parser\n\n"
    )
    # The block is one script; its stderr comes with its stdout, as written.
    assert "\n\none\ntwo\n\nWrite a commit message" in shown
    assert "!`" not in shown and "```" not in shown
    # Its shell tasks ended before the turn: no notification of them follows.
    assert len(seen) == 1


async def test_a_command_the_rules_do_not_allow_is_refused_and_nothing_is_sent(
    project: Path,
) -> None:
    seen, model = recording()
    async with taskloom.Harness(model=model, cwd=project) as h:
        with pytest.raises(PromptShellError) as refused:
            [e async for e in h.run("/touchy")]
        await h.end()
    assert str(refused.value).startswith(
        'Shell command permission check failed for pattern "!`touch marker.txt`": '
        "This command requires approval (allow it with Bash(touch:*) in the allowed-tools of "
    )
    assert seen == [] and not (project / "marker.txt").exists()


async def test_the_session_s_rules_allow_a_command_too(project: Path) -> None:
    seen, model = recording()
    async with taskloom.Harness(model=model, cwd=project, allowed_tools=["Bash(touch:*)"]) as h:
        [e async for e in h.run("/touchy")]
        await h.end()
    assert texts(seen[0].messages[0])[1] == "Marked: "
    assert (project / "marker.txt").exists()


async def test_a_deny_rule_refuses_what_allowed_tools_allow(project: Path) -> None:
    seen, model = recording()
    async with taskloom.Harness(model=model, cwd=project, disallowed_tools=["Bash(echo:*)"]) as h:
        with pytest.raises(PromptShellError) as denied:
            [e async for e in h.run("/status x")]
        await h.end()
    assert str(denied.value) == (
        'Shell command permission check failed for pattern "!`echo "x"`": Permission to use '
        "Bash has been denied by the rule Bash(echo:*) (--disallowedTools)."
    )
    assert seen == []


async def test_a_failing_command_fails_the_command_with_its_output(project: Path) -> None:
    seen, model = recording()
    async with taskloom.Harness(model=model, cwd=project) as h:
        with pytest.raises(PromptShellError) as failed:
            [e async for e in h.run("/broken")]
        await h.end()
    message = str(failed.value)
    assert message.startswith('Shell command failed for pattern "!`ls no-such-dir`": ls: ')
    assert "No such file or directory" in message and message.endswith("[Exit code 2]")
    assert seen == []


async def test_a_command_past_its_timeout_is_killed(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prompt_shell, "TIMEOUT_S", 0.5)
    seen, model = recording()
    async with taskloom.Harness(model=model, cwd=project) as h:
        with pytest.raises(PromptShellError) as slow:
            [e async for e in h.run("/slow")]
        (task,) = [t for t in h.runtime.list() if getattr(t, "command", None) == "sleep 30"]
        await h.end()
    assert str(slow.value) == (
        'Shell command interrupted for pattern "!`sleep 30`": [Command timed out after 0.5s]'
    )
    assert task.status.value == "killed" and seen == []


async def test_a_long_output_is_cut_at_the_bash_limit(project: Path) -> None:
    seen, model = recording()
    settings = json.dumps({"bashMaxOutputChars": 1000})
    async with taskloom.Harness(model=model, cwd=project, settings=settings) as h:
        [e async for e in h.run("/big")]
        await h.end()
    shown = texts(seen[0].messages[0])[1]
    head, _, note = shown.partition("\n[output cut at 1,000 characters; all of it is in ")
    assert len(head) == 1000 and head.startswith("1\n2\n3\n") and note.endswith("]")
    assert Path(note[:-1]).read_text().endswith("\n100000\n")


def test_which_text_is_a_shell_command() -> None:
    def found(text: str) -> list[str]:
        return [m.group(0) for m in PATTERN.finditer(text)]

    assert found("a !`date` b\n!`pwd`") == ["!`date`", "!`pwd`"]
    # Not after a word, a backtick or ``$`` (Markdown code spans, ``$!``).
    assert found("- `!`, `?` and a!`b` and $!`c`") == []
    assert found("```!\nls\n```") == ["```!\nls\n```"]


SKILL = """\
---
description: Report the branch. Use when asked about the branch.
allowed-tools: Bash(git branch:*)
model: {model}
---
Branch: !`git branch --show-current`
"""


def write_skill(project: Path, model: str) -> None:
    path = project / ".claude" / "skills" / "branch" / "SKILL.md"
    path.parent.mkdir(parents=True)
    path.write_text(SKILL.format(model=model))


async def test_the_skill_tool_runs_its_commands_and_its_model_answers_the_turn(
    project: Path, tmp_path: Path
) -> None:
    subprocess.run(["git", "-C", str(project), "checkout", "-q", "-b", "topic"], check=True)
    skill_turns = tmp_path / "skill-turns.json"
    skill_turns.write_text(json.dumps(["On topic (the skill's model)."]))
    write_skill(project, f"scripted:{skill_turns}")
    main = ScriptedModel(
        [Turn(tool_calls=[ToolCall("Skill", {"skill": "branch"})]), "Main model again."]
    )
    async with taskloom.Harness(model=main, cwd=project, allowed_tools=["Skill"]) as h:
        first = [e async for e in h.run("which branch?")]
        second = [e async for e in h.run("and now?")]
        await h.end()
    (done,) = [e for e in first if isinstance(e, taskloom.ToolDone)]
    assert not done.result.is_error
    assert done.result.content.endswith("Branch: topic")
    assert done.result.data["model"] == f"scripted:{skill_turns}"
    # The request after the Skill call went to the skill's model; the next turn to the main.
    assert len(main.requests) == 2
    assert texts(main.requests[1].messages[-1]) == ["and now?"]
    assert [e.result for e in first if isinstance(e, taskloom.Finished)] == [
        "On topic (the skill's model)."
    ]
    assert [e.result for e in second if isinstance(e, taskloom.Finished)] == ["Main model again."]


async def test_a_skill_whose_command_is_refused_is_an_error_and_grants_nothing(
    project: Path,
) -> None:
    path = project / ".claude" / "skills" / "sneaky" / "SKILL.md"
    path.parent.mkdir(parents=True)
    path.write_text("---\ndescription: Sneaky\nallowed-tools: Read\n---\n!`touch marker.txt`\n")
    main = ScriptedModel([Turn(tool_calls=[ToolCall("Skill", {"skill": "sneaky"})]), "ok"])
    async with taskloom.Harness(model=main, cwd=project, allowed_tools=["Skill"]) as h:
        events = [e async for e in h.run("go")]
        granted = h.policy.granted
        await h.end()
    (done,) = [e for e in events if isinstance(e, taskloom.ToolDone)]
    assert done.result.is_error and done.result.content == (
        "<tool_use_error>Shell command permission check failed for pattern "
        '"!`touch marker.txt`": This command requires approval (allow it with Bash(touch:*) '
        f"in the allowed-tools of {path} or a permissions.allow rule)</tool_use_error>"
    )
    assert granted == () and not (project / "marker.txt").exists()


async def test_a_skill_whose_model_cannot_be_made_is_an_error(project: Path) -> None:
    write_skill(project, "nosuchprovider:model")
    main = ScriptedModel([Turn(tool_calls=[ToolCall("Skill", {"skill": "branch"})]), "ok"])
    async with taskloom.Harness(model=main, cwd=project, allowed_tools=["Skill"]) as h:
        events = [e async for e in h.run("go")]
        await h.end()
    (done,) = [e for e in events if isinstance(e, taskloom.ToolDone)]
    assert done.result.is_error and "model nosuchprovider:model" in done.result.content
    assert len(main.requests) == 2  # the turn went on with the main model


@pytest.mark.e2e
def test_print_mode_says_why_a_command_was_refused(project: Path, tmp_path: Path) -> None:
    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps(["never asked"]))
    proc = subprocess.run(
        [sys.executable, "-m", "taskloom", "-p", "/touchy", "--model", f"scripted:{turns}"],
        cwd=project, env=clean_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert 'Shell command permission check failed for pattern "!`touch marker.txt`"' in (
        proc.stderr
    )
    assert "never asked" not in proc.stdout and not (project / "marker.txt").exists()


async def test_a_command_s_model_answers_its_turn_only(project: Path, tmp_path: Path) -> None:
    turns = tmp_path / "command-turns.json"
    turns.write_text(json.dumps(["From the command's model."]))
    (project / ".claude" / "commands" / "other.md").write_text(
        f"---\nmodel: scripted:{turns}\n---\nSay hello.\n"
    )
    main = ScriptedModel(["From the main model."])
    async with taskloom.Harness(model=main, cwd=project) as h:
        first = [e async for e in h.run("/other")]
        second = [e async for e in h.run("hello")]
        await h.end()
    assert [e.result for e in first if isinstance(e, taskloom.Finished)] == [
        "From the command's model."
    ]
    assert [e.result for e in second if isinstance(e, taskloom.Finished)] == [
        "From the main model."
    ]
    assert len(main.requests) == 1


def test_a_model_chosen_otherwise_during_the_turn_stays(tmp_path: Path) -> None:
    from taskloom.models.switch import ModelSwitch

    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps(["x"]))
    base, other = ScriptedModel(["a"]), ScriptedModel(["b"])
    switch = ModelSwitch(base)
    switch.choose_for_turn(f"scripted:{turns}", {})
    assert switch.current is not base
    switch.end_turn()
    assert switch.current is base
    switch.choose_for_turn(f"scripted:{turns}", {})
    switch.use(other)  # the program's set_model, or the fallback, during the turn
    switch.end_turn()
    assert switch.current is other
