"""Scripted and function models: deterministic stand-ins for a language model.

``ScriptedModel`` answers each request with the next scripted :class:`Turn` and records every
request; ``FunctionModel`` answers with whatever a function of the request returns (to route
by agent, prompt or turn). Both stream like a real provider: text in pieces, tool inputs as
JSON chunks, then the complete message with a usage estimate. A compaction's summary request
(``metadata["purpose"]``, :data:`~taskloom.models.base.SUMMARY_PURPOSE`) takes no scripted
turn: ``ScriptedModel`` answers it with a summary of the prompts (kept in
``summary_requests``); a ``FunctionModel``'s function is asked as for any request. Nor does
WebFetch's question about a page (:data:`~taskloom.models.base.WEB_FETCH_PURPOSE`): it is
answered with the page as it was given (kept in ``side_requests``).

A scripted-turn file (``--model scripted:FILE``) is YAML or JSON::

    turns:
      - text: "Let me look."
        tool_calls:
          - {name: Bash, input: {command: "ls"}}
      - text: "Done."

(a bare list of turns works too). A turn may also give ``thinking``, ``stop_reason``,
``usage`` (``{input_tokens, output_tokens}``) and ``delay`` (seconds before answering).

Subagents are scripted by agent type under ``subagents``: a list of turns is shared, in order,
by every agent of that type; a single turn answers each of their requests; ``"*"`` covers the
types not named::

    subagents:
      general-purpose: {text: "Done: found 3 files."}
      Explore: ["Looking...", {text: "It is in src/app.py"}]
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import field
from pathlib import Path
from typing import Any

from taskloom._dataclass import dataclass
from taskloom.errors import ModelError, UsageError
from taskloom.messages import Message, TextBlock, ThinkingBlock, ToolUseBlock, Usage
from taskloom.models.base import (
    SUMMARY_PURPOSE,
    WEB_FETCH_PURPOSE,
    MessageComplete,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolInputDelta,
    ToolUseStart,
)


@dataclass(frozen=True)
class ToolCall:
    """A scripted tool call; ``id`` is generated when not given."""

    name: str
    input: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Turn:
    """One scripted model response.

    ``usage``: its counts (a dict of them is read as :meth:`Usage.from_dict` reads it); None:
    estimated from the request's and the answer's text.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    thinking: str = ""
    stop_reason: str | None = None
    usage: Usage | dict[str, Any] | None = None
    delay: float = 0.0

    @classmethod
    def parse(cls, raw: Turn | str | dict[str, Any]) -> Turn:
        """Accept a Turn, a plain string (text only) or a dict as in scripted files."""
        if isinstance(raw, Turn):
            return raw
        if isinstance(raw, str):
            return cls(text=raw)
        if not isinstance(raw, dict):
            raise UsageError(f"a scripted turn must be a string or a mapping, got {raw!r}")
        unknown = set(raw) - {"text", "tool_calls", "thinking", "stop_reason", "usage", "delay"}
        if unknown:
            raise UsageError(f"unknown field(s) in scripted turn: {', '.join(sorted(unknown))}")
        calls = []
        for call in raw.get("tool_calls") or ():
            if isinstance(call, ToolCall):
                calls.append(call)
            elif isinstance(call, dict) and isinstance(call.get("name"), str):
                calls.append(ToolCall(call["name"], dict(call.get("input") or {}), call.get("id")))
            else:
                raise UsageError(f"a scripted tool call needs a name: {call!r}")
        usage = raw.get("usage")
        return cls(
            text=str(raw.get("text") or ""),
            tool_calls=tuple(calls),
            thinking=str(raw.get("thinking") or ""),
            stop_reason=raw.get("stop_reason"),
            usage=Usage.from_dict(usage) if isinstance(usage, dict) else None,
            delay=float(raw.get("delay") or 0.0),
        )


def load_turns(path: Path | str) -> list[Turn]:
    """Read the main turns of a scripted-turn file (YAML or JSON).

    Raises:
        UsageError: The file is missing or malformed (the message names it).
    """
    return load_script(path)[0]


