"""The REPL's questions that are more than "allow this call?": a plan, and the model's questions.

Both come through the permission queue (:mod:`taskloom.repl.asks`), as the calls they are.

- **ExitPlanMode** shows the plan: ``1`` approves it (the session goes back to the mode plan mode
  was entered from), ``2`` approves it and accepts edits from now on (``acceptEdits``), ``3``
  keeps planning, with what to change typed for the model, Esc keeps planning and stops the turn.
- **AskUserQuestion** shows its questions one at a time (:class:`QuestionForm`): the user types
  an option's number (several for a multi-select question: ``1 3``), or an answer of their own,
  and Enter; once every question has its answer the call goes on with them. Esc declines.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from taskloom.tools.ask_user import answer_text
from taskloom.tools.inputs.ask_user import AskUserQuestionInput, Question

PLAN_TOOL = "ExitPlanMode"
QUESTION_TOOL = "AskUserQuestion"
#: The most lines of a plan the question shows (the rest is cut, and said so).
PLAN_LINES = 20

Line = tuple[str, str]


class QuestionForm:
    """The answers to one AskUserQuestion call, typed one question at a time.

    Args:
        tool_input: The call's input (validated: 1-4 questions of 2-4 options).
    """

    def __init__(self, tool_input: dict[str, Any]) -> None:
        self.tool_input = tool_input
        self.questions: list[Question] = AskUserQuestionInput.model_validate(tool_input).questions
        #: Each answered question's answer, by its text (Claude Code's ``answers``).
        self.answers: dict[str, str] = {}

    @classmethod
    def of(cls, tool_name: str, tool_input: dict[str, Any]) -> QuestionForm | None:
        """The form of an AskUserQuestion call; None for any other (or an input it refuses)."""
        if tool_name != QUESTION_TOOL:
            return None
        try:
            return cls(tool_input)
        except ValidationError:
            return None

    @property
    def current(self) -> Question | None:
        """The question to answer now; None once all are answered."""
        index = len(self.answers)
        return self.questions[index] if index < len(self.questions) else None

    @property
    def done(self) -> bool:
        """Whether every question has its answer."""
        return self.current is None

    def take(self, text: str) -> str | None:
        """Answer the current question with what the user typed; why not, if it cannot be."""
        question = self.current
        text = text.strip()
        if question is None:
            return None
        if not text:
            return "Type an option's number, or your own answer."
        tokens = re.split(r"[,\s]+", text)
        if all(t.isdigit() for t in tokens):
            chosen = [int(t) for t in tokens]
            count = len(question.options)
            if any(not 1 <= n <= count for n in chosen):
                return f"Choose a number from 1 to {count}, or type your own answer."
            if len(chosen) > 1 and not question.multiSelect:
                return "Choose one option here: this question takes a single answer."
            self.answers[question.question] = answer_text(question, list(dict.fromkeys(chosen)))
            return None
        self.answers[question.question] = text
        return None

    def updated_input(self) -> dict[str, Any]:
        """The call's input with the answers, as the tool takes them."""
        return {**self.tool_input, "answers": dict(self.answers)}

    def lines(self, settled: bool) -> list[Line]:
        """The current question, its options, and how to answer."""
        question = self.current
        if question is None:
            return []
        many = len(self.questions) > 1
        where = f" (question {len(self.answers) + 1} of {len(self.questions)})" if many else ""
        out: list[Line] = [("ask", f"[{question.header}] {question.question}{where}")]
        for n, option in enumerate(question.options, 1):
            out.append(("", f"  {n}. {option.label} — {option.description}"))
        several = " (several: 1 3)" if question.multiSelect else ""
        hint = f"  Type a number{several}, or your own answer, then Enter · Esc declines"
        out.append(("", hint if settled else "  …"))
        return out


def plan_lines(tool_input: dict[str, Any], settled: bool, reasoning: bool) -> list[Line]:
    """ExitPlanMode's question: the plan (at most :data:`PLAN_LINES` lines) and the choices."""
    plan = str(tool_input.get("plan", "")).rstrip().splitlines()
    out: list[Line] = [("ask", "Here is the plan. Approve it and start?")]
    out += [("", f"  {line}") for line in plan[:PLAN_LINES]]
    if len(plan) > PLAN_LINES:
        out.append(("note", f"  … {len(plan) - PLAN_LINES} more lines"))
    if reasoning:
        out.append(("", "  What should change? Type it for the model and press Enter"))
    elif not settled:
        out.append(("", "  …"))
    else:
        out.append(
            (
                "",
                "  1 yes · 2 yes, and accept edits from now on · 3 no, keep planning (say what to "
                "change) · Esc no, and stop",
            )
        )
    return out


__all__ = ["PLAN_TOOL", "QUESTION_TOOL", "QuestionForm", "plan_lines"]
