"""Rules files (``.claude/rules``) and imports from outside the project, with real files in a
real git repository: found, held back by their ``paths``, told once a matching file is worked
on, and external imports followed only where Claude Code follows them (once approved)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import harness
from taskloom.instructions import ConversationInstructions, load_instructions
from taskloom.messages import TextBlock, ToolResultBlock, ToolUseBlock
from taskloom.models.base import ModelRequest
from taskloom.models.scripted import FunctionModel, ToolCall, Turn
from test_instructions import git_repo, user_dir, write


def rules_project(tmp_path: Path) -> Path:
    """A repository with instructions, rules always applying and rules for some files only,
    and the user's own rules beside the user's CLAUDE.md."""
    repo = git_repo(tmp_path / "repo")
    write(user_dir() / "CLAUDE.md", "USER FILE\n")
    write(user_dir() / "rules" / "mine.md", "USER RULE: be brief.\n")
    write(user_dir() / "rules" / "go.md", '---\npaths: "**/*.go"\n---\nUSER GO RULE\n')
    write(repo / "CLAUDE.md", "ROOT FILE\n")
    write(repo / ".claude" / "CLAUDE.md", "DOT FILE\n")
    write(repo / ".claude" / "rules" / "style.md", "STYLE RULE: tabs.\n")
    write(
        repo / ".claude" / "rules" / "team" / "testing.md",
        "---\ndescription: how we test\n---\nTESTING RULE: pytest.\n",
    )
    write(
        repo / ".claude" / "rules" / "api.md",
        '---\npaths:\n  - "src/api/**/*.{ts,tsx}"\n---\nAPI RULE: validate input.\n',
    )
    write(repo / "CLAUDE.local.md", "LOCAL FILE\n")
    write(repo / "src" / "api" / "users.ts", "export {}\n")
    write(repo / "src" / "main.ts", "export {}\n")
    write(repo / "cmd" / "main.go", "package main\n")
    return repo


def read(path: Path, call_id: str = "toolu_1") -> tuple[ToolUseBlock, ToolResultBlock]:
    call = ToolUseBlock(id=call_id, name="Read", input={"file_path": str(path)})
    return call, ToolResultBlock(tool_use_id=call_id, content="1\tx")


def test_rules_load_with_claude_md_and_conditional_ones_are_held(tmp_path: Path) -> None:
    repo = rules_project(tmp_path)
    loaded = load_instructions(repo, {})
    rules = repo / ".claude" / "rules"
    assert [(f.path, f.scope, f.rule) for f in loaded.files] == [
        (user_dir() / "CLAUDE.md", "user", False),
        (user_dir() / "rules" / "mine.md", "user", True),
        (repo / "CLAUDE.md", "project", False),
        (repo / ".claude" / "CLAUDE.md", "project", False),
        (rules / "style.md", "project", True),
        (rules / "team" / "testing.md", "project", True),  # recursive
        (repo / "CLAUDE.local.md", "local", False),
    ]
    text = loaded.text()
    # A rules file is shown as .claude/CLAUDE.md is, its frontmatter left out.
    assert (
        f"Contents of {rules / 'team' / 'testing.md'} (project instructions, checked into "
        "the codebase):\n\nTESTING RULE: pytest."
    ) in text
    assert "description: how we test" not in text
    assert "API RULE" not in text and "USER GO RULE" not in text
    held = {(r.path, r.scope, r.globs, r.base) for r in loaded.held}
    assert held == {
        (user_dir() / "rules" / "go.md", "user", ("**/*.go",), repo),
        (rules / "api.md", "project", ("src/api/**/*.{ts,tsx}",), repo),
    }
    # Without the project's settings source, no project rules either.
    only_user = load_instructions(repo, {}, ["user"])
    assert [f.path.name for f in only_user.files] == ["CLAUDE.md", "mine.md"]
    assert [r.path.name for r in only_user.held] == ["go.md"]


def test_a_conditional_rule_is_told_once_after_a_matching_file_is_worked_on(
    tmp_path: Path,
) -> None:
    repo = rules_project(tmp_path)
    told = ConversationInstructions(load_instructions(repo, {}))
    assert told.after_tools(*zip(read(repo / "src" / "main.ts"), strict=True), repo) == []
    call, ok = read(repo / "src" / "api" / "users.ts")
    (block,) = told.after_tools([call], [ok], repo)
    api = repo / ".claude" / "rules" / "api.md"
    assert block == TextBlock(
        text=f"<system-reminder>\nContents of {api}:\n\nAPI RULE: validate input.\n"
        "</system-reminder>"
    )
    assert told.after_tools([call], [ok], repo) == []  # once
    assert told.files[-1].globs == ("src/api/**/*.{ts,tsx}",) and told.files[-1].nested
    # The user's rule matches relative to the session's directory; a failed call saw nothing.
    go_call, go_ok = read(repo / "cmd" / "main.go", "toolu_2")
    failed = ToolResultBlock(tool_use_id="toolu_2", content="denied", is_error=True)
    assert told.after_tools([go_call], [failed], repo) == []
    (go,) = told.after_tools([go_call], [go_ok], repo)
    assert "USER GO RULE" in go.text
    assert told.held == []


def test_a_directory_met_later_brings_its_rules(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    app = repo / "app"
    write(app / ".claude" / "rules" / "app.md", "APP RULE\n")
    write(app / ".claude" / "rules" / "py.md", "---\npaths: '*.py'\n---\nAPP PY RULE\n")
    write(app / "main.py", "x = 1\n")
    write(app / "notes.txt", "x\n")
    loaded = load_instructions(repo, {})
    assert loaded.files == [] and loaded.held == []
    told = ConversationInstructions(loaded)
    blocks = told.after_tools(*zip(read(app / "notes.txt"), strict=True), repo)
    assert [b.text.split("\n")[1] for b in blocks] == [
        f"Contents of {app / '.claude/rules/app.md'}:"
    ]
    (py,) = told.after_tools(*zip(read(app / "main.py", "toolu_2"), strict=True), repo)
    assert "APP PY RULE" in py.text  # its paths are relative to app, the rule's directory


def test_broken_rules_are_skipped_saying_why_and_a_link_cycle_is_cut(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    rules = repo / ".claude" / "rules"
    bad_paths = write(rules / "a.md", "---\npaths: 5\n---\nNUMBER PATHS\n")
    bad_yaml = write(rules / "b.md", "---\npaths: [src/**\n---\nBROKEN YAML\n")
    write(rules / "c.md", "GOOD RULE\n")
    write(rules / "everything.md", "---\npaths: ['**', 'lib/**']\n---\nALL AND LIB\n")
    os.symlink(rules, rules / "loop")  # a directory linking back up
    loaded = load_instructions(repo, {})
    assert [f.path.name for f in loaded.files] == ["c.md"]
    assert [(r.path.name, r.globs) for r in loaded.held] == [("everything.md", ("**", "lib"))]
    cuts = "\n".join(loaded.skipped)
    assert f"{bad_paths}: not loaded, frontmatter 'paths' must be a glob or a list" in cuts
    assert f"{bad_yaml}: not loaded, invalid YAML frontmatter at line 2" in cuts
    # Only `**` means every file: such a rule always applies.
    write(rules / "everything.md", "---\npaths: ['**']\n---\nALL FILES\n")
    assert "ALL FILES" in load_instructions(repo, {}).text()


@pytest.fixture
def home_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's home directory, private to the test (``~`` in an import)."""
    home = tmp_path / "userhome"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def approve(project: Path) -> None:
    """Record the user's approval of ``project``'s external imports, as Claude Code does."""
    config = user_dir() / ".claude.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    entry = {"hasClaudeMdExternalIncludesApproved": True}
    config.write_text(json.dumps({"projects": {str(project): entry}}))


