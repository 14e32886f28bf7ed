"""Settings files: locations, merge order, list concatenation, malformed files, --settings."""

from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from taskloom.errors import SettingsError, UsageError, UserError
from taskloom.settings import (
    claude_config_dir,
    find_project_root,
    load_settings,
    merge_settings,
    settings_sources,
)

# Lowest precedence first, as load_settings documents it.
LEVELS = [
    "user_claude",
    "taskloom_home",
    "project_claude",
    "project_taskloom",
    "local_claude",
    "local_taskloom",
]


class Layout:
    """A user home, a TASKLOOM_HOME and a real git project with a nested cwd.

    The user's Claude Code file is in ``$CLAUDE_CONFIG_DIR`` (conftest sets it per test).
    """

    def __init__(self, tmp_path: Path, taskloom_home: Path) -> None:
        self.user = tmp_path / "user"
        self.project = tmp_path / "proj"
        self.cwd = self.project / "a" / "b"
        self.cwd.mkdir(parents=True)
        self.user.mkdir()
        subprocess.run(["git", "init", "-q", str(self.project)], check=True)
        self.files = {
            "user_claude": Path(os.environ["CLAUDE_CONFIG_DIR"]) / "settings.json",
            "taskloom_home": taskloom_home / "settings.json",
            "project_claude": self.project / ".claude" / "settings.json",
            "project_taskloom": self.project / ".taskloom" / "settings.json",
            "local_claude": self.project / ".claude" / "settings.local.json",
            "local_taskloom": self.project / ".taskloom" / "settings.local.json",
        }

    def write(self, level: str, data: Any) -> Path:
        path = self.files[level]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        return path


