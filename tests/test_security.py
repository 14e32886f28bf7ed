"""Attempts to slip past permissions, settings layering and file tools."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from taskloom.permissions import PermissionPolicy, PermissionRequest, parse_rule
from taskloom.settings import load_settings
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tools.base import ToolContext
from taskloom.tools.grep import Grep
from taskloom.tools.read import Read


def bash(command: str, allow: tuple[str, ...] = (), deny: tuple[str, ...] = ()) -> str:
    rules = [parse_rule(r, "allow", "test") for r in allow]
    rules += [parse_rule(r, "deny", "test") for r in deny]
    policy = PermissionPolicy("default", rules, Path("/tmp"))
    request = PermissionRequest("Bash", "execute", command, Path("/tmp"), {"command": command})
    return policy.decide(request).behavior


@pytest.mark.parametrize(
    "command",
    [
        "git status # it's\nrm -rf victim\necho ''",  # a quote inside a comment
        "git status $'\\'' ; rm -rf victim ; echo ''",  # ANSI-C quoting
        "git status > ~/.bashrc",  # a redirection writes a file
        "git status \\\n; rm -rf victim",
        "git status <<EOF\nx\nEOF",
    ],
)
def test_a_prefix_allow_rule_does_not_cover_tricky_syntax(command: str) -> None:
    assert bash(command, allow=("Bash(git status:*)",)) == "ask"


@pytest.mark.parametrize("command", ["git status", "git status -s", "git status 2>&1 >/dev/null"])
def test_a_prefix_allow_rule_still_covers_plain_uses(command: str) -> None:
    assert bash(command, allow=("Bash(git status:*)",)) == "allow"


@pytest.mark.parametrize(
    "command",
    [
        "echo \\'$(rm -rf x)\\'",
        'echo $(echo ")"; rm -rf x)',
        "/bin/rm x",
        "\\rm x",
        "'rm' x",
        "X=1 rm x",
        "env rm x",
        "env -i rm x",
        "command rm x",
        "sudo rm x",
    ],
)
def test_a_deny_rule_sees_the_program_however_it_is_spelled(command: str) -> None:
    assert bash(command, allow=("Bash",), deny=("Bash(rm:*)",)) == "deny"


def test_symlinks_do_not_dodge_path_rules_or_accept_edits(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / "secrets").mkdir(parents=True)
    (project / "secrets" / "key").write_text("TOPSECRET")
    os.symlink(project / "secrets", project / "link")
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside" / "bashrc", project / "notes.txt")
    policy = PermissionPolicy(
        "acceptEdits", [parse_rule("Read(./secrets/**)", "deny", "test")], project
    )
    read_link = PermissionRequest("Read", "read", str(project / "link" / "key"), project, {})
    write_link = PermissionRequest("Write", "edit", str(project / "notes.txt"), project, {})
    write_plain = PermissionRequest("Write", "edit", str(project / "ok.txt"), project, {})
    assert policy.decide(read_link).behavior == "deny"
    assert policy.decide(write_link).behavior == "ask"  # leads outside: not auto-allowed
    assert policy.decide(write_plain).behavior == "allow"


async def test_read_and_grep_do_not_block_on_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    async with TaskRuntime() as rt:
        ctx = ToolContext(runtime=rt, owner=rt.session_id, cwd=tmp_path)
        read = Read()
        result = await read.call(read.validate({"file_path": str(fifo)}), ctx)  # type: ignore[arg-type]
        assert result.is_error and "not a regular file" in result.content
        grep = Grep(use_ripgrep=False)  # the Python search is the one that could block
        params = grep.validate({"pattern": "x", "path": str(fifo)})
        found = await asyncio.wait_for(grep.call(params, ctx), 10)  # type: ignore[arg-type]
        assert "No matches" in found.content or "No files" in found.content or found.is_error


def test_a_project_file_cannot_drop_user_hooks_or_re_enable_bypass(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    user = Path(os.environ["CLAUDE_CONFIG_DIR"])  # the user's Claude Code settings
    user.mkdir(parents=True, exist_ok=True)
    guard = {"matcher": "Bash", "hooks": [{"type": "command", "command": "guard"}]}
    (user / "settings.json").write_text(
        json.dumps(
            {
                "hooks": {"PreToolUse": [guard]},
                "permissions": {"disableBypassPermissionsMode": "disable"},
            }
        )
    )
    project = tmp_path / "proj" / ".claude"
    project.mkdir(parents=True)
    other = {"matcher": "Edit", "hooks": [{"type": "command", "command": "fmt"}]}
    (project / "settings.json").write_text(
        json.dumps(
            {
                "hooks": {"PreToolUse": [other]},
                "permissions": {"disableBypassPermissionsMode": "enable"},
            }
        )
    )
    (project / "settings.local.json").write_text(json.dumps({"hooks": {"PreToolUse": []}}))
    merged = load_settings(tmp_path / "proj")
    assert merged["hooks"]["PreToolUse"] == [guard, other]
    assert merged["permissions"]["disableBypassPermissionsMode"] == "disable"


@pytest.mark.parametrize("use_ripgrep", [True, False])
async def test_search_tools_leave_out_files_a_read_rule_denies(
    tmp_path: Path, use_ripgrep: bool
) -> None:
    from taskloom.engine import Engine, EngineConfig, ToolDone
    from taskloom.testing import ScriptedModel, ToolCall, Turn
    from taskloom.tools.glob import Glob

    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key").write_text("TOPSECRET value\n")
    (tmp_path / "notes.txt").write_text("TOPSECRET mention\n")
    policy = PermissionPolicy(
        "default", [parse_rule("Read(./secrets/**)", "deny", "test")], tmp_path
    )
    model = ScriptedModel(
        [
            Turn(
                tool_calls=(
                    ToolCall("Grep", {"pattern": "TOPSECRET", "output_mode": "content"}),
                    ToolCall("Grep", {"pattern": "TOPSECRET"}),
                    ToolCall("Glob", {"pattern": "**/*"}),
                )
            ),
            "done",
        ]
    )
    async with TaskRuntime() as rt:
        engine = Engine(
            EngineConfig(
                model=model,
                system_prompt="",
                tools=[Grep(use_ripgrep=use_ripgrep), Glob()],
                owner=rt.session_id,
                cwd=tmp_path,
                permissions=policy,
            ),
            rt,
        )
        events = [e async for e in engine.run("search")]
    results = [e.result.content for e in events if isinstance(e, ToolDone)]
    assert all("notes.txt" in r for r in results)
    assert not any("secrets" in r or "TOPSECRET value" in r for r in results), results


# -- the state directory ------------------------------------------------------------------------


def _run_in(tmp_path: Path, home: Path, **extra: str) -> Any:
    from helpers import clean_env, run_cli, write_turns

    model = write_turns(tmp_path / "turns.yaml", [{"text": "ran"}])
    env = clean_env(TASKLOOM_HOME=str(home), **extra)
    return run_cli("-p", "hi", "--model", model, cwd=tmp_path, env=env)


@pytest.mark.e2e
@pytest.mark.parametrize("link", ["sessions", "taskloom.db", "taskloom.db-wal"])
def test_a_symlink_in_the_state_directory_is_refused_not_followed(
    tmp_path: Path, link: str
) -> None:
    home = tmp_path / "state"
    home.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "target"
    if link == "sessions":
        target.mkdir()
    (home / link).symlink_to(target)
    # The transcript in taskloom's state (it writes under ``sessions`` then).
    proc = _run_in(tmp_path, home, TASKLOOM_TRANSCRIPTS="taskloom")
    assert proc.returncode == 1, proc.stderr
    assert f"{home / link}: refusing a symlink" in proc.stderr
    assert "ran" not in proc.stdout
    assert list(elsewhere.rglob("*")) == ([target] if link == "sessions" else [])
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.e2e
def test_a_home_of_another_user_is_refused_with_the_fix(tmp_path: Path) -> None:
    if os.getuid() == 0:
        home = tmp_path / "shared"
        home.mkdir()
        os.chown(home, 65534, 65534)  # nobody's
        os.chmod(home, 0o777)
    else:  # a directory of the system's, writable by all
        home = Path("/var/tmp")
        if home.stat().st_uid == os.getuid():
            pytest.skip("no directory of another user to point TASKLOOM_HOME at")
    before = set(os.listdir(home))
    proc = _run_in(tmp_path, home)
    assert proc.returncode == 1, proc.stderr
    assert "TASKLOOM_HOME is owned by another user" in proc.stderr
    assert "Point TASKLOOM_HOME at a directory of your own" in proc.stderr
    assert set(os.listdir(home)) == before  # nothing written there


@pytest.mark.e2e
def test_a_home_of_ones_own_others_may_write_is_refused_with_the_fix(tmp_path: Path) -> None:
    home = tmp_path / "mine"
    home.mkdir()
    os.chmod(home, 0o777)
    proc = _run_in(tmp_path, home)
    assert proc.returncode == 1, proc.stderr
    assert "TASKLOOM_HOME is writable by others (mode 777)" in proc.stderr
    assert f"chmod 700 {home}" in proc.stderr
    assert os.listdir(home) == []


@pytest.mark.e2e
def test_a_home_of_ones_own_others_may_read_is_tightened_and_used(tmp_path: Path) -> None:
    home = tmp_path / "mine"
    home.mkdir()
    os.chmod(home, 0o755)
    proc = _run_in(tmp_path, home)
    assert proc.returncode == 0, proc.stderr
    assert (home.stat().st_mode & 0o777) == 0o700
