"""Claude Code plugins: a real public plugin and one of ours load, in process and through ``-p``.

``accessibility-compliance`` and ``protect-mcp`` (its hooks) are copied from
github.com/wshobson/agents (see tests/fixtures/plugins/README.md); ``loom-kit`` adds what they
lack: an MCP server (tests/mcp_echo_server.py), and hooks that need no network. Only the
model is scripted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import clean_env, harness, scripted_argv
from taskloom.plugins import describe, load_plugins
from taskloom.testing import ScriptedModel, ToolCall, Turn

FIXTURES = Path(__file__).parent / "fixtures" / "plugins"
REAL = FIXTURES / "accessibility-compliance"
OURS = FIXTURES / "loom-kit"
GUARD = FIXTURES / "protect-mcp"
ECHO_TOOL = "mcp__plugin_loom-kit_echo__echo"


def test_a_public_plugin_loads_its_agents_skills_and_commands() -> None:
    found = load_plugins([REAL])
    assert found.skipped == []
    (plugin,) = found.plugins
    assert (plugin.name, plugin.version) == ("accessibility-compliance", "1.2.3")
    assert [a.agent_type for a in plugin.agents] == ["accessibility-compliance:ui-visual-validator"]
    (agent,) = plugin.agents
    assert agent.source == "plugin" and agent.model == "sonnet"
    assert "visual validation expert" in agent.system_prompt
    report = describe(found)["plugins"][0]
    assert report["skills"] == [
        "accessibility-compliance:screen-reader-testing",
        "accessibility-compliance:wcag-audit-patterns",
    ]
    assert report["commands"] == ["accessibility-compliance:accessibility-audit"]


def test_hooks_and_mcp_servers_have_the_plugin_root_put_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKLOOM_TEST_PYTHON", sys.executable)
    (plugin,) = load_plugins([OURS]).plugins
    (matcher,) = plugin.hooks["PreToolUse"]
    export = f"export CLAUDE_PLUGIN_ROOT={OURS}; "
    assert matcher["hooks"][0]["command"] == f'{export}sh "{OURS}/hooks/record.sh"'
    server = plugin.mcp_servers["plugin:loom-kit:echo"]
    assert server.command == sys.executable
    assert server.args == (f"{OURS}/../../../mcp_echo_server.py",)
    assert server.env == {"CLAUDE_PLUGIN_ROOT": str(OURS)}
    assert Path(server.args[0]).resolve() == Path(__file__).with_name("mcp_echo_server.py")


def _plugin(root: Path, manifest: Any = None) -> Path:
    (root / ".claude-plugin").mkdir(parents=True)
    text = json.dumps(manifest or {"name": root.name})
    (root / ".claude-plugin" / "plugin.json").write_text(text)
    return root


def test_malformed_pieces_are_skipped_naming_the_file_and_the_rest_loads(tmp_path: Path) -> None:
    good = _plugin(tmp_path / "mixed")
    (good / "agents").mkdir()
    (good / "agents" / "fine.md").write_text("---\nname: fine\ndescription: Fine.\n---\nHi.\n")
    (good / "agents" / "broken.md").write_text("---\nname: broken\n---\nNo description.\n")
    (good / "hooks").mkdir()
    (good / "hooks" / "hooks.json").write_text("{not json")
    (good / ".mcp.json").write_text(json.dumps({"mcpServers": {"bad": {"args": []}}}))
    (good / "skills" / "odd").mkdir(parents=True)
    (good / "skills" / "odd" / "SKILL.md").write_text("---\ndescription: [unclosed\n---\nx\n")
    nameless = _plugin(tmp_path / "nameless", {"version": "1.0.0"})
    unjson = tmp_path / "unjson"
    (unjson / ".claude-plugin").mkdir(parents=True)
    (unjson / ".claude-plugin" / "plugin.json").write_text("{")
    bare = tmp_path / "bare"
    bare.mkdir()
    found = load_plugins([good, nameless, unjson, bare, OURS, FIXTURES / "loom-kit"])
    # A directory without a manifest is a plugin named after it (with nothing in it here).
    assert [p.name for p in found.plugins] == ["mixed", "bare", "loom-kit"]
    (mixed, _, _) = found.plugins
    assert [a.agent_type for a in mixed.agents] == ["mixed:fine"]
    assert not mixed.hooks and not mixed.mcp_servers
    report = describe(found)
    reasons = {
        Path(s["file"]).relative_to(tmp_path).as_posix(): s["reason"]
        for s in report["skipped"]
        if s["file"].startswith(str(tmp_path))
    }
    assert "description" in reasons["mixed/agents/broken.md"]
    assert "not JSON" in reasons["mixed/hooks/hooks.json"]
    assert "'command'" in reasons["mixed/.mcp.json"]
    assert "mixed/skills/odd/SKILL.md" in reasons
    assert "'name'" in reasons["nameless/.claude-plugin/plugin.json"]
    assert "not a JSON manifest" in reasons["unjson/.claude-plugin/plugin.json"]
    # The same plugin twice: the first wins, the second is reported.
    assert any("loaded from" in s["reason"] for s in report["skipped"])


def test_a_plugin_without_a_manifest_and_the_manifest_s_documented_forms(
    tmp_path: Path,
) -> None:
    # No manifest: named after its directory, its pieces in their default places.
    plain = tmp_path / "plain-kit"
    (plain / "commands").mkdir(parents=True)
    (plain / "commands" / "go.md").write_text("Go.\n")
    (plain / "agents").mkdir()
    (plain / "agents" / "a.md").write_text(
        "---\nname: a\ndescription: A.\n---\nRun ${CLAUDE_PLUGIN_ROOT}/x.sh\n"
    )
    # Single files and one skill's own directory named by the manifest; hooks and servers
    # as lists of files and objects; a path leaving the plugin is refused.
    stop = {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}
    forms = _plugin(
        tmp_path / "forms",
        {
            "name": "forms",
            "skills": ["./extra/solo"],
            "commands": ["./custom/special.md", "../plain-kit/commands"],
            "agents": "./custom/one-agent.md",
            "hooks": ["./h1.json", {"hooks": stop}],
            "mcpServers": [{"srv": {"command": "x"}}, "./servers.json"],
        },
    )  # fmt: skip
    (forms / "extra" / "solo").mkdir(parents=True)
    (forms / "extra" / "solo" / "SKILL.md").write_text("---\ndescription: Solo.\n---\nS.\n")
    (forms / "custom").mkdir()
    (forms / "custom" / "special.md").write_text("---\ndescription: Special.\n---\nX.\n")
    (forms / "custom" / "one-agent.md").write_text("---\nname: one\ndescription: One.\n---\nO.\n")
    hook = {"hooks": [{"type": "command", "command": "true"}]}
    (forms / "h1.json").write_text(json.dumps({"hooks": {"SessionEnd": [hook], "NoSuch": [hook]}}))
    (forms / "servers.json").write_text(json.dumps({"mcpServers": {"two": {"command": "y"}}}))
    found = load_plugins([plain, forms])
    by_name = {p.name: p for p in found.plugins}
    assert set(by_name) == {"plain-kit", "forms"}
    (agent,) = by_name["plain-kit"].agents
    assert agent.system_prompt == f"Run {plain.resolve()}/x.sh"
    assert [a.agent_type for a in by_name["forms"].agents] == ["forms:one"]
    assert list(by_name["forms"].mcp_servers) == ["plugin:forms:srv", "plugin:forms:two"]
    report = {p["name"]: p for p in describe(found)["plugins"]}
    assert report["plain-kit"]["commands"] == ["plain-kit:go"]
    assert report["forms"]["skills"] == ["forms:solo"]
    assert report["forms"]["commands"] == ["forms:special"]
    assert report["forms"]["hooks"] == ["SessionEnd", "Stop"]
    skipped = describe(found)["skipped"]
    assert {"file": f"{forms} hooks 'NoSuch'", "reason": "no hook of it can run here"} in skipped
    [outside] = [s for s in skipped if "../plain-kit" in s["reason"]]
    assert outside["reason"] == (
        "'commands': '../plain-kit/commands' is not a directory or .md file in the plugin"
    )


def test_a_plugins_agent_cannot_set_hooks_servers_or_permission_mode(tmp_path: Path) -> None:
    root = _plugin(tmp_path / "wide")
    (root / "agents").mkdir()
    (root / "agents" / "a.md").write_text(
        "---\nname: a\ndescription: A.\npermissionMode: bypassPermissions\n"
        "mcpServers:\n  - x: {command: y}\nhooks:\n  Stop: []\n---\nBody.\n"
    )
    ((agent,),) = [p.agents for p in load_plugins([root]).plugins]
    assert agent.agent_type == "wide:a"
    assert agent.permission_mode is None and not agent.mcp_servers and not agent.hooks


def test_enabled_plugins_load_from_where_claude_code_installed_them(tmp_path: Path) -> None:
    config = tmp_path / "claude"
    installed = tmp_path / "cache" / "loom-kit"
    shutil.copytree(REAL, installed)
    registry = config / "plugins" / "installed_plugins.json"
    registry.parent.mkdir(parents=True)
    entry = {"scope": "user", "installPath": str(installed), "version": "1.2.3"}
    registry.write_text(json.dumps({"version": 2, "plugins": {"a11y@market": [entry]}}))
    settings = {"enabledPlugins": {"a11y@market": True, "off@market": False, "gone@market": True}}
    found = load_plugins([], settings, config_dir=config)
    assert [(p.name, p.source) for p in found.plugins] == [
        ("accessibility-compliance", "a11y@market")
    ]
    assert found.skipped == [
        ("enabledPlugins gone@market", f"not installed (no entry in {registry})")
    ]


async def test_a_session_runs_a_plugins_skill_agent_and_mcp_tool_and_its_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASKLOOM_TEST_PYTHON", sys.executable)
    model = ScriptedModel(
        [
            Turn(tool_calls=[ToolCall(ECHO_TOOL, {"text": "via plugin"})]),
            Turn(text="done"),
            Turn(text="greeted"),
            Turn(text="ran"),
        ]
    )
    # A relative directory is the session's working directory's (not the process's).
    relative = os.path.relpath(OURS, tmp_path)
    async with harness(tmp_path, model, plugin_dirs=[str(REAL), relative]) as h:
        assert [p.name for p in h.plugins.plugins] == ["accessibility-compliance", "loom-kit"]
        assert "loom-kit:echoer" in h.agents.catalog
        assert "accessibility-compliance:ui-visual-validator" in h.agents.catalog
        assert ECHO_TOOL in [t.name for t in h.tools]
        [e async for e in h.run("echo it")]
        [e async for e in h.run("/loom-kit:greet Ada")]
        [e async for e in h.run("/loom-kit:where hi")]
    result = model.requests[1].messages[-1].content[0]
    assert "via plugin" in str(result)
    log = (tmp_path / "plugin-hook.log").read_text()
    assert f"hook of {OURS}: " in log and ECHO_TOOL in log
    assert "Greet Ada warmly." in str(model.requests[2].messages[-1].content)
    # ${CLAUDE_PLUGIN_ROOT} is the plugin's directory in a command's text and its !`cmd`.
    ran = str(model.requests[3].messages[-1].content)
    assert "Script: loom-kit script says hi" in ran
    assert f"The plugin lives in {OURS.resolve()}." in ran


def _command(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``taskloom ARGS`` prints, run in this process; it must exit 0."""
    from taskloom.cli.commands import main_command

    capsys.readouterr()
    code = main_command(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_the_plugins_subcommand_lists_loaded_and_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing"
    args = ["plugins", "--json", "--plugin-dir", str(OURS), "--plugin-dir", str(missing)]
    report = json.loads(_command(args, capsys))
    (plugin,) = report["plugins"]
    assert plugin["name"] == "loom-kit" and plugin["mcp_servers"] == ["plugin:loom-kit:echo"]
    assert plugin["hooks"] == ["PreToolUse"]
    assert plugin["commands"] == ["loom-kit:hello", "loom-kit:where"]
    assert report["skipped"] == [{"file": str(missing), "reason": "not a directory"}]


def test_the_agents_subcommand_lists_plugin_agents_and_what_a_plugin_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken"
    (broken / ".claude-plugin").mkdir(parents=True)
    (broken / ".claude-plugin" / "plugin.json").write_text('{"name": "broken"}')
    (broken / "agents").mkdir()
    (broken / "agents" / "bad.md").write_text("---\nname: [unclosed\n---\nbody\n")
    args = ["agents", "--json", "--plugin-dir", str(REAL), "--plugin-dir", str(broken)]
    report = json.loads(_command(args, capsys))
    active = {a["name"]: a for a in report["active"]}
    agent = active["accessibility-compliance:ui-visual-validator"]
    assert agent["source"] == "plugin" and agent["model"] == "sonnet"
    assert agent["file"] == str(REAL / "agents" / "ui-visual-validator.md")
    assert [s["file"] for s in report["skipped"]] == [str(broken / "agents" / "bad.md")]
    monkeypatch.setenv("COLUMNS", "300")  # the table's cells whole, on one line
    table = _command(["agents", "--plugin-dir", str(REAL)], capsys)
    assert "accessibility-compliance:ui-visual-validator" in table


@pytest.mark.e2e
def test_print_mode_loads_plugin_dirs(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    call = {"name": ECHO_TOOL, "input": {"text": "hello from a plugin"}}
    script.write_text(yaml.safe_dump({"turns": [{"tool_calls": [call]}, {"text": "done"}]}))
    argv = scripted_argv(script, "--plugin-dir", str(REAL), "--plugin-dir", str(OURS))
    argv += ["--plugin-dir", str(GUARD)]
    # The real plugin's hooks run `npx protect-mcp …`: a stand-in records them (no network).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "npx").write_text(f'#!/bin/sh\necho "$*" >> "{tmp_path}/npx.log"\n')
    (bin_dir / "npx").chmod(0o755)
    env = clean_env(TASKLOOM_TEST_PYTHON=sys.executable)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(
        [*argv, "--allowedTools", "mcp__plugin_loom-kit_echo"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    init = events[0]
    assert init["plugins"] == [
        {"name": "accessibility-compliance", "path": str(REAL)},
        {"name": "loom-kit", "path": str(OURS)},
        {"name": "protect-mcp", "path": str(GUARD)},
    ]
    assert {"protect-mcp:policy-enforcer", "protect-mcp:receipt-verifier"} <= set(init["agents"])
    assert "protect-mcp:protect-mcp-setup" in init["skills"]
    assert {"name": "plugin:loom-kit:echo", "status": "connected"} in init["mcp_servers"]
    assert {"loom-kit:echoer", "accessibility-compliance:ui-visual-validator"} <= set(
        init["agents"]
    )
    assert {"loom-kit:greet", "accessibility-compliance:wcag-audit-patterns"} <= set(init["skills"])
    assert {"loom-kit:hello", "accessibility-compliance:accessibility-audit"} <= set(
        init["slash_commands"]
    )
    result = next(e for e in events if e["type"] == "user")["message"]["content"][0]
    assert result["is_error"] is False and "hello from a plugin" in result["content"]
    assert ECHO_TOOL in (tmp_path / "plugin-hook.log").read_text()
    # The public plugin's PreToolUse and PostToolUse hooks ran around the call.
    npx = (tmp_path / "npx.log").read_text().splitlines()
    assert [line.split()[:2] for line in npx] == [
        ["protect-mcp@0.7.4", "evaluate"],
        ["protect-mcp@0.7.4", "sign"],
    ]
