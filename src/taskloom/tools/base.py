"""The Tool base: typed input, JSON schema, flags, and the context a call runs in.

A tool has a pydantic ``Input`` model. Its JSON schema (what the model is offered) has
``additionalProperties: false`` at every object level. Raw input from the model is validated
before the call; a failure becomes a tool error that names each offending field, so the model
can correct itself — it never reaches ``call`` and never raises out of the engine.

Input models off the start-up path: a session imports every built-in tool to offer it, and
offering needs only the schema, which the built-in tools write out (``static_schema``).
Importing pydantic and defining some forty models would cost every run, most of which call few
tools, tens of milliseconds before its first request; so a built-in tool names its model
instead of importing it::

    if TYPE_CHECKING:
        from taskloom.tools.inputs.glob import GlobInput

    class Glob(Tool["GlobInput"]):
        input_model = "taskloom.tools.inputs.glob:GlobInput"
        static_schema = (input_model, INPUT_SCHEMA)

and ``Glob.Input`` (or ``tool.Input``) imports ``taskloom.tools.inputs.glob`` when first read:
by the first call's validation, or a schema generated. The input modules are the only ones of
a tool that import pydantic (see :mod:`taskloom.tools.inputs`), and neither does this module:
:class:`ToolInput` lives there (named here on first use), and :func:`describe_errors` and
:meth:`Tool.validate` import pydantic's ``ValidationError`` only once a model has been loaded.
A tool defined elsewhere (a function tool, an MCP tool, a library's) sets ``Input`` to its
model class directly, as before; ``Input`` set in a class wins over ``input_model``.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from taskloom._dataclass import dataclass
from taskloom.errors import clipped
from taskloom.messages import TextBlock, ToolResultBlock
from taskloom.models.base import INVALID_INPUT_KEY, ToolSpec

# Defined with the permission rules, which decide by it; re-exported for tools.
from taskloom.permissions.rules import Approval as Approval
from taskloom.permissions.rules import ToolKind as ToolKind
from taskloom.tools.overflow import DEFAULT_MAX_RESULT_CHARS, bounded

if TYPE_CHECKING:
    from pydantic import ValidationError

    from taskloom.messages import ToolResultContent
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tools.backends import CommandRunner, TextFiles
    from taskloom.tools.inputs import ToolInput as ToolInput
    from taskloom.tools.workdir import WorkingDirectory


def __getattr__(name: str) -> Any:
    """``ToolInput``, imported (with pydantic) when first named: see the module docstring."""
    if name == "ToolInput":
        from taskloom.tools.inputs import ToolInput

        return ToolInput
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


InputT = TypeVar("InputT", bound="ToolInput")


@dataclass(slots=True)
class ToolResult:
    """What a tool returns.

    Attributes:
        content: The text the model sees.
        is_error: Whether it is reported to the model as an error.
        data: Structured detail for programmatic consumers (``stream-json``), optional.
        blocks: Content blocks the model sees after ``content`` (an image Read shows), in
            the canonical (Anthropic) form; ``content`` stays the text hooks and logs see.
        response: The result in Claude Code's shape for this tool, the ``tool_response``
            PostToolUse hooks see (built by :mod:`taskloom.tools.responses`); None: hooks
            see ``data``, or ``content``.
    """

    content: str
    is_error: bool = False
    data: dict[str, Any] | None = None
    blocks: list[ToolResultContent] | None = None
    response: dict[str, Any] | None = None

    def block(self, tool_use_id: str) -> ToolResultBlock:
        """The ``tool_result`` block answering call ``tool_use_id`` with this result."""
        # Tool output can carry undecodable bytes (as lone surrogates, e.g. from file
        # names); they would break the JSON of transcripts and requests.
        text = self.content.encode("utf-8", "replace").decode("utf-8")
        content: str | list[ToolResultContent] = text
        if self.blocks:  # e.g. an image: the text first (the API refuses an empty text block)
            content = [*([TextBlock(text=text)] if text else []), *self.blocks]
        return ToolResultBlock(tool_use_id=tool_use_id, content=content, is_error=self.is_error)


@dataclass(slots=True)
class FileState:
    """What this agent has read, so Edit/Write can insist on a read first (and notice changes).

    Maps absolute paths to the file's mtime (ns) when it was read or last written by us.
    """

    seen: dict[str, int] = field(default_factory=dict)

    def clone(self) -> FileState:
        """An independent copy (a subagent starts from its parent's knowledge)."""
        return FileState(dict(self.seen))


@dataclass(slots=True)
class ToolContext:
    """Where and for whom a tool call runs.

    Attributes:
        runtime: The session's task runtime.
        owner: The agent id (or session id for the main thread) that makes the call.
        cwd: Where the agent stands: its shell's working directory (a ``cd`` in a Bash call
            holds for its next calls), against which relative paths are resolved.
        tool_use_id: The id of the ``tool_use`` block being answered.
        files: What this agent has read.
        agent_id: The calling subagent's id, None on the main thread.
        settings: Effective settings (a merged dict).
        engine: The calling agent's engine (a fork copies its prompt, tools and history).
        read_denied: Whether a Read deny rule covers a path; search tools leave such files
            out of their results (best effort, as in Claude Code).
        workdir: The agent's shell directory, which Bash moves (None: a call outside an
            engine; the command runs at ``cwd`` and its ``cd`` is not kept).
        rules_base: The directory permission rules and ``acceptEdits`` are relative to: the
            project (or the agent's worktree), wherever its shell stands; None: ``cwd``.
        hook_response: Whether a PostToolUse hook will read the result in Claude Code's shape
            (:attr:`ToolResult.response`): the tools whose shape costs work of its own (Write
            and Edit read and diff the file) build it only then. The engine says; a caller
            outside one gets it.
        text_files: Where Read, Write and Edit find text files when not on the local disk
            (an editor's buffers); None: the disk.
        commands: Where Bash runs a foreground command when not as a local shell task (an
            editor's terminal); None: locally.
        sandboxed: The agent is read-only: its shell commands (Bash, Monitor, a skill's
            ``!`cmd```) run locally in a sandbox that lets them write nothing but a scratch
            ``TMPDIR`` (see :func:`taskloom.tasks.shell.run_shell`).
    """

    runtime: TaskRuntime
    owner: str
    cwd: Path
    tool_use_id: str = ""
    files: FileState = field(default_factory=FileState)
    agent_id: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    engine: Any = None
    read_denied: Callable[[str], bool] | None = None
    workdir: WorkingDirectory | None = None
    rules_base: Path | None = None
    hook_response: bool = True
    text_files: TextFiles | None = None
    commands: CommandRunner | None = None
    sandboxed: bool = False


#: Longest tool error a model is shown. Errors quote what they refuse cut short (see
#: :func:`taskloom.errors.quoted`); this bounds the rest (an exception's text, a hook's
#: reason), whose middle is cut.
MAX_TOOL_ERROR_CHARS = 10_000


def tool_error(message: str) -> ToolResult:
    """A tool error in the form Claude Code shows models (over 10,000 characters: cut)."""
    return ToolResult(f"<tool_use_error>{clip_error(message)}</tool_use_error>", is_error=True)


def clip_error(message: str) -> str:
    """``message`` with its middle cut when over :data:`MAX_TOOL_ERROR_CHARS`."""
    if len(message) <= MAX_TOOL_ERROR_CHARS:
        return message
    half = MAX_TOOL_ERROR_CHARS // 2
    cut = len(message) - 2 * half
    return f"{message[:half]}\n… [{cut:,} characters cut] …\n{message[-half:]}"


class _NamedInput:
    """``Tool.Input`` of a tool that names its model (``input_model``): imported when read."""

    def __get__(self, tool: object, owner: type[Tool[Any]]) -> type[ToolInput]:
        where = owner.input_model
        if where is None:
            raise AttributeError(f"{owner.__name__} has neither Input nor input_model")
        model = _loaded.get(where)
        if model is None:
            module, _, name = where.partition(":")
            model = _loaded[where] = getattr(importlib.import_module(module), name)
        return model


#: The models named by ``input_model`` loaded so far, by that name.
_loaded: dict[str, type[ToolInput]] = {}


class Tool(ABC, Generic[InputT]):
    """A model-facing tool.

    Subclasses set ``name``, ``description``, ``Input`` (or ``input_model``), ``kind`` and the
    flags, and implement :meth:`call`.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    if TYPE_CHECKING:
        #: The input model: set by the class, or imported from :attr:`input_model`.
        Input: ClassVar[type[ToolInput]]
    else:
        Input = _NamedInput()
    #: ``"module:Class"``: where the input model is, imported when ``Input`` is first read
    #: (see the module docstring). Used while the class sets no ``Input`` itself.
    input_model: ClassVar[str | None] = None
    kind: ClassVar[ToolKind] = "other"
    #: Who may approve a call beyond its kind: ``ask`` and ``person`` tools ask (see
    #: :data:`~taskloom.permissions.rules.Approval`).
    approval: ClassVar[Approval] = "rules"
    #: Older names models still call it by (``Task`` for Agent); never offered.
    aliases: ClassVar[tuple[str, ...]] = ()
    #: Its maker declares that it changes nothing (an MCP server's ``readOnlyHint``): a
    #: read-only agent is offered, and may call, an MCP tool only when this is true.
    declared_read_only: ClassVar[bool] = False
    #: Safe to run at the same time as other concurrency-safe calls of the same message.
    concurrency_safe: ClassVar[bool] = False
    #: Longest text result shown inline (characters); a longer one is saved to a file and
    #: previewed (:mod:`taskloom.tools.overflow`). None: the tool bounds its results itself.
    max_result_chars: ClassVar[int | None] = DEFAULT_MAX_RESULT_CHARS
    #: ``(model, schema)``: the closed schema of the input model written out, for the tools
    #: offered at every start-up: generating it would import and build the model. ``model``
    #: is the class's ``input_model`` (or its ``Input``); the schema is used only while the
    #: class's input is that model (a subclass setting another ``Input`` gets its own).
    static_schema: ClassVar[tuple[str | type[ToolInput], dict[str, Any]] | None] = None
    _schema_cache: ClassVar[dict[type, dict[str, Any]]] = {}

    def input_schema(self) -> dict[str, Any]:
        """The JSON schema of the input, closed at every level (a copy, to change)."""
        return copy.deepcopy(self._class_schema())

    def _class_schema(self) -> dict[str, Any]:
        """The schema of the class's ``Input``, made once: shared, never to be changed."""
        cls = type(self)
        cached = Tool._schema_cache.get(cls)
        if cached is None:
            static = self.static_schema
            if static is not None and static[0] == input_key(cls):
                cached = static[1]
            else:
                cached = generated_schema(self.Input)
            Tool._schema_cache[cls] = cached
        return cached

    def spec(self) -> ToolSpec:
        """How the tool is offered to the model.

        A tool that does not change its schema offers the class's own, shared by every
        request of every agent (see :class:`~taskloom.models.base.ToolSpec`): a fan-out's
        thousands of agents each make requests, and copies would cost each the schemas.
        """
        if type(self).input_schema is Tool.input_schema:
            return ToolSpec(self.name, self.description, self._class_schema())
        return ToolSpec(self.name, self.description, self.input_schema())

    def validate(self, raw: Any) -> InputT | ToolResult:
        """Parse the model's input; on failure return a tool error naming every bad field."""
        if not isinstance(raw, dict):
            return tool_error(
                f"InputValidationError: {self.name} input must be a JSON object, "
                f"got {type(raw).__name__}"
            )
        if INVALID_INPUT_KEY in raw:
            return tool_error(
                f"InputValidationError: {self.name} input must be a JSON object, got: "
                f"{clipped(str(raw[INVALID_INPUT_KEY]))}"
            )
        model = self.Input  # imports pydantic with it, if a named model
        from pydantic import ValidationError

        try:
            return model.model_validate(raw)  # type: ignore[return-value]
        except ValidationError as exc:
            return tool_error(f"InputValidationError: {self.name}: {describe_errors(exc)}")

    def call_approval(self, params: InputT) -> Approval:
        """Who may approve this call beyond its kind (default: the tool's :attr:`approval`)."""
        return self.approval

    def permission_target(self, params: InputT, ctx: ToolContext) -> str | None:
        """What permission rules match against (a command, a path); None for nothing."""
        return None

    def permission_tool(self, params: InputT) -> tuple[str, ToolKind]:
        """The tool name and kind permission rules take this call for (default: its own).

        A call that runs code the model wrote (a workflow script) is decided as that code's
        Bash command would be.
        """
        return self.name, self.kind

    def denied_message(self, params: InputT, reason: str, rule: Any) -> str:
        """What the model is told when the permission policy refuses a call."""
        return reason

    def refused_message(self, params: InputT, message: str) -> str:
        """What the model is told when the one asked refused the call (``message``: theirs)."""
        return message or f"Permission to use {self.name} was denied."

    @abstractmethod
    async def call(self, params: InputT, ctx: ToolContext) -> ToolResult:
        """Run the tool. Expected failures are returned as errors, not raised."""


def bounded_result(
    tool: Tool[Any], result: ToolResult, directory: Path, tool_use_id: str
) -> ToolResult:
    """``result`` as the model is shown it: within ``tool``'s inline limit.

    Text over the limit is saved under ``directory`` and previewed; an error has its middle
    cut instead (an MCP server's or a library tool's, as :func:`tool_error` cuts ours). A
    tool with no limit bounds its own results, errors included (a failed command's output).
    """
    limit = tool.max_result_chars
    if limit is None:
        return result
    if result.is_error:
        # Ours are cut already, inside their <tool_use_error> wrapper: leave them whole.
        if len(result.content) > MAX_TOOL_ERROR_CHARS + 100:
            result = dataclasses.replace(result, content=clip_error(result.content))
        return result
    if len(result.content) <= limit:
        return result
    return dataclasses.replace(
        result, content=bounded(result.content, limit, directory, tool_use_id)
    )


def by_name(tools: Sequence[Tool[Any]]) -> dict[str, Tool[Any]]:
    """``tools`` by the names a call may use: each one's own, then its older names.

    An older name never hides a tool offered under that name.
    """
    table = {t.name: t for t in tools}
    for tool in tools:
        for alias in tool.aliases:
            table.setdefault(alias, tool)
    return table


def input_key(cls: type[Tool[Any]]) -> str | type[ToolInput] | None:
    """What names ``cls``'s input model without importing it (:attr:`Tool.static_schema`'s key).

    The ``Input`` the class (or its nearest base that sets one) sets, else its
    ``input_model``.
    """
    for klass in cls.__mro__:
        declared = vars(klass).get("Input")
        if isinstance(declared, _NamedInput):
            return cls.input_model
        if declared is not None:
            return declared  # type: ignore[no-any-return]
    return None


def generated_schema(model: type[ToolInput]) -> dict[str, Any]:
    """``model``'s JSON schema as offered to models: ``$defs`` inlined, every object closed."""
    return _close_objects(model.model_json_schema())


def describe_errors(exc: ValidationError) -> str:
    """One readable line per error, each naming the field (``timeout: ...``)."""
    parts = []
    for err in exc.errors():
        where = clipped(".".join(str(p) for p in err["loc"])) or "input"  # a model's key
        if err["type"] == "extra_forbidden":
            parts.append(f"{where}: unexpected field")
        elif err["type"] == "missing":
            parts.append(f"{where}: required field is missing")
        else:
            parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def _close_objects(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline ``$defs`` and set ``additionalProperties: false`` on every object."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(copy.deepcopy(defs[ref.removeprefix("#/$defs/")]))
            out = {k: walk(v) for k, v in node.items() if k != "title"}
            options = out.get("anyOf")
            if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
                # ``x: T | None = None`` is an optional T for the model, not a nullable one.
                (kept,) = [o for o in options if o != {"type": "null"}]
                del out["anyOf"]
                out = {**kept, **out}
                if out.get("default", 0) is None:
                    del out["default"]
            if out.get("type") == "object":
                out.setdefault("additionalProperties", False)
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    closed: dict[str, Any] = walk(schema)
    return closed
