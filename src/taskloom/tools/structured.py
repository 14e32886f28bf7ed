"""StructuredOutput: the final answer as JSON that a given schema accepts (``--json-schema``).

The model is offered a tool whose input schema is the caller's schema, and told to call it once,
at the end, with its answer. The input is checked against the schema (``jsonschema``); a call
that fails the check is a tool error naming what is wrong, so the model can try again. The
accepted value is kept in :attr:`StructuredOutput.value` for the run's result.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, ClassVar

from taskloom.errors import UsageError
from taskloom.messages import INVALID_INPUT_KEY
from taskloom.tools.base import Tool, ToolContext, ToolKind, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.tools.inputs.structured import StructuredValue

NAME = "StructuredOutput"
DESCRIPTION = (
    "Use this tool to return your final response in the requested structured format. You "
    "MUST call this tool exactly once at the end of your response to provide the structured "
    "output."
)
#: What the model is told when it ends a turn without an accepted StructuredOutput call.
REMINDER = (
    f"You must call the {NAME} tool now, once, with your final response as its input, in the "
    "format its schema requires."
)
#: Reminders before the run gives up (``error_max_structured_output_retries``).
MAX_REMINDERS = 3


def check_schema(schema: Any) -> dict[str, Any]:
    """``schema`` if it is a JSON Schema object for the answer.

    Raises:
        UsageError: Not an object, or not a valid JSON Schema.
    """
    import jsonschema

    if not isinstance(schema, dict):
        raise UsageError(f"--json-schema must be a JSON object, not {type(schema).__name__}")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise UsageError(f"--json-schema is not a valid JSON Schema: {exc.message}") from None
    return schema


class StructuredOutput(Tool["StructuredValue"]):
    """The structured final answer of one session."""

    name: ClassVar[str] = NAME
    description: ClassVar[str] = DESCRIPTION
    input_model = "taskloom.tools.inputs.structured:StructuredValue"
    kind: ClassVar[ToolKind] = "read"  # it only hands its input back: nothing to approve

    def __init__(self, schema: dict[str, Any]) -> None:
        """Accept answers that ``schema`` (checked with :func:`check_schema`) accepts."""
        import jsonschema

        self.schema = schema
        self._validator = jsonschema.validators.validator_for(schema)(schema)
        #: The last accepted answer, None until one is.
        self.value: dict[str, Any] | None = None

    def input_schema(self) -> dict[str, Any]:
        """The caller's schema, as given (a copy)."""
        return copy.deepcopy(self.schema)

    def validate(self, raw: Any) -> StructuredValue | ToolResult:
        """Check the answer against the schema; every violation is named."""
        if not isinstance(raw, dict) or INVALID_INPUT_KEY in raw:
            return tool_error(f"InputValidationError: {NAME} input must be a JSON object")
        errors = sorted(self._validator.iter_errors(raw), key=lambda e: list(e.path))
        if errors:
            lines = [f"{'.'.join(str(p) for p in e.path) or 'input'}: {e.message}" for e in errors]
            return tool_error(
                f"Output does not match the required schema: {'; '.join(lines)}. Call {NAME} "
                "again with a corrected answer."
            )
        from taskloom.tools.inputs.structured import StructuredValue

        return StructuredValue.model_construct(value=dict(raw))

    async def call(self, params: StructuredValue, ctx: ToolContext) -> ToolResult:
        """Keep the answer."""
        self.value = params.value
        return ToolResult("Structured output provided successfully", data=params.value)