@pytest.fixture
def layout(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Layout:
    lay = Layout(tmp_path, home)
    monkeypatch.setenv("HOME", str(lay.user))
    return lay


def level_settings(level: str) -> dict[str, Any]:
    return {
        "model": level,
        f"only_{level}": True,
        "env": {"WINNER": level, level.upper(): "1"},
        "list": [level],
        "permissions": {
            "allow": [f"Bash({level}:*)", "Read"],
            "deny": [f"Bash(rm {level})"],
            "ask": [f"Bash(ask {level})"],
            "additionalDirectories": [f"/dirs/{level}", "/dirs/shared"],
            "defaultMode": level,
        },
    }


def test_merge_order_and_list_concatenation(layout: Layout) -> None:
    for level in LEVELS:
        layout.write(level, level_settings(level))
    merged = load_settings(layout.cwd)
    assert merged["model"] == "local_taskloom"
    assert merged["env"]["WINNER"] == "local_taskloom"
    assert all(merged[f"only_{level}"] for level in LEVELS)
    assert all(merged["env"][level.upper()] == "1" for level in LEVELS)
    assert merged["list"] == ["local_taskloom"]  # other lists: the later one wins
    perms = merged["permissions"]
    assert perms["defaultMode"] == "local_taskloom"
    assert perms["allow"] == ["Bash(user_claude:*)", "Read"] + [
        f"Bash({level}:*)" for level in LEVELS[1:]
    ]
    assert perms["deny"] == [f"Bash(rm {level})" for level in LEVELS]
    assert perms["ask"] == [f"Bash(ask {level})" for level in LEVELS]
    assert perms["additionalDirectories"] == (
        ["/dirs/user_claude", "/dirs/shared"] + [f"/dirs/{level}" for level in LEVELS[1:]]
    )
    assert settings_sources(layout.cwd) == [str(layout.files[level]) for level in LEVELS]


@pytest.mark.parametrize("level", LEVELS)
def test_each_file_is_read(layout: Layout, level: str) -> None:
    layout.write(level, {"model": level})
    assert load_settings(layout.cwd) == {"model": level}
    assert settings_sources(layout.cwd) == [str(layout.files[level])]


@pytest.mark.parametrize(("lower", "higher"), list(itertools.pairwise(LEVELS)))
def test_adjacent_levels_precedence(layout: Layout, lower: str, higher: str) -> None:
    layout.write(higher, {"model": higher})
    layout.write(lower, {"model": lower, "permissions": {"deny": ["Bash"]}})
    merged = load_settings(layout.cwd)
    assert merged == {"model": higher, "permissions": {"deny": ["Bash"]}}


def test_nothing_to_read(layout: Layout) -> None:
    assert load_settings(layout.cwd) == {}
    assert settings_sources(layout.cwd) == []


def test_project_root_is_git_root_or_cwd(tmp_path: Path, layout: Layout) -> None:
    assert find_project_root(layout.cwd) == layout.project
    plain = tmp_path / "plain" / "x"
    plain.mkdir(parents=True)
    assert find_project_root(plain) == plain
    worktree = tmp_path / "wt"
    (worktree / "sub").mkdir(parents=True)
    (worktree / ".git").write_text("gitdir: /elsewhere\n")  # a linked worktree's .git file
    assert find_project_root(worktree / "sub") == worktree


def test_without_git_only_cwd_is_the_project(tmp_path: Path, layout: Layout) -> None:
    outer = tmp_path / "outer"
    inner = outer / "inner"
    (outer / ".claude").mkdir(parents=True)
    (inner / ".claude").mkdir(parents=True)
    (outer / ".claude" / "settings.json").write_text('{"model": "outer"}')
    (inner / ".claude" / "settings.json").write_text('{"model": "inner"}')
    assert load_settings(inner) == {"model": "inner"}


def test_project_files_below_root_are_not_read(layout: Layout) -> None:
    nested = layout.cwd / ".claude" / "settings.json"
    nested.parent.mkdir()
    nested.write_text('{"model": "nested"}')
    assert load_settings(layout.cwd) == {}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "invalid JSON at line 1, column 2"),
        ('{"permissions": {"deny": ["Bash"]},\n "hooks": {', "invalid JSON at line 2, column 12"),
        ("[1, 2]", "expected a JSON object, got a list"),
        ('"text"', "expected a JSON object, got a string"),
        (b"\xff\xfe{}", "cannot read it"),
        ('{"permissions": {"deny": "Bash"}}', "permissions.deny must be a list of strings"),
        ('{"permissions": ["Bash"]}', "'permissions' must be an object, got a list"),
        ('{"permissions": {"defaultMode": 1}}', "permissions.defaultMode must be a string"),
        ('{"hooks": []}', "'hooks' must be an object of events"),
        ('{"hooks": {"PreToolUse": {}}}', "hooks.PreToolUse must be a list"),
        ('{"hooks": {"Stop": [{"matcher": 3, "hooks": []}]}}', "hooks.Stop[0].matcher"),
        ('{"hooks": {"Stop": [{"hooks": "x"}]}}', "hooks.Stop[0].hooks must be a list"),
        (
            '{"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": ["x"]}]}]}}',
            "hooks.PreToolUse[0].hooks[0].command must be a non-empty string, got a list",
        ),
        (
            '{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", '
            '"timeout": "5"}]}]}}',
            "hooks.Stop[0].hooks[0].timeout must be a positive number of seconds, got '5'",
        ),
        ('{"hooks": {"Stop": [{"hooks": [{"command": "x"}]}]}}', "hooks.Stop[0].hooks[0].type"),
        (
            '{"permissions": {"deny": ["Bash"]}, "permissions": {"allow": []}}',
            "duplicate key 'permissions'",
        ),
    ],
)
def test_broken_file_stops_the_load_or_is_skipped_when_asked(
    layout: Layout, caplog: pytest.LogCaptureFixture, content: str | bytes, reason: str
) -> None:
    layout.write("user_claude", {"model": "user", "permissions": {"deny": ["Bash"]}})
    bad = layout.files["project_claude"]
    bad.parent.mkdir(parents=True)
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content)
    layout.write("local_claude", {"model": "local"})
    # Fail closed: the broken file may hold a deny rule, so nothing runs without it...
    with pytest.raises(SettingsError) as raised:
        load_settings(layout.cwd)
    assert str(bad) in str(raised.value) and reason in str(raised.value)
    assert "--skip-broken-settings" in str(raised.value)
    assert isinstance(raised.value, UsageError)
    # ...unless the user says to skip it: then one warning, and the other layers still apply.
    with caplog.at_level(logging.WARNING, logger="taskloom.settings"):
        merged = load_settings(layout.cwd, skip_broken=True)
    assert merged == {"model": "local", "permissions": {"deny": ["Bash"]}}
    records = [r for r in caplog.records if r.name == "taskloom.settings"]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    assert str(bad) in records[0].getMessage()
    assert reason in records[0].getMessage()
    assert str(bad) not in settings_sources(layout.cwd)


def test_missing_files_are_silent(layout: Layout, caplog: pytest.LogCaptureFixture) -> None:
    layout.files["project_claude"].parent.mkdir(parents=True)  # .claude/ without files
    with caplog.at_level(logging.DEBUG, logger="taskloom.settings"):
        assert load_settings(layout.cwd) == {}
    assert not [r for r in caplog.records if r.name == "taskloom.settings"]