SubagentScript = dict[str, "list[Turn] | Turn"]


def load_script(path: Path | str) -> tuple[list[Turn], SubagentScript]:
    """Read a scripted-turn file: the main turns and the subagents' scripts.

    Raises:
        UsageError: The file is missing or malformed (the message names it).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read scripted model file {path}: {exc.strerror}") from exc
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml  # only scripted runs pay for it

            data = yaml.safe_load(text)
    except Exception as exc:
        raise UsageError(f"scripted model file {path} is not valid YAML/JSON: {exc}") from exc
    subagents: SubagentScript = {}
    if isinstance(data, dict):
        raw_agents = data.get("subagents") or {}
        if not isinstance(raw_agents, dict):
            raise UsageError(f"scripted model file {path}: 'subagents' must be a mapping")
        subagents = parse_subagents(raw_agents)
        data = data.get("turns")
    if not isinstance(data, list):
        raise UsageError(f"scripted model file {path} must hold a list of turns under 'turns'")
    return [Turn.parse(t) for t in data], subagents


def parse_subagents(raw: dict[str, Any]) -> SubagentScript:
    """``{agent_type: [turns] | turn}`` with each turn parsed."""
    return {
        str(k): [Turn.parse(t) for t in v] if isinstance(v, list) else Turn.parse(v)
        for k, v in raw.items()
    }


_ids = itertools.count(1)


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _request_text(request: ModelRequest) -> str:
    texts = (json.dumps(m.wire(), ensure_ascii=False) for m in request.messages)
    return request.system + "".join(texts)


async def _events(turn: Turn, request: ModelRequest, name: str) -> AsyncIterator[StreamEvent]:
    if turn.delay:
        await asyncio.sleep(turn.delay)
    blocks: list[TextBlock | ThinkingBlock | ToolUseBlock] = []
    index = 0
    if turn.thinking:
        yield ThinkingDelta(index, turn.thinking)
        blocks.append(ThinkingBlock(thinking=turn.thinking))
        index += 1
    if turn.text:
        half = len(turn.text) // 2
        for piece in (turn.text[:half], turn.text[half:]):
            if piece:
                yield TextDelta(index, piece)
        blocks.append(TextBlock(text=turn.text))
        index += 1
    for call in turn.tool_calls:
        call_id = call.id or f"toolu_scripted_{next(_ids):06d}"
        yield ToolUseStart(index, call_id, call.name)
        raw = json.dumps(call.input)
        half = len(raw) // 2
        yield ToolInputDelta(index, raw[:half])
        yield ToolInputDelta(index, raw[half:])
        blocks.append(ToolUseBlock(id=call_id, name=call.name, input=call.input))
        index += 1
    output = turn.text + turn.thinking + "".join(json.dumps(c.input) for c in turn.tool_calls)
    usage = Usage.from_dict(turn.usage) if isinstance(turn.usage, dict) else turn.usage
    usage = usage or Usage(
        input_tokens=_estimate_tokens(_request_text(request)),
        output_tokens=_estimate_tokens(output),
    )
    stop = turn.stop_reason or ("tool_use" if turn.tool_calls else "end_turn")
    yield MessageComplete(
        Message(
            role="assistant",
            content=list(blocks),
            id=f"msg_scripted_{next(_ids):06d}",
            model=name,
            stop_reason=stop,
            usage=usage,
        )
    )


def _summary_of(request: ModelRequest) -> str:
    """A compaction's summary, made up from the prompts: a script cannot foresee one."""
    prompts = [
        " ".join(block.text.split())[:200]
        for message in request.messages[:-1]
        if message.role == "user"
        for block in message.content
        if isinstance(block, TextBlock) and not block.text.startswith("<")
    ]
    asked = "\n".join(f"- {p}" for p in prompts) or "- (no prompt)"
    return f"<summary>\n1. Requests and intent (scripted summary):\n{asked}\n</summary>"


