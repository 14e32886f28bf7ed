"""Agent definitions: built-ins, messy agent files, sources and precedence, ``taskloom agents``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from taskloom.agents import (
    BUILTIN_AGENTS,
    READ_ONLY_DISALLOWED,
    AgentCatalog,
    AgentDefinition,
    builtin,
    load_agents,
)
from taskloom.errors import UserError


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private HOME, so ~/.claude/agents is ours: without CLAUDE_CONFIG_DIR, it is read."""
    path = tmp_path / "user"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR")
    monkeypatch.delenv("TASKLOOM_MANAGED_AGENTS_DIR", raising=False)
    return path


@pytest.fixture
def repo(tmp_path: Path, user_home: Path) -> Path:
    """A project directory that is a git repository root."""
    path = tmp_path / "repo"
    (path / ".git").mkdir(parents=True)
    return path


def write_agent(directory: Path, filename: str, frontmatter: str, body: str = "Do it.") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / filename
    path.write_text(f"---\n{frontmatter.strip()}\n---\n\n{body}\n", encoding="utf-8")
    return path


def project_agent(repo: Path, name: str, frontmatter: str = "", body: str = "Do it.") -> Path:
    text = f"name: {name}\ndescription: The {name} agent\n{frontmatter}"
    return write_agent(repo / ".claude" / "agents", f"{name}.md", text, body)


def only(repo: Path, name: str) -> AgentDefinition:
    catalog = load_agents(repo)
    assert catalog.skipped == []
    agent = catalog.get(name)
    assert agent is not None
    return agent


# --- Built-ins -------------------------------------------------------------------------------


def test_builtins_have_the_documented_properties() -> None:
    assert [a.agent_type for a in BUILTIN_AGENTS] == [
        "general-purpose",
        "Explore",
        "Plan",
        "verification",
        "taskloom-guide",
    ]
    general = builtin("general-purpose")
    assert general.all_tools and general.disallowed_tools == () and general.model is None
    assert not general.omit_claude_md
    explore, plan = builtin("Explore"), builtin("Plan")
    for agent in (explore, plan):
        assert agent.all_tools
        assert set(agent.disallowed_tools) == {
            "Agent",
            "Edit",
            "Write",
            "NotebookEdit",
            "ExitPlanMode",
        }
        assert agent.disallowed_tools == READ_ONLY_DISALLOWED
        assert agent.omit_claude_md
    assert explore.model == "haiku" and plan.model == "inherit"
    verifier, guide = builtin("verification"), builtin("taskloom-guide")
    assert verifier.read_only and guide.read_only and not explore.read_only
    assert {"Edit", "Write", "NotebookEdit", "Agent"} <= set(verifier.disallowed_tools)
    assert verifier.background and verifier.model == "inherit" and verifier.color == "red"
    assert guide.tools == ("Glob", "Grep", "Read") and guide.model == "haiku"
    for agent in BUILTIN_AGENTS:
        assert agent.source == "built-in" and agent.path is None
        assert agent.when_to_use
        assert 10 <= len(agent.system_prompt.splitlines()) <= 25
    with pytest.raises(KeyError, match="general-purpose"):
        builtin("nope")


def test_builtins_are_active_with_no_files(repo: Path) -> None:
    catalog = load_agents(repo)
    assert catalog.names() == [
        "Explore",
        "general-purpose",
        "Plan",
        "taskloom-guide",
        "verification",
    ]
    assert catalog.shadowed == [] and catalog.skipped == [] and catalog.warnings == []
    assert "Plan" in catalog and catalog.get("missing") is None


def test_a_project_file_overrides_a_builtin(repo: Path) -> None:
    project_agent(repo, "Explore", "model: opus\n", body="Our own explorer.")
    catalog = load_agents(repo)
    explore = catalog.get("Explore")
    assert explore is not None
    assert explore.source == "projectSettings" and explore.model == "opus"
    assert explore.system_prompt == "Our own explorer."
    assert catalog.shadowed == [builtin("Explore")]


# --- Fields of messy files -------------------------------------------------------------------


