"""Skills and custom slash commands: where they are found, which wins, and what runs."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from taskloom.skills import SkillRoot, default_roots, load_catalog
from taskloom.skills.expand import (
    instructions,
    invocation,
    parse_slash,
    substitute_arguments,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A real git repository with a nested working directory."""
    root = tmp_path / "repo"
    (root / "pkg" / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_user_and_project_skills_and_commands_are_found(repo: Path, tmp_path: Path) -> None:
    user = tmp_path / "claude"  # CLAUDE_CONFIG_DIR (see conftest)
    write(
        user / "skills" / "pdf" / "SKILL.md",
        "---\nname: pdf\ndescription: Work with PDF files\nallowed-tools: Bash(pdftotext:*), Read\n"
        "---\n# PDF\nUse pdftotext.\n",
    )
    write(
        repo / ".claude" / "skills" / "release" / "SKILL.md",
        "---\ndescription: Cut a release\n---\nSteps\n",
    )
    write(repo / ".claude" / "commands" / "review.md", "Review $ARGUMENTS carefully.\n")
    write(
        repo / ".claude" / "commands" / "frontend" / "component.md",
        "---\ndescription: Make a component\nargument-hint: [name]\nmodel: haiku\n---\nMake $0.\n",
    )
    catalog = load_catalog(default_roots(repo / "pkg" / "sub"))
    assert sorted(catalog.active) == ["frontend:component", "pdf", "release", "review"]
    pdf = catalog.get("/pdf")
    assert pdf is not None and pdf.kind == "skill" and pdf.scope == "user"
    assert pdf.allowed_tools == ("Bash(pdftotext:*)", "Read")
    assert pdf.base_dir == user / "skills" / "pdf"
    component = catalog.get("frontend:component")
    assert component is not None and component.kind == "command" and component.scope == "project"
    assert component.argument_hint == "[name]" and component.model == "haiku"
    review = catalog.get("review")
    assert review is not None and review.description == "Review $ARGUMENTS carefully."
    assert not review.described  # no frontmatter: the Skill tool does not offer it
    assert [c.name for c in catalog.skills()] == ["pdf", "release"]
    assert [c.name for c in catalog.for_model()] == ["frontend:component", "pdf", "release"]


def test_precedence_user_over_project_skill_over_command(repo: Path, tmp_path: Path) -> None:
    write(
        tmp_path / "claude" / "skills" / "deploy" / "SKILL.md", "---\ndescription: user's\n---\nU\n"
    )
    write(
        repo / ".claude" / "skills" / "deploy" / "SKILL.md", "---\ndescription: project's\n---\nP\n"
    )
    write(repo / ".claude" / "commands" / "deploy.md", "---\ndescription: command\n---\nC\n")
    write(repo / ".claude" / "skills" / "lint" / "SKILL.md", "---\ndescription: root's\n---\nR\n")
    write(
        repo / "pkg" / ".claude" / "skills" / "lint" / "SKILL.md",
        "---\ndescription: near\n---\nN\n",
    )
    catalog = load_catalog(default_roots(repo / "pkg"))
    deploy = catalog.get("deploy")
    assert deploy is not None and deploy.description == "user's"
    assert sorted(c.description for c in catalog.shadowed) == ["command", "project's", "root's"]
    lint = catalog.get("lint")
    assert lint is not None and lint.description == "near"  # the nearest directory wins


def test_malformed_files_are_skipped_with_a_warning_naming_them(
    repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad_yaml = write(
        repo / ".claude" / "skills" / "a" / "SKILL.md", "---\ndescription: [oops\n---\nx\n"
    )
    unclosed = write(repo / ".claude" / "commands" / "b.md", "---\ndescription: never closed\n")
    bad_rule = write(
        repo / ".claude" / "commands" / "c.md", "---\nallowed-tools: Bash(git\n---\nx\n"
    )
    bad_type = write(repo / ".claude" / "commands" / "d.md", "---\ndescription: {a: 1}\n---\nx\n")
    write(repo / ".claude" / "commands" / "fine.md", "---\ndescription: ok\n---\nx\n")
    with caplog.at_level(logging.WARNING, logger="taskloom.skills"):
        catalog = load_catalog(default_roots(repo))
    assert list(catalog.active) == ["fine"]
    skipped = dict(catalog.skipped)
    assert set(skipped) == {str(bad_yaml), str(unclosed), str(bad_rule), str(bad_type)}
    assert "invalid YAML frontmatter" in skipped[str(bad_yaml)]
    assert "never closed" in skipped[str(unclosed)]
    assert "Bash(git" in skipped[str(bad_rule)]
    assert "'description' must be text" in skipped[str(bad_type)]
    assert all(str(path) in caplog.text for path in skipped)


def test_a_plugin_root_prefixes_its_names(tmp_path: Path) -> None:
    plugin = tmp_path / "plug"
    write(plugin / "skills" / "lint" / "SKILL.md", "---\ndescription: Lint it\n---\nx\n")
    write(plugin / "commands" / "go.md", "---\ndescription: Go\n---\nx\n")
    catalog = load_catalog(
        [
            SkillRoot(plugin / "skills", "skill", "plug", prefix="plug"),
            SkillRoot(plugin / "commands", "command", "plug", prefix="plug"),
        ]
    )
    assert sorted(catalog.active) == ["plug:go", "plug:lint"]


def test_arguments_are_put_in_as_claude_code_does() -> None:
    assert substitute_arguments("Fix #$ARGUMENTS now", "123") == "Fix #123 now"
    assert substitute_arguments("$0 then $1, [$ARGUMENTS[2]]", '"a b" c') == "a b then c, []"
    assert substitute_arguments("from $src to $dst", "x y", ["src", "dst"]) == "from x to y"
    assert substitute_arguments("No placeholder.", "extra words") == (
        "No placeholder.\n\nARGUMENTS: extra words"
    )
    assert substitute_arguments("No placeholder.", "") == "No placeholder."
    # Unbalanced quotes: split by spaces instead.
    assert substitute_arguments("$0|$1", "it's fine") == "it's|fine"
    assert parse_slash("/frontend:component  Button big ") == ("frontend:component", "Button big")
    assert parse_slash("/compact") == ("compact", "")
    assert parse_slash("not /a command") is None
    assert parse_slash("//x") is None


def test_instructions_name_the_skill_directory(tmp_path: Path) -> None:
    write(
        tmp_path / "s" / "tool" / "SKILL.md",
        "---\ndescription: d\n---\n"
        "Run ${CLAUDE_SKILL_DIR}/run.sh $ARGUMENTS in ${CLAUDE_SESSION_ID}\n",
    )
    catalog = load_catalog([SkillRoot(tmp_path / "s", "skill", "user")])
    skill = catalog.get("tool")
    assert skill is not None
    text = instructions(skill, "--fast", "sess-1")
    base = tmp_path / "s" / "tool"
    assert text == f"Base directory for this skill: {base}\n\nRun {base}/run.sh --fast in sess-1"
    assert invocation(skill, "--fast").splitlines() == [
        "<command-message>tool is running…</command-message>",
        "<command-name>/tool</command-name>",
        "<command-args>--fast</command-args>",
    ]
