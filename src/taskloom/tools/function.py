"""``@taskloom.tool``: a typed Python function as a model-facing tool.

The parameters' annotations and defaults become the input schema (validated before the call,
like every tool's), the docstring's first paragraph the description, and the entries of its
Google-style argument section the fields' descriptions::

    @taskloom.tool
    def word_count(path: str, unique: bool = False) -> str:
        '''Count the words of a text file.'''

A parameter annotated :class:`~taskloom.tools.base.ToolContext` receives the call's context
and is not part of the schema. The function may be ``async``. It returns a ``str`` (what the
model sees), a :class:`~taskloom.tools.base.ToolResult`, or anything JSON can encode; an
exception it raises becomes a tool error naming it, never a crash of the run.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from typing import Any, get_type_hints

from pydantic import Field, create_model

from taskloom.tools.base import Tool, ToolContext, ToolInput, ToolKind, ToolResult, tool_error

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    kind: ToolKind = "other",
    concurrency_safe: bool = False,
) -> Any:
    """Turn a typed function into a tool; use bare (``@tool``) or with options.

    Args:
        fn: The function.
        name: The tool's name (default: the function's).
        description: What the model is told (default: the docstring's first paragraph).
        kind: ``read``, ``edit``, ``execute`` or ``other``, for permission modes: ``read``
            runs without asking; ``execute`` always needs a rule (``Tool(name)``) or a bypass.
        concurrency_safe: The tool may run beside other such calls of the same message.

    Returns:
        A :class:`~taskloom.tools.base.Tool` (or, with options only, a decorator making one).

    Raises:
        TypeError: A parameter has no annotation, or the name is not a valid tool name.
    """

    def make(func: Callable[..., Any]) -> Tool[Any]:
        return _function_tool(func, name, description, kind, concurrency_safe)

    return make(fn) if fn is not None else make


def _function_tool(
    func: Callable[..., Any],
    name: str | None,
    description: str | None,
    kind: ToolKind,
    concurrency_safe: bool,
) -> Tool[Any]:
    tool_name = name or func.__name__
    if not _NAME.fullmatch(tool_name):
        raise TypeError(f"tool name {tool_name!r} must match [A-Za-z0-9_-]{{1,64}}")
    summary, arg_docs = _parse_docstring(inspect.getdoc(func) or "")
    hints = get_type_hints(func)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name}: *args and **kwargs cannot be offered to a model")
        annotation = hints.get(param.name)
        if annotation is None:
            raise TypeError(f"tool {tool_name}: parameter {param.name!r} needs a type annotation")
        if annotation is ToolContext:
            context_param = param.name
            continue
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, Field(default, description=arg_docs.get(param.name)))
    model = create_model(f"{tool_name}_input", __base__=ToolInput, **fields)

    class FunctionTool(Tool[Any]):
        async def call(self, params: Any, ctx: ToolContext) -> ToolResult:
            kwargs = {field: getattr(params, field) for field in fields}
            if context_param is not None:
                kwargs[context_param] = ctx
            try:
                value = func(**kwargs)
                if inspect.isawaitable(value):
                    value = await value
            except Exception as exc:  # the model is told; the run goes on
                return tool_error(f"{tool_name} failed: {type(exc).__name__}: {exc}")
            if isinstance(value, ToolResult):
                return value
            if isinstance(value, str):
                return ToolResult(value)
            return ToolResult(json.dumps(value, ensure_ascii=False, default=str))

    FunctionTool.name = tool_name
    FunctionTool.description = description or summary or f"The {tool_name} function."
    FunctionTool.Input = model
    FunctionTool.kind = kind
    FunctionTool.concurrency_safe = concurrency_safe
    FunctionTool.__name__ = FunctionTool.__qualname__ = f"{tool_name}_tool"
    FunctionTool.__doc__ = func.__doc__
    return FunctionTool()


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph, and each ``Args:`` entry's text by parameter name.

    ``doc`` is dedented (``inspect.getdoc``): sections start at column 0, entries below.
    """
    first = doc.split("\n\n", 1)[0]
    summary = " ".join(first.split())
    args: dict[str, str] = {}
    current: str | None = None
    entry_indent: int | None = None
    in_args = False
    for line in doc.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if indent == 0 and stripped.endswith(":"):
            in_args, current = stripped in ("Args:", "Arguments:", "Parameters:"), None
            continue
        if not in_args or not stripped:
            continue
        entry = re.match(r"(\w+)(?:\s*\([^)]*\))?:\s*(.*)", stripped)
        if entry and (entry_indent is None or indent == entry_indent):
            entry_indent, current = indent, entry.group(1)
            args[current] = entry.group(2)
        elif current is not None:
            args[current] = f"{args[current]} {stripped}".strip()
    return summary, args
