"""AskUserQuestion: multiple-choice questions for the user, as in Claude Code.

Only someone asked can answer (the tool's approval is ``person``): the REPL's user, or the
program's ``can_use_tool`` callback, which answers by allowing the call with the answers in
its ``updatedInput.answers`` — an object mapping each question's text to the label chosen
(several labels of a multi-select question joined with ``", "``, or the user's own words). A
PermissionRequest or PreToolUse hook may answer the same way. With nobody to ask (a headless
run, or dontAsk mode) the call is a tool error saying so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.tools.inputs.ask_user import AskUserQuestionInput, Question

#: Claude Code's answer when the user refused the call with no words of their own.
REJECTED = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
    "was a file edit, the new_string was NOT written to the file). STOP what you are doing and "
    "wait for the user to tell you how to proceed."
)

DESCRIPTION = """\
Use this tool when you need to ask the user questions during execution. This allows you to:
1. Gather user preferences or requirements
2. Clarify ambiguous instructions
3. Get decisions on implementation choices as you work
4. Offer choices to the user about what direction to take.

Usage notes:
- Users will always be able to select "Other" to provide custom text input
- Use multiSelect: true to allow multiple answers to be selected for a question
- If you recommend a specific option, make that the first option in the list and add \
"(Recommended)" at the end of the label
- Ask 1 to 4 questions at a time, each with 2 to 4 options"""


#: :class:`AskUserQuestionInput`'s closed schema written out (see ``Tool.static_schema``):
#: offered at every start-up, it is not generated then.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "AskUserQuestion's input.",
    "properties": {
        "questions": {
            "description": "Questions to ask the user (1-4 questions)",
            "items": {
                "additionalProperties": False,
                "description": "One question.",
                "properties": {
                    "question": {
                        "description": "The "
                        "complete "
                        "question "
                        "to ask "
                        "the user. "
                        "Should be "
                        "clear, "
                        "specific, "
                        "and end "
                        "with a "
                        "question "
                        "mark.",
                        "type": "string",
                    },
                    "header": {
                        "description": "Very short "
                        "label "
                        "displayed "
                        "as a "
                        "chip/tag "
                        "(max 12 "
                        "chars). "
                        "Examples: "
                        '"Auth '
                        'method", '
                        '"Library", '
                        '"Approach".',
                        "type": "string",
                    },
                    "options": {
                        "description": "The "
                        "available "
                        "choices "
                        "for this "
                        "question. "
                        "Must have "
                        "2-4 "
                        "options. "
                        "There "
                        "should be "
                        "no 'Other' "
                        "option, "
                        "that will "
                        "be "
                        "provided "
                        "automatically.",
                        "items": {
                            "additionalProperties": False,
                            "description": "One choice of a question.",
                            "properties": {
                                "label": {
                                    "description": "The "
                                    "display "
                                    "text "
                                    "for "
                                    "this "
                                    "option "
                                    "that "
                                    "the "
                                    "user "
                                    "will "
                                    "see "
                                    "and "
                                    "select. "
                                    "Should "
                                    "be "
                                    "concise "
                                    "(1-5 "
                                    "words) "
                                    "and "
                                    "clearly "
                                    "describe "
                                    "the "
                                    "choice.",
                                    "type": "string",
                                },
                                "description": {
                                    "description": "Explanation "
                                    "of "
                                    "what "
                                    "this "
                                    "option "
                                    "means "
                                    "or "
                                    "what "
                                    "will "
                                    "happen "
                                    "if "
                                    "chosen. "
                                    "Useful "
                                    "for "
                                    "providing "
                                    "context "
                                    "about "
                                    "trade-offs "
                                    "or "
                                    "implications.",
                                    "type": "string",
                                },
                            },
                            "required": ["label", "description"],
                            "type": "object",
                        },
                        "maxItems": 4,
                        "minItems": 2,
                        "type": "array",
                    },
                    "multiSelect": {
                        "default": False,
                        "description": "Set to "
                        "true "
                        "to "
                        "allow "
                        "the "
                        "user "
                        "to "
                        "select "
                        "multiple "
                        "options "
                        "instead "
                        "of "
                        "just "
                        "one.",
                        "type": "boolean",
                    },
                },
                "required": ["question", "header", "options"],
                "type": "object",
            },
            "maxItems": 4,
            "minItems": 1,
            "type": "array",
        },
        "answers": {
            "additionalProperties": {"type": "string"},
            "type": "object",
            "description": "User answers collected by the permission component",
        },
    },
    "required": ["questions"],
    "type": "object",
}


class AskUserQuestionTool(Tool["AskUserQuestionInput"]):
    """Asks the user; the answers come back in the input (see the module docstring)."""

    name = "AskUserQuestion"
    description = DESCRIPTION
    input_model = "taskloom.tools.inputs.ask_user:AskUserQuestionInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "read"
    approval = "person"

    def denied_message(self, params: AskUserQuestionInput, reason: str, rule: Any) -> str:
        """Nobody could be asked (non-interactive, or dontAsk): the model decides alone."""
        if rule is not None:
            return reason
        return (
            "AskUserQuestion cannot be answered in this session: it runs non-interactively "
            "with no one to ask (no --permission-prompt-tool), or in dontAsk mode. Go on with "
            "your best judgement and say in your answer what you assumed."
        )

    def refused_message(self, params: AskUserQuestionInput, message: str) -> str:
        """The user declined to answer (the program's words, if it gave any)."""
        return message or REJECTED

    async def call(self, params: AskUserQuestionInput, ctx: ToolContext) -> ToolResult:
        """Report the answers the one asked gave."""
        answers = params.answers
        if not answers:
            return tool_error(
                "AskUserQuestion was allowed without answers: whoever approved the call gave "
                "no updatedInput.answers (an object mapping each question to the answer)."
            )
        # Claude Code's form: every answer given, keyed as the one asked keyed it.
        pairs = [f'"{question}"="{answer}"' for question, answer in answers.items()]
        data = {
            "questions": [q.model_dump() for q in params.questions],
            "answers": dict(answers),
        }
        return ToolResult(
            f"User has answered your questions: {', '.join(pairs)}. You can now continue with "
            "the user's answers in mind.",
            data=data,
            response=data,
        )


def answer_text(question: Question, chosen: list[int], own: str = "") -> str:
    """An answer as ``answers`` carries it: the labels chosen (1-based), then the user's words."""
    parts = [question.options[i - 1].label for i in chosen]
    if own:
        parts.append(own)
    return ", ".join(parts)


__all__ = ["AskUserQuestionTool", "answer_text"]