def test_tools_as_a_comma_string_and_as_a_list(repo: Path) -> None:
    project_agent(repo, "a", "tools: Read, Grep,Glob, Bash(git log:*)\n")
    project_agent(repo, "b", "tools:\n  - Read\n  - Grep\ndisallowedTools: [Write, Edit]\n")
    catalog = load_agents(repo)
    a, b = catalog.active["a"], catalog.active["b"]
    assert a.tools == ("Read", "Grep", "Glob", "Bash(git log:*)")
    assert b.tools == ("Read", "Grep") and b.disallowed_tools == ("Write", "Edit")
    assert not a.all_tools


def test_empty_tools_means_none_and_absent_means_all(repo: Path) -> None:
    project_agent(repo, "none", "tools: []\n")
    project_agent(repo, "all", "")
    project_agent(repo, "star", "tools: '*'\n")
    catalog = load_agents(repo)
    assert catalog.active["none"].tools == () and not catalog.active["none"].all_tools
    assert catalog.active["all"].tools is None and catalog.active["all"].all_tools
    assert catalog.active["star"].tools == ("*",) and catalog.active["star"].all_tools


def test_an_unquoted_colon_in_the_description_loads(repo: Path) -> None:
    write_agent(
        repo / ".claude" / "agents",
        "reviewer.md",
        "name: reviewer\n"
        "description: Use this agent when: the user asks for a review. Example: `pr 12`\n"
        "tools: Read, Grep\n"
        "color: purple\n",
        body="Review carefully.\n\nLine two.",
    )
    agent = only(repo, "reviewer")
    assert agent.when_to_use == "Use this agent when: the user asks for a review. Example: `pr 12`"
    assert agent.tools == ("Read", "Grep") and agent.color == "purple"
    assert agent.system_prompt == "Review carefully.\n\nLine two."


def test_a_description_over_unindented_lines_that_look_like_keys_loads(repo: Path) -> None:
    # The shape of a real plugin's agent (Claude Code's own pr-review-toolkit): a long
    # description whose example lines (``user: "…"``) YAML reads as keys, then breaks on.
    write_agent(
        repo / ".claude" / "agents",
        "simplifier.md",
        "name: simplifier\n"
        "description: Use after writing code.\\n\\nExamples:\\n\\n<example>\n"
        "Context: a feature was added.\n"
        'user: "Please add auth"\n'
        "<function call omitted>\n"
        "</example>\n"
        "tools: [Read, Edit]\n"
        "model: opus\n",
        body="Simplify.",
    )
    catalog = load_agents(repo)
    assert catalog.skipped == []
    agent = catalog.active["simplifier"]
    assert agent.when_to_use.startswith("Use after writing code.\n\nExamples:")
    assert 'user: "Please add auth"\n<function call omitted>\n</example>' in agent.when_to_use
    assert agent.tools == ("Read", "Edit") and agent.model == "opus"
    # A file whose first line is no field at all is still refused, saying where.
    write_agent(repo / ".claude" / "agents", "junk.md", "- [unclosed\nname: junk")
    [(_, why)] = load_agents(repo).skipped
    assert why.startswith("invalid YAML frontmatter at line 2: while parsing a flow sequence")


def test_values_that_open_and_close_a_quote_or_list_before_more_text_load(repo: Path) -> None:
    agents = repo / ".claude" / "agents"
    write_agent(agents, "beta.md", "name: beta\ndescription: [Beta] Reviews code")
    write_agent(agents, "expert.md", 'name: expert\ndescription: "Expert" reviewer for code')
    catalog = load_agents(repo)
    assert catalog.skipped == []
    assert catalog.active["beta"].when_to_use == "[Beta] Reviews code"
    assert catalog.active["expert"].when_to_use == '"Expert" reviewer for code'


def test_values_starting_with_yaml_indicators_load(repo: Path) -> None:
    write_agent(
        repo / ".claude" / "agents",
        "odd.md",
        "name: odd\ndescription: *Important* agent for @team, 'tis handy\nmodel: sonnet\n",
    )
    agent = only(repo, "odd")
    assert agent.when_to_use == "*Important* agent for @team, 'tis handy"
    assert agent.model == "sonnet"