def _page_of(request: ModelRequest) -> str:
    """The page WebFetch put in its question (between its ``---`` lines), else the question."""
    asked = request.messages[-1].text() if request.messages else ""
    _, start, rest = asked.partition("\n---\n")
    page, end, _ = rest.rpartition("\n---\n")
    return page if start and end else asked


class ScriptedModel:
    """Answers requests with scripted turns, in order; records every request.

    Example:
        >>> model = ScriptedModel(["Hello!"])
        >>> # ... run a session with it ...
        >>> model.assert_complete()
    """

    def __init__(
        self,
        turns: Iterable[Turn | str | dict[str, Any]],
        *,
        name: str = "scripted",
        subagents: dict[str, Any] | None = None,
    ) -> None:
        """Script ``turns`` for the main thread and ``subagents`` by agent type."""
        self.name = name
        self.turns = [Turn.parse(t) for t in turns]
        self.subagents = parse_subagents(subagents or {})
        self.requests: list[ModelRequest] = []
        self.agent_requests: list[ModelRequest] = []
        #: The summary requests of compactions, answered apart from the script.
        self.summary_requests: list[ModelRequest] = []
        #: WebFetch's questions about pages, answered apart from the script.
        self.side_requests: list[ModelRequest] = []

    @classmethod
    def from_file(cls, path: Path | str) -> ScriptedModel:
        """Load turns from a scripted-turn file."""
        turns, subagents = load_script(path)
        model = cls(turns, name=f"scripted:{Path(path).name}")
        model.subagents = subagents
        return model

    @property
    def remaining(self) -> int:
        """Turns not used yet."""
        return len(self.turns) - len(self.requests)

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        """Answer ``request`` with the next turn (a subagent's from its type's script).

        Raises:
            ModelError: Every turn has been used.
        """
        if request.metadata.get("purpose") == SUMMARY_PURPOSE:  # a compaction's, not scripted
            self.summary_requests.append(request)
            yield _events(Turn(text=_summary_of(request)), request, self.name)
            return
        if request.metadata.get("purpose") == WEB_FETCH_PURPOSE:  # WebFetch's, not scripted
            self.side_requests.append(request)
            yield _events(Turn(text=_page_of(request)), request, self.name)
            return
        if request.agent_id is not None and self.subagents:
            self.agent_requests.append(request)
            yield _events(self._agent_turn(request), request, self.name)
            return
        n = len(self.requests)
        self.requests.append(request)
        if n >= len(self.turns):
            raise ModelError(
                f"scripted model has no turn left for request {n + 1} "
                f"(it was given {len(self.turns)})"
            )
        yield _events(self.turns[n], request, self.name)

    def _agent_turn(self, request: ModelRequest) -> Turn:
        kind = str(request.metadata.get("agent_type") or "")
        script = self.subagents.get(kind, self.subagents.get("*"))
        if script is None:
            raise ModelError(f"scripted model has no script for subagent type {kind!r}")
        if isinstance(script, Turn):
            return script
        if not script:
            raise ModelError(f"scripted model ran out of turns for subagent type {kind!r}")
        return script.pop(0)

    async def aclose(self) -> None:
        """Nothing to release: a scripted model holds no connection."""

    def assert_complete(self) -> None:
        """Fail unless every scripted turn was requested."""
        if self.remaining:
            raise AssertionError(
                f"{self.remaining} of {len(self.turns)} scripted turns were never requested"
            )


Responder = Callable[[ModelRequest], "Turn | str | dict[str, Any] | Awaitable[Any]"]


class FunctionModel:
    """Answers each request with ``fn(request)`` (a turn, or an awaitable of one)."""

    def __init__(self, fn: Responder, *, name: str = "function") -> None:
        """Use ``fn`` to produce every turn."""
        self.name = name
        self.fn = fn
        self.requests: list[ModelRequest] = []

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[StreamEvent]]:
        """Answer ``request`` with whatever the function returns."""
        self.requests.append(request)
        result = self.fn(request)
        if inspect.isawaitable(result):
            result = await result
        yield _events(Turn.parse(result), request, self.name)

    async def aclose(self) -> None:
        """Nothing to release: a function model holds no connection."""
