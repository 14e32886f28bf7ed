"""The ToolSearch tool: the schemas of deferred tools, found by name or by keywords.

When a session's MCP tools are many, their schemas are not sent with every request (see
:mod:`taskloom.tools.deferral`): the model is told their names only, in an
``<available-deferred-tools>`` message, and fetches the definitions of those it needs with
ToolSearch, as in Claude Code. Its query is ``select:A,B`` (these tools by name) or keywords
(``notebook jupyter``; ``+slack send`` requires ``slack`` in the name), scored as Claude Code
scores them: a word of the tool's name counts most, a part of one less, a word of its
description least. The matches come back as one ``<function>{"description", "name",
"parameters"}</function>`` line each inside a ``<functions>`` block (the text form Claude Code
uses with providers that cannot expand tool references); from then on each request carries
their schemas, so the model can call them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.tools.inputs.tool_search import ToolSearchInput

#: The tool's name (the request builder finds it by this name).
TOOL_SEARCH = "ToolSearch"
#: The answer when nothing matches (Claude Code's words).
NO_MATCH = "No matching deferred tools found"

_SELECT = re.compile(r"^select:(.+)$", re.IGNORECASE | re.DOTALL)
_FUNCTION = re.compile(r"<function>(.*?)</function>", re.DOTALL)
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")


#: :class:`ToolSearchInput`'s closed schema written out (see :attr:`Tool.static_schema`);
#: tests check it is the one generated, byte for byte.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`ToolSearchTool`.",
    "properties": {
        "query": {
            "description": 'What to look for among the deferred tools: "select:<tool_name>" '
            "(several separated by commas) to fetch tools by name, or keywords to search.",
            "type": "string",
        },
        "max_results": {
            "default": 5,
            "description": "The most tools a keyword search returns (default 5).",
            "minimum": 1,
            "type": "integer",
        },
    },
    "required": ["query"],
    "type": "object",
}


class ToolSearchTool(Tool["ToolSearchInput"]):
    """Finds deferred tools and gives their full definitions, which makes them callable.

    Args:
        tools: Every tool the agent has (a ``select:`` of a tool already offered finds it too).
        deferred: The names of the deferred tools: offered by name only until found.
    """

    name = TOOL_SEARCH
    description = (
        "Fetches the full definitions of deferred tools so that they can be called.\n\n"
        "Deferred tools are listed by name only, in <available-deferred-tools> messages. "
        "Until its definition is fetched a deferred tool has no parameter schema, and it "
        "cannot be called correctly. This tool matches a query against the deferred tools and "
        "returns the complete JSON Schema definition of each match inside a <functions> "
        "block; once a tool's definition has appeared there, call it like any tool defined at "
        "the top of the prompt.\n\n"
        'Result format: one <function>{"description": "...", "name": "...", "parameters": '
        "{...}}</function> line per matching tool inside the <functions> block, the encoding "
        "of the tool list at the top of the prompt.\n\n"
        "Query forms:\n"
        '- "select:Read,Edit,Grep": fetch exactly these tools, by name\n'
        '- "notebook jupyter": keyword search, the max_results best matches\n'
        '- "+slack send": "slack" must be in the name; the other words rank the matches'
    )
    input_model = "taskloom.tools.inputs.tool_search:ToolSearchInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "other"
    concurrency_safe = True
    #: Definitions are what it is for: a long answer is shown whole, never saved to a file.
    max_result_chars: ClassVar[int | None] = None

    def __init__(self, tools: Sequence[Tool[Any]], deferred: Collection[str]) -> None:
        self.tools = {t.name: t for t in tools if t.name != TOOL_SEARCH}
        self.deferred = tuple(name for name in self.tools if name in set(deferred))

    async def call(self, params: ToolSearchInput, ctx: ToolContext) -> ToolResult:
        """Find the tools the query names or describes; their definitions, or that none match."""
        query = params.query.strip()
        if not query:
            return tool_error("query must not be empty: give select:<tool_name> or keywords.")
        # A ToolSearch handed on with a list of tools (a teammate's, a fork's) finds only the
        # tools of the agent calling it.
        mine = getattr(getattr(ctx.engine, "config", None), "tools", None)
        search = self if mine is None else self.within({t.name for t in mine})
        selected = _SELECT.match(query)
        if selected is not None:
            matches = search.select(selected.group(1).split(","))
        else:
            matches = search.search(query, params.max_results)
        total = len(search.deferred)
        data = {"matches": matches, "query": params.query, "total_deferred_tools": total}
        if not matches:
            return ToolResult(NO_MATCH, data=data, response=data)
        return ToolResult(self.definitions(matches), data=data, response=data)

    def within(self, names: Collection[str]) -> ToolSearchTool:
        """The same search over only the tools named in ``names``."""
        kept = [tool for name, tool in self.tools.items() if name in names]
        return ToolSearchTool(kept, [name for name in self.deferred if name in names])

    def select(self, requested: Sequence[str]) -> list[str]:
        """The tools named in ``requested`` (exact names first, then ignoring case), once each."""
        lowered = {name.lower(): name for name in self.tools}
        found: list[str] = []
        for raw in requested:
            wanted = raw.strip()
            name = wanted if wanted in self.tools else lowered.get(wanted.lower())
            if name is not None and name not in found:
                found.append(name)
        return found

    def search(self, query: str, max_results: int) -> list[str]:
        """The deferred tools that best match the keywords of ``query``, best first."""
        lowered = query.lower()
        exact = [name for name in self.deferred if name.lower() == lowered]
        if exact:
            return exact
        if lowered.startswith("mcp__") and len(lowered) > len("mcp__"):
            prefixed = [name for name in self.deferred if name.lower().startswith(lowered)]
            if prefixed:
                return prefixed[:max_results]
        terms = lowered.split()
        required = [t[1:] for t in terms if t.startswith("+") and len(t) > 1]
        scoring = [t.lstrip("+") for t in terms if t.lstrip("+")]
        scored = []
        for index, name in enumerate(self.deferred):
            words = _name_words(name)
            text = self.tools[name].description.lower()
            if not all(_in_name(term, words) or _in_text(term, text) for term in required):
                continue
            score = sum(_score(term, name, words, text) for term in scoring)
            if score > 0:
                scored.append((-score, index, name))
        return [name for _, _, name in sorted(scored)[:max_results]]

    def definitions(self, names: Sequence[str]) -> str:
        """The ``<functions>`` block defining ``names``."""
        lines = [function_line(self.tools[name]) for name in names]
        return "<functions>\n" + "\n".join(lines) + "\n</functions>"


def function_line(tool: Tool[Any]) -> str:
    """``<function>{"description", "name", "parameters"}</function>``: one tool's definition."""
    spec = tool.spec()
    body = {"description": spec.description, "name": spec.name, "parameters": spec.input_schema}
    return f"<function>{json.dumps(body, ensure_ascii=False)}</function>"