@pytest.mark.parametrize(
    ("frontmatter", "line", "what"),
    [
        # Line 1 is "---", line 2 the name.
        ('description: "never closed\ntools: Bash', 3, "quoted scalar"),
        ("description: fine\ntools: [Bash, Read", 4, "flow sequence"),
        ("description: {broken\nmodel: sonnet", 3, "flow mapping"),
        ("description: fine\n  nested: too: deep", 4, "mapping values are not allowed"),
    ],
)
def test_broken_yaml_frontmatter_is_skipped_with_a_warning_naming_file_and_line(
    repo: Path, caplog: pytest.LogCaptureFixture, frontmatter: str, line: int, what: str
) -> None:
    agents = repo / ".claude" / "agents"
    path = write_agent(agents, "broken.md", f"name: broken\n{frontmatter}")
    write_agent(agents, "fine.md", "name: fine\ndescription: A fine agent")
    with caplog.at_level(logging.WARNING, logger="taskloom.agents"):
        catalog = load_agents(repo)
    assert "broken" not in catalog and "fine" in catalog
    [(where, why)] = catalog.skipped
    assert where == str(path)
    assert why.startswith(f"invalid YAML frontmatter at line {line}: ") and what in why
    [record] = [r for r in caplog.records if r.name == "taskloom.agents"]
    assert str(path) in record.getMessage() and f"line {line}" in record.getMessage()


def test_missing_description_is_skipped_with_a_warning_naming_the_file(
    repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_agent(repo / ".claude" / "agents", "broken.md", "name: broken\ntools: Read\n")
    project_agent(repo, "fine")
    with caplog.at_level(logging.WARNING, logger="taskloom.agents"):
        catalog = load_agents(repo)
    assert "broken" not in catalog and "fine" in catalog
    assert catalog.skipped == [(str(path), "missing required field 'description'")]
    [record] = [r for r in caplog.records if r.name == "taskloom.agents"]
    assert str(path) in record.getMessage() and "description" in record.getMessage()


def test_files_without_frontmatter_or_name_are_skipped(repo: Path) -> None:
    agents = repo / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "README.md").write_text("# My agents\n")
    write_agent(agents, "anon.md", "description: no name here")
    write_agent(agents, "list.md", "- just\n- a list")
    reasons = {Path(p).name: why for p, why in load_agents(repo).skipped}
    assert reasons.keys() == {"README.md", "anon.md", "list.md"}
    assert "frontmatter" in reasons["README.md"]
    assert reasons["anon.md"] == "missing required field 'name'"
    assert "mapping" in reasons["list.md"]


def test_dotted_names_inherit_model_unknown_colour_and_other_fields(repo: Path) -> None:
    project_agent(
        repo,
        "team.code-reviewer.v2",
        "model: Inherit\ncolor: chartreuse\npermissionMode: acceptEdits\nmaxTurns: 7\n"
        "background: true\nisolation: worktree\nmemory: project\nskills: pdf, xlsx\n"
        "effort: high\ninitialPrompt: Start now\nomitClaudeMd: true\n"
        "requiredMcpServers: [github]\nmcpServers:\n  - github\n  - local: {command: srv}\n"
        "hooks: {Stop: []}\n",
    )
    agent = only(repo, "team.code-reviewer.v2")
    assert agent.model == "inherit" and agent.color == "chartreuse"
    assert agent.permission_mode == "acceptEdits" and agent.max_turns == 7
    assert agent.background and agent.isolation == "worktree" and agent.memory == "project"
    assert agent.skills == ("pdf", "xlsx") and agent.effort == "high"
    assert agent.initial_prompt == "Start now" and agent.omit_claude_md
    assert agent.required_mcp_servers == ("github",)
    assert agent.mcp_servers == ("github", {"local": {"command": "srv"}})
    assert agent.hooks == {"Stop": []}


