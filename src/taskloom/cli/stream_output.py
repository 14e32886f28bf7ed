"""What stream-json shows besides the main thread's messages, as it happens.

:class:`OutputTap` is the session's :class:`~taskloom.engine.EngineObserver`: every engine
(the main thread's, each subagent's, a fork's) tells it of its model's stream and of its hook
runs, and each subagent's run of its messages. It prints:

- each subagent message, as ``assistant`` / ``user`` with ``parent_tool_use_id`` the id of
  the Agent call that started it (the main thread's messages are printed by the turn, with
  null);
- with ``--include-partial-messages``, ``stream_event`` objects whose ``event`` is an
  Anthropic streaming event (``message_start``, ``content_block_start`` / ``_delta`` /
  ``_stop``, ``message_delta``, ``message_stop``), rebuilt from any provider's deltas;
- with ``--include-hook-events`` (SessionStart hooks always, as Claude Code does),
  ``system/hook_started`` and ``system/hook_response``;

and it builds the results' cost fields (``modelUsage``, ``total_cost_usd``) from the
session's usage ledger (:mod:`taskloom.tasks.usage`), which every engine charges. Once
:attr:`OutputTap.closed` is set (the final result is written) it prints nothing more.

A response whose provider reported no usage counts 0 tokens, and the results say so: the
model's ``modelUsage`` entry has ``responsesWithoutUsage`` and the result ``usage_unknown``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.engine import AssistantTurn, UserTurn
from taskloom.messages import Usage
from taskloom.models.base import (
    MessageComplete,
    ModelRequest,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolUseStart,
)
from taskloom.models.windows import context_window
from taskloom.tasks.usage import Mark, UsageLedger

if TYPE_CHECKING:
    from taskloom.engine import Engine
    from taskloom.hooks import HookResult

#: Hook events shown without ``--include-hook-events`` (as Claude Code does).
ALWAYS_SHOWN_HOOKS = frozenset({"SessionStart", "Setup"})


@dataclass(slots=True)
class _Stream:
    """One model response being rebuilt as Anthropic streaming events."""

    model: str
    open: int | None = None  # the index of the content block not yet stopped
    started: set[int] = field(default_factory=set)

    def start(self) -> list[dict[str, Any]]:
        message: dict[str, Any] = {
            "id": None,  # known only once the response is whole
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [{"type": "message_start", "message": message}]

    def feed(self, event: StreamEvent) -> list[dict[str, Any]]:
        if isinstance(event, MessageComplete):
            return [*self._stop(), *_ending(event)]
        if isinstance(event, ToolUseStart):
            block = {"type": "tool_use", "id": event.id, "name": event.name, "input": {}}
            return self._block(event.index, block)
        if isinstance(event, TextDelta):
            opening = self._block(event.index, {"type": "text", "text": ""})
            delta = {"type": "text_delta", "text": event.text}
        elif isinstance(event, ThinkingDelta):
            opening = self._block(event.index, {"type": "thinking", "thinking": ""})
            delta = {"type": "thinking_delta", "thinking": event.thinking}
        else:  # ToolInputDelta: its block was started by ToolUseStart
            opening = self._block(event.index, {"type": "text", "text": ""})
            delta = {"type": "input_json_delta", "partial_json": event.partial_json}
        return [*opening, {"type": "content_block_delta", "index": event.index, "delta": delta}]

    def _block(self, index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
        if index in self.started:
            return []
        out = self._stop()
        self.started.add(index)
        self.open = index
        out.append({"type": "content_block_start", "index": index, "content_block": block})
        return out

    def _stop(self) -> list[dict[str, Any]]:
        if self.open is None:
            return []
        index, self.open = self.open, None
        return [{"type": "content_block_stop", "index": index}]


def _ending(event: MessageComplete) -> list[dict[str, Any]]:
    message = event.message
    usage = (message.usage or Usage()).dump()
    delta = {"stop_reason": message.stop_reason, "stop_sequence": None}
    return [
        {"type": "message_delta", "delta": delta, "usage": usage},
        {"type": "message_stop"},
    ]


class OutputTap:
    """The session's observer for the stream-json output (see the module docstring).

    Args:
        write: Prints one stream-json object (session id and uuid are added).
        before: Called before a subagent's message is printed (prints pending task events,
            so that a ``task_started`` comes before the agent's first message).
        parent_of: The id of the Agent call that started an agent (None: unknown).
        partial_messages: Print the model's streaming events.
        hook_events: Print hook runs.
    """

    def __init__(
        self,
        write: Callable[[dict[str, Any]], None],
        *,
        before: Callable[[], None] = lambda: None,
        parent_of: Callable[[str], str | None] = lambda agent_id: None,
        partial_messages: bool = False,
        hook_events: bool = False,
    ) -> None:
        self.write = write
        self.before = before
        self.parent_of = parent_of
        self.partial_messages = partial_messages
        self.hook_events = hook_events
        #: Set once the final result is written: nothing is printed any more.
        self.closed = False
        self._streams: dict[str | None, _Stream] = {}
        #: The ledger when the last result was built (for ``model_usage_since_last_result``).
        self._at_result = Mark()

    def _line(self, obj: dict[str, Any]) -> None:
        if not self.closed:
            self.write(obj)

    def _parent(self, agent_id: str | None) -> str | None:
        return None if agent_id is None else self.parent_of(agent_id)

    # -- EngineObserver -----------------------------------------------------------------------

    def model_event(self, agent_id: str | None, event: ModelRequest | StreamEvent) -> None:
        """Print the stream's events if asked to (the engine charges the usage ledger)."""
        if isinstance(event, ModelRequest):
            if self.partial_messages:
                stream = self._streams[agent_id] = _Stream(event.model)
                self._events(agent_id, stream.start())
            return
        current = self._streams.get(agent_id)
        if current is None:
            return
        if isinstance(event, MessageComplete):
            del self._streams[agent_id]
        self._events(agent_id, current.feed(event))

    def _events(self, agent_id: str | None, events: list[dict[str, Any]]) -> None:
        parent = self._parent(agent_id)
        for event in events:
            self._line({"type": "stream_event", "event": event, "parent_tool_use_id": parent})

    def agent_message(self, agent_id: str, event: AssistantTurn | UserTurn) -> None:
        """Print a subagent's message under the Agent call that started it."""
        if self.closed:
            return
        self.before()
        if isinstance(event, AssistantTurn):
            obj = {"type": "assistant", "message": event.message.full()}
        else:
            obj = {"type": "user", "message": event.message.wire()}
        self._line({**obj, "parent_tool_use_id": self._parent(agent_id)})

    def hook_started(self, hook_id: str, event: str, name: str) -> None:
        """Print ``system/hook_started`` (if hook events are shown)."""
        if self.hook_events or event in ALWAYS_SHOWN_HOOKS:
            self._line(_hook_event("hook_started", hook_id, event, name))

    def hook_finished(self, hook_id: str, event: str, name: str, result: HookResult | None) -> None:
        """Print ``system/hook_response`` (if hook events are shown)."""
        if not (self.hook_events or event in ALWAYS_SHOWN_HOOKS):
            return
        obj = _hook_event("hook_response", hook_id, event, name)
        if result is None:
            obj.update(output="", stdout="", stderr="", outcome="cancelled")
        else:
            ok = result.exit_code == 0 and not result.timed_out
            output = "\n".join(t for t in (result.stdout, result.stderr) if t)
            obj.update(output=output, stdout=result.stdout, stderr=result.stderr)
            if result.exit_code is not None:
                obj["exit_code"] = result.exit_code
            obj["outcome"] = "success" if ok else "error"
        self._line(obj)

    # -- results ------------------------------------------------------------------------------

    def turn(self, engine: Engine) -> TurnAccount:
        """Start counting a turn of the main thread's ``engine``."""
        return TurnAccount(self, engine)

    def result_fields(
        self, ledger: UsageLedger, settings: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        """The cost fields of a result, from the session's ``ledger``; marks a result as written.

        ``total_cost_usd`` and ``modelUsage`` are the session's so far (Claude Code's running
        totals), ``model_usage_since_last_result`` what was counted since the previous result.
        ``usage_unknown`` (only when true): some response of the session had no usage
        reported, so these figures (and ``usage``) count less than was spent.
        """
        since, self._at_result = self._at_result, ledger.mark()
        fields: dict[str, Any] = {
            "total_cost_usd": ledger.cost(),
            "modelUsage": model_usage(ledger, settings),
            "model_usage_since_last_result": model_usage(ledger, settings, since),
        }
        if ledger.total().unreported:
            fields["usage_unknown"] = True
        return fields


def model_usage(
    ledger: UsageLedger, settings: Mapping[str, Any] | None, since: Mark | None = None
) -> dict[str, dict[str, Any]]:
    """Claude Code's ``modelUsage``: per model id its tokens and cost (since ``since``).

    ``responsesWithoutUsage`` is added when some of its responses reported no usage;
    ``contextWindow`` is the model's (:func:`~taskloom.models.windows.context_window`: the
    built-in windows, ``modelContextWindows`` of ``settings`` and ``TASKLOOM_CONTEXT_WINDOW``).
    """
    out: dict[str, dict[str, Any]] = {}
    for model, figures in ledger.models(since=since).items():
        usage = figures.usage
        out[model] = {
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
            "cacheReadInputTokens": usage.cache_read_input_tokens,
            "cacheCreationInputTokens": usage.cache_creation_input_tokens,
            "webSearchRequests": 0,
            "costUSD": figures.cost_usd,
            "contextWindow": context_window(model, settings),
            "maxOutputTokens": 0,
        }
        if figures.unreported:
            out[model]["responsesWithoutUsage"] = figures.unreported
    return out


class TurnAccount:
    """The figures of one turn of the main thread: what its engine counted since it began."""

    def __init__(self, tap: OutputTap | None, engine: Engine) -> None:
        self.tap = tap
        self.num_turns = engine.num_turns
        #: Its main thread's usage so far, in the session's ledger.
        self.mark = engine.runtime.usage.mark(engine.ledger_key)
        self.api_seconds = engine.api_seconds

    def fields(self, engine: Engine) -> dict[str, Any]:
        """The figures of a result: this turn's and the session's.

        ``num_turns``, ``duration_api_ms`` and ``usage`` are this turn's, of the main thread
        (Claude Code's ``usage`` is the main loop's, per turn); the cost fields are the
        session's (see :meth:`OutputTap.result_fields`).
        """
        out: dict[str, Any] = {
            "duration_api_ms": int((engine.api_seconds - self.api_seconds) * 1000),
            "num_turns": engine.num_turns - self.num_turns,
            "usage": engine.runtime.usage.usage(engine.ledger_key, self.mark).dump(),
        }
        if self.tap is not None:
            out.update(self.tap.result_fields(engine.runtime.usage, engine.config.settings))
        else:
            out.update(total_cost_usd=0, modelUsage={})
        return out


def _hook_event(subtype: str, hook_id: str, event: str, name: str) -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": subtype,
        "hook_id": hook_id,
        "hook_name": name,
        "hook_event": event,
    }


def replayed(message: Mapping[str, Any]) -> dict[str, Any]:
    """The echo of a ``user`` message read from stdin (``--replay-user-messages``).

    It carries the message, its uuid when it had one, and ``isReplay``.
    """
    out: dict[str, Any] = {
        "type": "user",
        "message": message.get("message"),
        "parent_tool_use_id": message.get("parent_tool_use_id"),
        "isReplay": True,
    }
    if isinstance(message.get("uuid"), str):
        out["uuid"] = message["uuid"]
    return out
