"""A teammate's process entry (teams/serve.py): its options, and who may serve a teammate.

The whole path (a lead starting a teammate's process in a tmux pane, which serves it) is in
test_teams_tmux.py; these are its two halves on their own, on a real session.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import harness
from taskloom.errors import UsageError
from taskloom.teams.join import JoinSpec
from taskloom.teams.member import PaneView
from taskloom.teams.serve import serve_teammate, teammate_options
from taskloom.testing import ScriptedModel


def spec(tmp_path: Path, **fields: object) -> JoinSpec:
    values: dict[str, object] = {
        "session": "00000000-0000-4000-8000-000000000001",
        "team": "alpha",
        "name": "alice",
        "task_id": "t12345678",
        "prompt": "review the diff",
        "cwd": str(tmp_path),
        "model": "scripted:turns.yaml",
        "mode": "plan",
        "process_session": "00000000-0000-4000-8000-000000000002",
        "options": {"allowed_tools": ["Read"], "fallback_model": "haiku"},
        **fields,
    }
    return JoinSpec(**values)  # type: ignore[arg-type]


def test_a_teammates_process_runs_as_its_spec_says(tmp_path: Path) -> None:
    join = spec(tmp_path)
    path = tmp_path / "join.json"
    view = PaneView(join)
    options = teammate_options(join, path, view)
    assert (options.model, options.cwd, options.permission_mode) == (
        "scripted:turns.yaml",
        str(tmp_path),
        "plan",
    )
    assert options.session_id == join.process_session
    assert options.join_team == path and options.observer is view
    # Its conversation is its lead's sidechain, not a session of its own to resume.
    assert options.persist_session is False
    # What it inherits of its lead's options, by field name.
    assert list(options.allowed_tools) == ["Read"] and options.fallback_model == "haiku"


def test_without_a_process_session_it_gets_a_fresh_id(tmp_path: Path) -> None:
    assert teammate_options(spec(tmp_path, process_session=""), tmp_path, None).session_id is None  # type: ignore[arg-type]


async def test_a_session_that_is_no_teammates_does_not_serve_one_nor_remove_the_spec(
    tmp_path: Path,
) -> None:
    path = tmp_path / "join.json"
    path.write_text("{}")
    async with harness(tmp_path, ScriptedModel([])) as h:
        assert h.started.teammate is None
        with pytest.raises(UsageError, match="not started with join_team"):
            await serve_teammate(h.started.teammate, path)
    assert path.exists()