def test_snake_case_keys_and_bad_optional_fields(repo: Path) -> None:
    project_agent(
        repo,
        "snake",
        "disallowed_tools: Bash\nmax_turns: lots\npermission_mode: yolo\nomit_claude_md: true\n"
        "isolation: container\ntools: Task, Read\nbackground: 'yes'\n",
    )
    catalog = load_agents(repo)
    agent = catalog.active["snake"]
    assert agent.disallowed_tools == ("Bash",) and agent.omit_claude_md and agent.background
    # The old name of the Agent tool is translated; bad values are dropped, not fatal.
    assert agent.tools == ("Agent", "Read")
    assert agent.max_turns is None and agent.permission_mode is None and agent.isolation is None
    messages = " ".join(msg for _, msg in catalog.warnings)
    assert "max_turns" in messages and "yolo" in messages and "container" in messages


def test_description_escapes_become_newlines(repo: Path) -> None:
    project_agent(repo, "x")
    write_agent(repo / ".claude" / "agents", "y.md", "name: y\ndescription: one\\ntwo")
    assert only(repo, "y").when_to_use == "one\ntwo"


# --- Sources and precedence ------------------------------------------------------------------


def test_subdirectories_are_searched(repo: Path, home: Path) -> None:
    project_agent(repo, "top")
    write_agent(repo / ".claude" / "agents" / "team" / "deep", "d.md", "name: deep\ndescription: d")
    write_agent(home / "agents" / "nested", "u.md", "name: user-nested\ndescription: u")
    catalog = load_agents(repo)
    assert {"top", "deep", "user-nested"} <= set(catalog.names())
    assert catalog.active["user-nested"].source == "userSettings"


def test_nearest_project_dir_wins(repo: Path) -> None:
    sub = repo / "pkg" / "mod"
    sub.mkdir(parents=True)
    write_agent(repo / ".claude" / "agents", "a.md", "name: a\ndescription: root claude")
    write_agent(repo / ".taskloom" / "agents", "a.md", "name: a\ndescription: root taskloom")
    write_agent(repo / "pkg" / ".claude" / "agents", "a.md", "name: a\ndescription: pkg")
    write_agent(repo / "pkg" / ".claude" / "agents", "b.md", "name: b\ndescription: pkg b")
    catalog = load_agents(sub)
    assert catalog.active["a"].when_to_use == "pkg"
    assert catalog.active["b"].when_to_use == "pkg b"
    assert [a.when_to_use for a in catalog.shadowed] == ["root claude", "root taskloom"]
    # Directories above the repository root are not project directories.
    write_agent(repo.parent / ".claude" / "agents", "c.md", "name: c\ndescription: outside")
    assert "c" not in load_agents(sub)