def test_a_home_import_loads_once_the_project_s_external_imports_are_approved(
    tmp_path: Path, home_dir: Path
) -> None:
    repo = git_repo(tmp_path / "repo")
    mine = write(
        home_dir / ".claude" / "my-project-instructions.md",
        "MINE\n@more.md\n@my-project-instructions.md\n",  # imports itself: cut
    )
    write(mine.parent / "more.md", "MORE\n")
    write(repo / "CLAUDE.md", "# Individual Preferences\n- @~/.claude/my-project-instructions.md\n")
    write(repo / "app" / "CLAUDE.md", "APP\n@~/.claude/more.md\n")
    refused = load_instructions(repo, {})
    assert "MINE" not in refused.text()
    cuts = "\n".join(refused.skipped)
    assert f"@{mine} in {repo / 'CLAUDE.md'}: outside the project {repo}" in cuts
    assert (
        "hasClaudeMdExternalIncludesApproved" in cuts and str(user_dir() / ".claude.json") in cuts
    )
    approve(tmp_path / "elsewhere")  # another project's approval does not count
    assert "MINE" not in load_instructions(repo, {}).text()

    approve(repo)
    loaded = load_instructions(repo, {})
    assert [(f.path, f.scope, f.imported_by) for f in loaded.files] == [
        (repo / "CLAUDE.md", "project", None),
        (mine, "project", repo / "CLAUDE.md"),
        (mine.parent / "more.md", "project", mine),
    ]
    assert f"@{mine} in {mine}: already loaded (each file once)" in loaded.skipped
    # A file met later imports only from inside the project, approved or not (Claude Code's).
    told = ConversationInstructions(loaded)
    (app,) = told.after_tools(*zip(read(repo / "app" / "CLAUDE.md"), strict=True), repo)
    assert "APP" in app.text and told.files[-1].path == repo / "app" / "CLAUDE.md"
    assert any(
        "a file met in a directory below imports only from inside" in s for s in told.skipped
    )


def test_an_unreadable_approval_record_approves_nothing(tmp_path: Path, home_dir: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    write(home_dir / "x.md", "X\n")
    write(repo / "CLAUDE.md", "@~/x.md\n")
    write(user_dir() / ".claude.json", "{not json")
    assert [f.path for f in load_instructions(repo, {}).files] == [repo / "CLAUDE.md"]
    write(user_dir() / ".claude.json", json.dumps({"projects": {str(repo): {}}}))
    assert [f.path for f in load_instructions(repo, {}).files] == [repo / "CLAUDE.md"]


async def test_the_model_gets_a_conditional_rule_after_the_read_and_the_prompt_keeps_its_bytes(
    tmp_path: Path,
) -> None:
    repo = rules_project(tmp_path)
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> Turn | str:
        requests.append(request)
        if len(requests) == 1:
            target = str(repo / "src" / "api" / "users.ts")
            return Turn(tool_calls=(ToolCall("Read", {"file_path": target}),))
        return "done"

    async with harness(repo, FunctionModel(respond)) as h:
        async for _ in h.run("check the users endpoint"):
            pass
    first, second = requests
    assert "STYLE RULE: tabs." in first.system and "USER RULE: be brief." in first.system
    assert second.system == first.system and "API RULE" not in first.system
    last = second.messages[-1]
    assert isinstance(last.content[0], ToolResultBlock)
    texts = [b.text for b in last.content if isinstance(b, TextBlock)]
    api = repo / ".claude" / "rules" / "api.md"
    assert f"<system-reminder>\nContents of {api}:\n\nAPI RULE: validate input." in texts[-1]