def test_directory_in_place_of_file_fails_closed(layout: Layout) -> None:
    layout.files["project_taskloom"].mkdir(parents=True)
    with pytest.raises(SettingsError, match="cannot read it"):
        load_settings(layout.cwd)
    assert load_settings(layout.cwd, skip_broken=True) == {}


def test_extra_settings_file_wins(layout: Layout, tmp_path: Path) -> None:
    for level in LEVELS:
        layout.write(level, level_settings(level))
    extra = tmp_path / "flag.json"
    extra.write_text(json.dumps({"model": "flag", "permissions": {"allow": ["Read", "Edit"]}}))
    merged = load_settings(layout.cwd, extra)
    assert merged["model"] == "flag"
    assert merged["permissions"]["allow"][-1] == "Edit"
    assert merged["permissions"]["allow"].count("Read") == 1
    assert settings_sources(layout.cwd, extra)[-1] == str(extra)


def test_extra_settings_inline_json(layout: Layout) -> None:
    layout.write("local_taskloom", {"model": "local", "permissions": {"deny": ["Bash"]}})
    inline = '  {"model": "inline", "permissions": {"deny": ["WebFetch"]}}'
    assert load_settings(layout.cwd, inline) == {
        "model": "inline",
        "permissions": {"deny": ["Bash", "WebFetch"]},
    }
    assert settings_sources(layout.cwd, inline)[-1] == "--settings (inline JSON)"


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        ("{broken", "invalid JSON"),
        ("[1]", "cannot read it"),  # not JSON-looking: taken as a path that does not exist
        ("missing.json", "cannot read it"),
    ],
)
def test_bad_extra_settings_is_a_user_error(layout: Layout, extra: str, fragment: str) -> None:
    with pytest.raises(UserError, match=fragment):
        load_settings(layout.cwd, extra)


def test_extra_settings_file_not_an_object(layout: Layout, tmp_path: Path) -> None:
    extra = tmp_path / "flag.json"
    extra.write_text("[]")
    with pytest.raises(UserError, match="expected a JSON object"):
        load_settings(layout.cwd, extra)


def test_home_argument_overrides_taskloom_home(layout: Layout, tmp_path: Path) -> None:
    layout.write("taskloom_home", {"model": "env"})
    other = tmp_path / "other-home"
    other.mkdir()
    (other / "settings.json").write_text('{"model": "arg"}')
    assert load_settings(layout.cwd, home=other) == {"model": "arg"}


def test_project_in_home_reads_the_user_file_once(layout: Layout) -> None:
    subprocess.run(["git", "init", "-q", str(layout.user)], check=True)
    layout.write("user_claude", {"permissions": {"allow": ["Read"]}})
    assert settings_sources(layout.user) == [str(layout.files["user_claude"])]


def test_merge_settings_copies() -> None:
    base = {"a": {"b": [1]}, "permissions": {"allow": ["Read"]}}
    override = {"a": {"c": 2}, "permissions": {"allow": ["Edit"]}}
    merged = merge_settings(base, override)
    merged["a"]["b"].append(9)
    merged["permissions"]["allow"].append("Bash")
    assert base == {"a": {"b": [1]}, "permissions": {"allow": ["Read"]}}
    assert override == {"a": {"c": 2}, "permissions": {"allow": ["Edit"]}}


def test_type_changes_replace() -> None:
    assert merge_settings({"a": {"b": 1}}, {"a": 3}) == {"a": 3}
    assert merge_settings({"a": 3}, {"a": {"b": 1}}) == {"a": {"b": 1}}
    assert merge_settings({"permissions": {"allow": "x"}}, {"permissions": {"allow": ["y"]}}) == {
        "permissions": {"allow": ["y"]}
    }


def test_user_settings_are_read_from_claude_config_dir_and_home_s_only_without_it(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    home_file = layout.user / ".claude" / "settings.json"
    home_file.parent.mkdir(parents=True)
    home_file.write_text(json.dumps({"model": "from_home", "only_home": True}))
    config = Path(os.environ["CLAUDE_CONFIG_DIR"])
    assert claude_config_dir() == config
    layout.write("user_claude", {"model": "from_config"})
    merged = load_settings(layout.cwd)
    # As Claude Code: with CLAUDE_CONFIG_DIR set, ~/.claude is not read at all.
    assert merged["model"] == "from_config" and "only_home" not in merged
    assert settings_sources(layout.cwd) == [str(config / "settings.json")]
    monkeypatch.delenv("CLAUDE_CONFIG_DIR")
    assert claude_config_dir() == layout.user / ".claude"
    assert load_settings(layout.cwd)["model"] == "from_home"