@pytest.mark.e2e
def test_project_shadows_user_and_taskloom_agents_lists_both(
    repo: Path, user_home: Path, home: Path
) -> None:
    user_file = write_agent(
        user_home / ".claude" / "agents", "helper.md", "name: helper\ndescription: user helper"
    )
    write_agent(home / "agents", "mine.md", "name: mine\ndescription: taskloom user agent")
    project_file = project_agent(repo, "helper", "model: haiku\n")
    (repo / ".claude" / "agents" / "junk.md").write_text("no frontmatter\n")
    env = {**os.environ, "HOME": str(user_home), "TASKLOOM_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "taskloom", "agents", "--json"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    active = {a["name"]: a for a in data["active"]}
    assert active["helper"]["source"] == "projectSettings"
    assert active["helper"]["file"] == str(project_file) and active["helper"]["model"] == "haiku"
    assert active["mine"]["source"] == "userSettings"
    assert {"Explore", "Plan", "general-purpose"} <= active.keys()
    [loser] = data["shadowed"]
    assert loser["name"] == "helper" and loser["source"] == "userSettings"
    assert loser["file"] == str(user_file)
    assert loser["shadowed_by"] == {"source": "projectSettings", "file": str(project_file)}
    assert [s["file"] for s in data["skipped"]] == [str(repo / ".claude" / "agents" / "junk.md")]
    assert "junk.md" in proc.stderr  # the warning reaches the user too

    table = subprocess.run(
        [sys.executable, "-m", "taskloom", "agents"],
        cwd=repo,
        env={**env, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert table.returncode == 0, table.stderr
    assert "helper" in table.stdout and "projectSettings" in table.stdout
    assert "shadowed: helper" in table.stdout and "skipped:" in table.stdout


def test_agents_flag_json(repo: Path) -> None:
    project_agent(repo, "reviewer")
    flag = json.dumps(
        {
            "reviewer": {
                "description": "Reviews code",
                "prompt": "You review code.",
                "tools": ["Read", "Grep"],
                "model": "sonnet",
            },
            "no-prompt": {"description": "x"},
            "not-an-object": "x",
        }
    )
    catalog = load_agents(repo, flag_json=flag)
    agent = catalog.active["reviewer"]
    assert agent.source == "flagSettings" and agent.path is None
    assert agent.system_prompt == "You review code." and agent.tools == ("Read", "Grep")
    assert [a.source for a in catalog.shadowed] == ["projectSettings"]
    assert dict(catalog.skipped) == {
        "--agents no-prompt": "missing required field 'prompt'",
        "--agents not-an-object": "expected an object, got str",
    }
    for bad in ("{not json", "[1, 2]"):
        with pytest.raises(UserError, match="--agents"):
            load_agents(repo, flag_json=bad)


def test_managed_dir_beats_everything(
    repo: Path, user_home: Path, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    managed = tmp_path / "managed"
    write_agent(managed / "policy", "p.md", "name: Plan\ndescription: managed plan\nmodel: opus")
    write_agent(user_home / ".claude" / "agents", "p.md", "name: Plan\ndescription: user")
    write_agent(home / "agents", "p.md", "name: Plan\ndescription: taskloom user")
    write_agent(repo / ".taskloom" / "agents", "p.md", "name: Plan\ndescription: project")
    flag = json.dumps({"Plan": {"description": "flag", "prompt": "p"}})
    catalog = load_agents(repo, flag_json=flag, managed_dir=managed)
    plan = catalog.active["Plan"]
    assert plan.source == "policySettings" and plan.when_to_use == "managed plan"
    assert [a.source for a in catalog.shadowed] == [
        "built-in",
        "userSettings",
        "userSettings",
        "projectSettings",
        "flagSettings",
    ]
    # The same directory through the environment variable.
    monkeypatch.setenv("TASKLOOM_MANAGED_AGENTS_DIR", str(managed))
    assert load_agents(repo).active["Plan"].source == "policySettings"


def test_plugin_agents_rank_between_builtins_and_user(repo: Path, home: Path) -> None:
    plugin = AgentDefinition("general-purpose", "plugin gp", "p", source="plugin")
    other = AgentDefinition("plug", "plugin only", "p", source="plugin")
    write_agent(home / "agents", "plug.md", "name: plug\ndescription: user wins")
    catalog = load_agents(repo, plugin_agents=[plugin, other])
    assert catalog.active["general-purpose"] is plugin
    assert catalog.active["plug"].source == "userSettings"


def test_home_as_project_reads_claude_agents_once(user_home: Path) -> None:
    write_agent(user_home / ".claude" / "agents", "h.md", "name: h\ndescription: home")
    catalog = load_agents(user_home)
    assert catalog.active["h"].source == "userSettings" and catalog.shadowed == []


def test_catalog_is_a_plain_container() -> None:
    catalog = AgentCatalog()
    first = AgentDefinition("b", "first")
    catalog.add(first)
    catalog.add(AgentDefinition("b", "second"))
    catalog.add(AgentDefinition("A", "third"))
    assert catalog.names() == ["A", "b"] and catalog.shadowed == [first]


def test_user_agents_are_read_from_claude_config_dir_and_not_from_home(
    repo: Path, user_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    write_agent(config / "agents", "c.md", "name: cfg-agent\ndescription: from the config dir")
    write_agent(user_home / ".claude" / "agents", "h.md", "name: home-agent\ndescription: home")
    catalog = load_agents(repo)
    assert catalog.active["cfg-agent"].source == "userSettings"
    # Claude Code lists only the first then: ~/.claude is not read while the variable is set.
    assert "home-agent" not in catalog.active and catalog.skipped == []
