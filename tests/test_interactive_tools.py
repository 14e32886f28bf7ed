"""TodoWrite, EnterPlanMode / ExitPlanMode and AskUserQuestion through a real session.

Only the model is scripted; the permission gate, the policy and the tools are the real ones. The
one asked is a prompter of the test's (as a program's ``can_use_tool`` or the REPL would be).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import taskloom
from taskloom.messages import Message, TextBlock
from taskloom.permissions import Decision, PermissionPolicy, PermissionRequest, PromptAnswer
from taskloom.testing import ScriptedModel, ToolCall, Turn
from taskloom.tools.todo import MODIFIED, TodoList

TODOS = [
    {"content": "Read the code", "status": "completed", "activeForm": "Reading the code"},
    {"content": "Fix the bug", "status": "in_progress", "activeForm": "Fixing the bug"},
    {"content": "Run the tests", "status": "pending", "activeForm": "Running the tests"},
]
QUESTIONS = [
    {
        "question": "Which database?",
        "header": "Database",
        "options": [
            {"label": "PostgreSQL", "description": "Relational"},
            {"label": "SQLite", "description": "Embedded"},
        ],
        "multiSelect": False,
    }
]


class Asked:
    """Answers each question with the next scripted answer, and keeps what it was asked."""

    def __init__(self, *answers: PromptAnswer) -> None:
        self.answers = list(answers)
        self.asked: list[tuple[str, dict[str, Any], str]] = []

    async def ask(
        self,
        request: PermissionRequest,
        decision: Decision,
        *,
        tool_use_id: str,
        agent_id: str | None,
    ) -> PromptAnswer:
        self.asked.append((request.tool_name, request.input, decision.behavior))
        return self.answers.pop(0)


def results(events: list[Any]) -> list[tuple[str, str, bool]]:
    return [
        (e.call.name, e.result.content, e.result.is_error)
        for e in events
        if isinstance(e, taskloom.ToolDone)
    ]


async def run(tmp_path: Path, turns: list[Any], **options: Any) -> tuple[list[Any], Any]:
    model = ScriptedModel(turns)
    async with taskloom.Harness(model=model, cwd=tmp_path, **options) as h:
        events = [e async for e in h.run("go")]
        todos = h.session.engine.todos
        mode = h.policy.mode
        await h.end()
    return events, (todos, mode, model)


async def test_todowrite_keeps_the_main_threads_list_and_answers_as_claude_code(
    tmp_path: Path,
) -> None:
    events, (todos, _, model) = await run(
        tmp_path, [Turn(tool_calls=[ToolCall("TodoWrite", {"todos": TODOS})]), "ok"]
    )
    assert results(events) == [("TodoWrite", MODIFIED, False)]
    assert [(t.content, t.status) for t in todos.items] == [
        ("Read the code", "completed"),
        ("Fix the bug", "in_progress"),
        ("Run the tests", "pending"),
    ]
    assert todos.active is not None and todos.active.active_form == "Fixing the bug"
    offered = [t.name for t in model.requests[0].tools]
    assert {"TodoWrite", "EnterPlanMode", "ExitPlanMode", "AskUserQuestion"} <= set(offered)


async def test_a_list_all_completed_is_cleared_and_a_bad_item_is_refused(tmp_path: Path) -> None:
    done = [dict(t, status="completed") for t in TODOS]
    bad = [{"content": "", "status": "doing", "activeForm": "x"}]
    events, (todos, _, _) = await run(
        tmp_path,
        [
            Turn(tool_calls=[ToolCall("TodoWrite", {"todos": TODOS})]),
            Turn(tool_calls=[ToolCall("TodoWrite", {"todos": bad})]),
            Turn(tool_calls=[ToolCall("TodoWrite", {"todos": done})]),
            "ok",
        ],
    )
    (_, first, _), (_, refused, is_error), (_, last, _) = results(events)
    assert is_error and "todos.0.content" in refused and "todos.0.status" in refused
    assert first == last == MODIFIED
    assert todos.items == []


async def test_a_resumed_conversation_finds_its_list_in_a_call_or_a_compaction_summary(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([Turn(tool_calls=[ToolCall("TodoWrite", {"todos": TODOS})]), "ok"])
    async with taskloom.Harness(model=model, cwd=tmp_path) as h:
        [e async for e in h.run("go")]
        session, listed = h.session_id, h.session.engine.todos
        await h.end()
    async with taskloom.Harness(model=ScriptedModel([]), cwd=tmp_path, resume=session) as h:
        assert h.session.engine.todos.items == listed.items != []
        await h.end()
    summary = listed.summary()
    assert summary is not None and "Fixing the bug" in summary
    found = TodoList.from_messages([Message(role="user", content=[TextBlock(text=summary)])])
    assert found.items == listed.items
    assert (
        TodoList.from_messages([Message(role="user", content=[TextBlock(text="hi")])]).items == []
    )


async def test_enter_plan_mode_asks_then_exit_plan_mode_asks_and_approved_leaves_plan_mode(
    tmp_path: Path,
) -> None:
    prompter = Asked(PromptAnswer(allow=True), PromptAnswer(allow=True))
    events, (_, mode, _) = await run(
        tmp_path,
        [
            Turn(tool_calls=[ToolCall("EnterPlanMode", {})]),
            Turn(tool_calls=[ToolCall("Write", {"file_path": "a.txt", "content": "x"})]),
            Turn(tool_calls=[ToolCall("ExitPlanMode", {"plan": "1. Write a.txt"})]),
            "ok",
        ],
        permission_mode="acceptEdits",
        headless=False,
        prompter=prompter,
    )
    (_, entered, _), (_, write, refused), (_, approved, _) = results(events)
    assert entered.startswith("Entered plan mode.") and "ExitPlanMode" in entered
    assert refused and "not allowed in plan mode" in write
    assert approved.startswith("User has approved your plan. You can now start coding.")
    assert approved.endswith("## Approved Plan:\n1. Write a.txt")
    assert [(name, how) for name, _, how in prompter.asked] == [
        ("EnterPlanMode", "ask"),
        ("ExitPlanMode", "ask"),
    ]
    assert mode == "acceptEdits"  # back to the mode plan mode was entered from
    assert not (tmp_path / "a.txt").exists()


async def test_a_refused_plan_keeps_plan_mode_and_says_keep_planning(tmp_path: Path) -> None:
    prompter = Asked(PromptAnswer(allow=False, message="Add a test first"))
    events, (_, mode, _) = await run(
        tmp_path,
        [Turn(tool_calls=[ToolCall("ExitPlanMode", {"plan": "Just do it"})]), "ok"],
        permission_mode="plan",
        headless=False,
        prompter=prompter,
    )
    ((_, text, is_error),) = results(events)
    assert is_error and "keep planning" in text and "Add a test first" in text
    assert mode == "plan"


async def test_an_approval_naming_a_mode_goes_on_in_that_mode(tmp_path: Path) -> None:
    prompter = Asked(PromptAnswer(allow=True, mode="acceptEdits"))
    _, (_, mode, _) = await run(
        tmp_path,
        [Turn(tool_calls=[ToolCall("ExitPlanMode", {"plan": "p"})]), "ok"],
        permission_mode="plan",
        headless=False,
        prompter=prompter,
    )
    assert mode == "acceptEdits"


async def test_headless_exit_plan_mode_is_denied_and_plan_mode_stays(tmp_path: Path) -> None:
    events, (_, mode, _) = await run(
        tmp_path,
        [Turn(tool_calls=[ToolCall("ExitPlanMode", {"plan": "p"})]), "ok"],
        permission_mode="plan",
    )
    ((_, text, is_error),) = results(events)
    assert is_error and "Nobody can approve the plan" in text and mode == "plan"


async def test_bypass_and_allow_rules_do_not_answer_for_the_user(tmp_path: Path) -> None:
    ask = ToolCall("AskUserQuestion", {"questions": QUESTIONS})
    events, _ = await run(
        tmp_path,
        [Turn(tool_calls=[ask]), "ok"],
        skip_permissions=True,
        allowed_tools=["AskUserQuestion"],
    )
    ((_, text, is_error),) = results(events)
    assert is_error and "cannot be answered in this session" in text
    assert "non-interactively" in text


async def test_ask_user_question_reports_the_answers_given(tmp_path: Path) -> None:
    answered = {"questions": QUESTIONS, "answers": {"Which database?": "SQLite"}}
    prompter = Asked(PromptAnswer(allow=True, updated_input=answered))
    events, _ = await run(
        tmp_path,
        [Turn(tool_calls=[ToolCall("AskUserQuestion", {"questions": QUESTIONS})]), "ok"],
        headless=False,
        prompter=prompter,
        skip_permissions=True,  # asked all the same: only a person answers
    )
    ((_, text, is_error),) = results(events)
    assert not is_error
    assert text == (
        'User has answered your questions: "Which database?"="SQLite". '
        "You can now continue with the user's answers in mind."
    )
    assert prompter.asked[0][1] == {"questions": QUESTIONS}


async def test_ask_user_question_limits_are_checked_before_anyone_is_asked(
    tmp_path: Path,
) -> None:
    one_option = [dict(QUESTIONS[0], options=QUESTIONS[0]["options"][:1])]
    five = [dict(QUESTIONS[0], question=f"Q{i}?") for i in range(5)]
    twice = [QUESTIONS[0], QUESTIONS[0]]
    prompter = Asked()
    calls = [ToolCall("AskUserQuestion", {"questions": q}) for q in (one_option, five, twice)]
    events, _ = await run(
        tmp_path,
        [Turn(tool_calls=calls), "ok"],
        headless=False,
        prompter=prompter,
    )
    texts = [text for _, text, is_error in results(events) if is_error]
    assert len(texts) == 3 and prompter.asked == []
    assert "questions.0.options" in texts[0]
    assert "questions" in texts[1] and "at most 4" in texts[1]
    assert "question texts must be unique" in texts[2]


async def test_a_deny_rule_still_denies_a_tool_only_a_person_answers(tmp_path: Path) -> None:
    policy = PermissionPolicy.from_settings(
        {"permissions": {"deny": ["ExitPlanMode(*)"]}}, project_root=tmp_path
    )
    request = PermissionRequest("ExitPlanMode", "read", None, tmp_path, {}, "person")
    assert policy.decide(request).behavior == "deny"
    assert PermissionPolicy("dontAsk", (), tmp_path).decide(request).behavior == "deny"
    assert PermissionPolicy("bypassPermissions", (), tmp_path).decide(request).behavior == "ask"
    entering = PermissionRequest("EnterPlanMode", "read", None, tmp_path, {}, "ask")
    assert PermissionPolicy("bypassPermissions", (), tmp_path).decide(entering).behavior == "allow"
    assert PermissionPolicy("default", (), tmp_path).decide(entering).behavior == "ask"


def test_leaving_plan_mode_goes_back_to_the_mode_before_it(tmp_path: Path) -> None:
    policy = PermissionPolicy("bypassPermissions", (), tmp_path)
    policy.switch_mode("plan")
    assert policy.leave_plan() == "bypassPermissions" and policy.leave_plan() is None
    started_in_plan = PermissionPolicy("plan", (), tmp_path)
    assert started_in_plan.leave_plan() == "default"


async def test_a_compaction_keeps_the_todo_list_in_the_summary_and_the_engine(
    tmp_path: Path,
) -> None:
    from taskloom.testing import FunctionModel

    answers = iter([Turn(tool_calls=[ToolCall("TodoWrite", {"todos": TODOS})]), "listed", "ok"])

    async def respond(request: Any) -> Turn | str:
        if request.metadata.get("purpose") == "compact":
            return "<summary>1. The user asked for a fix.</summary>"
        return next(answers)

    async with taskloom.Harness(model=FunctionModel(respond), cwd=tmp_path) as h:
        [e async for e in h.run("go")]
        await h.compact()
        head = h.session.engine.messages[0]
        texts = [b.text for b in head.content if isinstance(b, TextBlock)]
        # The list is in the summary message (whatever turns are kept), and the engine keeps it.
        assert any("Fixing the bug" in t for t in texts)
        assert (
            TodoList.from_messages(h.session.engine.messages).items == h.session.engine.todos.items
        )
        assert h.session.engine.todos.active is not None
        await h.end()


async def test_nobody_to_approve_a_plan_means_no_plan_mode(tmp_path: Path) -> None:
    # Headless and allowed everything: entering plan mode would shut edits off for good.
    events, (_, mode, _) = await run(
        tmp_path,
        [
            Turn(tool_calls=[ToolCall("EnterPlanMode", {})]),
            Turn(tool_calls=[ToolCall("Write", {"file_path": "a.txt", "content": "x"})]),
            "ok",
        ],
        skip_permissions=True,
    )
    (_, entered, refused), (_, _, write_failed) = results(events)
    assert refused and "nobody could approve the plan" in entered
    assert not write_failed and (tmp_path / "a.txt").read_text() == "x"
    assert mode == "bypassPermissions"
