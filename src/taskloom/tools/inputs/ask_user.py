"""Input models of :mod:`taskloom.tools.ask_user` (imported on first use)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from taskloom.tools.inputs import ToolInput


class QuestionOption(ToolInput):
    """One choice of a question."""

    label: str = Field(
        description=(
            "The display text for this option that the user will see and select. Should be "
            "concise (1-5 words) and clearly describe the choice."
        )
    )
    description: str = Field(
        description=(
            "Explanation of what this option means or what will happen if chosen. Useful for "
            "providing context about trade-offs or implications."
        )
    )


class Question(ToolInput):
    """One question."""

    question: str = Field(
        description=(
            "The complete question to ask the user. Should be clear, specific, and end with a "
            "question mark."
        )
    )
    header: str = Field(
        description=(
            'Very short label displayed as a chip/tag (max 12 chars). Examples: "Auth method", '
            '"Library", "Approach".'
        )
    )
    options: list[QuestionOption] = Field(
        min_length=2,
        max_length=4,
        description=(
            "The available choices for this question. Must have 2-4 options. There should be "
            "no 'Other' option, that will be provided automatically."
        ),
    )
    multiSelect: bool = Field(  # Claude Code's field name
        default=False,
        description=(
            "Set to true to allow the user to select multiple options instead of just one."
        ),
    )

    @model_validator(mode="after")
    def _distinct_labels(self) -> Self:
        labels = [o.label for o in self.options]
        if len(set(labels)) != len(labels):
            raise ValueError("option labels must be unique within each question")
        return self


class AskUserQuestionInput(ToolInput):
    """AskUserQuestion's input."""

    questions: list[Question] = Field(
        min_length=1, max_length=4, description="Questions to ask the user (1-4 questions)"
    )
    answers: dict[str, str] | None = Field(
        default=None, description="User answers collected by the permission component"
    )

    @model_validator(mode="after")
    def _distinct_questions(self) -> Self:
        texts = [q.question for q in self.questions]
        if len(set(texts)) != len(texts):
            raise ValueError("question texts must be unique")
        return self
