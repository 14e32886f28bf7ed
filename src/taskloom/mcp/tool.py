"""A server's MCP tool offered to the model as a taskloom tool (``mcp__<server>__<tool>``).

The input schema is the server's, as given; the input is not checked against it here (any
JSON object is passed on) because the server validates it and answers with an error the
model can read.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

from taskloom._dataclass import dataclass
from taskloom.models.base import INVALID_INPUT_KEY
from taskloom.tools.base import Tool, ToolContext, ToolKind, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.mcp.inputs.tool import McpArguments


class McpCaller(Protocol):
    """What an MCP tool calls through (the session's :class:`~taskloom.mcp.manager.McpManager`)."""

    async def call(self, server: str, tool: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Call ``tool`` on ``server``; failures come back as tool errors."""
        ...


_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    """A tool as a server lists it.

    Attributes:
        name: The tool's name on the server.
        description: The server's description.
        input_schema: The server's JSON schema of the arguments.
        read_only: The server's annotations say ``readOnlyHint: true`` (a hint, which only
            narrows what a read-only agent is offered; it never lets a call skip a question).
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False


def mcp_tool_name(server: str, tool: str) -> str:
    """The model-facing name, ``mcp__<server>__<tool>``, with unsafe characters as ``_``.

    Model APIs accept only ``[A-Za-z0-9_-]`` in tool names; Claude Code normalises the same way.
    """
    return f"mcp__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"


class McpTool(Tool["McpArguments"]):
    """One tool of one MCP server; calls go through the :class:`McpManager`.

    Use :meth:`create`: ``name`` and ``description`` are class attributes in the Tool
    contract, so each MCP tool gets its own small subclass.
    """

    name: ClassVar[str] = "mcp"
    description: ClassVar[str] = "A tool of an MCP server."
    input_model = "taskloom.mcp.inputs.tool:McpArguments"
    # An MCP tool can do anything; the permission layer asks unless a rule allows it.
    kind: ClassVar[ToolKind] = "execute"

    def __init__(self, manager: McpCaller, server: str, info: McpToolInfo) -> None:
        self.manager = manager
        self.server = server
        self.info = info

    @classmethod
    def create(cls, manager: McpCaller, server: str, info: McpToolInfo) -> McpTool:
        """Build the tool for ``info`` listed by ``server``."""
        name = mcp_tool_name(server, info.name)
        description = info.description or f"Tool {info.name} of the MCP server {server}."
        fields = {"name": name, "description": description, "declared_read_only": info.read_only}
        sub = type(f"McpTool[{name}]", (cls,), fields)
        return cast("type[McpTool]", sub)(manager, server, info)

    def input_schema(self) -> dict[str, Any]:
        """The server's JSON schema, as given (a copy)."""
        return copy.deepcopy(self.info.input_schema)

    def validate(self, raw: Any) -> McpArguments | ToolResult:
        """Accept any JSON object; the server checks it against its schema."""
        if not isinstance(raw, dict):
            return tool_error(
                f"InputValidationError: {self.name} input must be a JSON object, "
                f"got {type(raw).__name__}"
            )
        if INVALID_INPUT_KEY in raw:
            return tool_error(
                f"InputValidationError: {self.name} input must be a JSON object, got: "
                f"{raw[INVALID_INPUT_KEY]}"
            )
        from taskloom.mcp.inputs.tool import McpArguments

        return McpArguments.model_construct(arguments=dict(raw))

    async def call(self, params: McpArguments, ctx: ToolContext) -> ToolResult:
        """Call the tool on its server."""
        return await self.manager.call(self.server, self.info.name, params.arguments)