def defined_names(text: str) -> list[str]:
    """The names of the tools a ToolSearch answer defines, in order."""
    names = []
    for body in _FUNCTION.findall(text):
        try:
            name = json.loads(body).get("name")
        except (ValueError, AttributeError):
            continue
        if isinstance(name, str):
            names.append(name)
    return names


def _name_words(name: str) -> list[str]:
    """The words of a tool's name: ``mcp__github__create_issue`` → github, create, issue."""
    if name.startswith("mcp__"):
        return [w for w in re.split(r"[_\-]+", name[len("mcp__") :].lower()) if w]
    return [w for w in re.split(r"[\s_\-]+", _CAMEL.sub(r"\1 \2", name).lower()) if w]


def _in_name(term: str, words: list[str]) -> bool:
    return any(term in word for word in words)


def _in_text(term: str, text: str) -> bool:
    return re.search(rf"\b{re.escape(term)}\b", text) is not None


def _score(term: str, name: str, words: list[str], text: str) -> int:
    """``term``'s score for a tool, with Claude Code's weights.

    A word of the name 10 (12 for an MCP tool), a part of one 5 (6), the whole name
    containing it 3; and a word of the description 2.
    """
    mcp = name.startswith("mcp__")
    score = 0
    if term in words:
        score += 12 if mcp else 10
    elif _in_name(term, words):
        score += 6 if mcp else 5
    elif term in name.lower():
        score += 3
    if _in_text(term, text):
        score += 2
    return score
