"""TodoWrite, ExitPlanMode and AskUserQuestion in the real REPL, in a real tmux pane.

The model is the fake Anthropic server, which records what it was sent (see test_repl.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tmux_driver
from fake_servers import FakeAnthropicServer
from helpers import TIME_FACTOR
from test_repl import anthropic_env, enter, leave, start, user_texts

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120 * TIME_FACTOR)]

TODOS = [
    {"content": "Read the code", "status": "completed", "activeForm": "Reading the code"},
    {"content": "Fix the parser bug", "status": "in_progress", "activeForm": "Fixing the parser"},
    {"content": "Run the test suite", "status": "pending", "activeForm": "Running the suite"},
]


def test_the_todo_list_shows_below_the_panel_and_its_task_in_the_working_line(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    done = [dict(t, status="completed") for t in TODOS]
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("TodoWrite", {"todos": TODOS})])
        server.add_turn(text="Listed.")
        server.add_turn(tool_calls=[("Bash", {"command": wait})])
        server.add_turn(tool_calls=[("TodoWrite", {"todos": done})])
        server.add_turn(text="All done.")
        pane = start(
            tmux, tmp_path, "--model", "sonnet", "--allowedTools", "Bash", **anthropic_env(server)
        )
        enter(pane, "fix the parser")
        pane.wait_for("Listed.")
        # The list stays while the session is idle: it is the model's, not the turn's.
        for item in ("☒ Read the code", "◼ Fix the parser bug", "☐ Run the test suite"):
            pane.wait_for(item)
        enter(pane, "go on")
        # While the turn runs, the working line says what the todo in progress does.
        screen = pane.wait_for("✻ Fixing the parser…")
        lines = screen.splitlines()
        working_row = next(i for i, line in enumerate(lines) if "✻ Fixing the parser" in line)
        todo_row = next(i for i, line in enumerate(lines) if "☐ Run the test suite" in line)
        prompt_row = max(i for i, line in enumerate(lines) if line == ">")
        assert working_row < todo_row < prompt_row, screen  # in the live area, above the input
        gate.touch()
        screen = pane.wait_for("All done.")
        # All completed: the list is cleared, as Claude Code clears it.
        pane.wait_gone("☐ Run the test suite")
        leave(pane)


def test_exit_plan_mode_shows_the_plan_refused_keeps_planning_approved_leaves_plan_mode(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    target = tmp_path / "a.txt"
    plan = "1. Write a.txt\n2. Check it"
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("ExitPlanMode", {"plan": plan})])
        server.add_turn(tool_calls=[("ExitPlanMode", {"plan": plan + "\n3. Add a test"})])
        server.add_turn(tool_calls=[("Write", {"file_path": str(target), "content": "A"})])
        server.add_turn(text="Written.")
        pane = start(
            tmux,
            tmp_path,
            "--model",
            "sonnet",
            "--permission-mode",
            "plan",
            **anthropic_env(server),
        )
        enter(pane, "plan it")
        screen = pane.wait_for("Here is the plan. Approve it and start?")
        assert "1. Write a.txt" in screen and "2. Check it" in screen
        pane.wait_for("3 no, keep planning")
        pane.send_keys("3")
        pane.wait_for("What should change?")
        enter(pane, "add a test step")
        screen = pane.wait_for("3. Add a test")  # the plan again, revised
        told = user_texts(server.requests[1].body)
        assert "keep planning" in told and "add a test step" in told
        pane.wait_for(re.compile(r" · plan · "))  # the status line, redrawn after the plan
        pane.wait_for("2 yes, and accept edits from now on")
        pane.send_keys("2")
        screen = pane.wait_for("Written.")
        # Approved with edits accepted: the Write ran unasked, and the mode says so.
        assert "Allow Write" not in pane.history()
        assert target.read_text() == "A"
        pane.wait_for(re.compile(r" · acceptEdits · "))
        approved = user_texts(server.requests[2].body)
        assert approved.startswith("User has approved your plan.")
        leave(pane)


def test_ask_user_question_takes_typed_answers_one_question_at_a_time(
    tmux: tmux_driver.TmuxServer, tmp_path: Path
) -> None:
    questions = [
        {
            "question": "Which database?",
            "header": "Database",
            "options": [
                {"label": "PostgreSQL", "description": "Relational"},
                {"label": "SQLite", "description": "Embedded"},
            ],
            "multiSelect": False,
        },
        {
            "question": "Which extras?",
            "header": "Extras",
            "options": [
                {"label": "Caching", "description": "Faster reads"},
                {"label": "Logging", "description": "Detailed logs"},
                {"label": "Metrics", "description": "Dashboards"},
            ],
            "multiSelect": True,
        },
    ]
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("AskUserQuestion", {"questions": questions})])
        server.add_turn(text="Noted.")
        pane = start(tmux, tmp_path, "--model", "sonnet", **anthropic_env(server))
        enter(pane, "set it up")
        screen = pane.wait_for("[Database] Which database? (question 1 of 2)")
        assert "2. SQLite — Embedded" in screen
        pane.wait_for("Type a number, or your own answer")
        enter(pane, "7")
        pane.wait_for("Choose a number from 1 to 2")
        enter(pane, "2")
        pane.wait_for("[Extras] Which extras? (question 2 of 2)")
        enter(pane, "1 3")
        pane.wait_for("Noted.")
        told = user_texts(server.requests[1].body)
        assert told == (
            'User has answered your questions: "Which database?"="SQLite", '
            '"Which extras?"="Caching, Metrics". '
            "You can now continue with the user's answers in mind."
        )
        leave(pane)
