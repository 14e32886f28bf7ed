"""The conversation loop shared by the main session and every subagent.

:meth:`Engine.run` is one async generator of typed events. Each turn it builds the request,
streams the model, and runs the tool calls of the answer: consecutive concurrency-safe calls
together, the others one by one, the results kept in call order. It stops when the model ends
its turn with nothing left to wait for, or at the turn limit. Between turns, notifications
pending for this agent are handed over in one user message; with ``wait_for_tasks`` the loop
does not end while a task the agent owns is running or a notification for it is undelivered —
each delivery starts a new turn.

Cancelling the task that iterates the generator cancels every tool call in flight (and so the
commands and agents they run). A tool never raises out of the loop: any failure, including a
malformed input, comes back to the model as a tool error. So does a call the model's output
made unsafe to run (see :mod:`taskloom.untrusted`): cut off, too deep, a repeated id.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from taskloom.context.keeper import ContextKeeper
from taskloom.engine_config import EngineConfig
from taskloom.errors import ModelError, TaskloomError, clipped
from taskloom.events import (
    AssistantTurn,
    Compacted,
    EngineEvent,
    EngineObserver,
    Finished,
    ToolDone,
    UserTurn,
)
from taskloom.gate import hook_call, read_denied
from taskloom.messages import (
    ContentBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from taskloom.models.base import MessageComplete, ModelRequest
from taskloom.pairing import refuse_orphans
from taskloom.settings import tasks_dir
from taskloom.tasks.notifications import Notification, render_batch
from taskloom.tasks.owner_wait import OwnerWait
from taskloom.tasks.statuses import TaskBoard
from taskloom.tasks.usage import MAIN
from taskloom.tools.base import (
    FileState,
    Tool,
    ToolContext,
    ToolResult,
    bounded_result,
    by_name,
    tool_error,
)
from taskloom.tools.confinement import outside_confinement
from taskloom.tools.deferral import request_messages, request_tools
from taskloom.tools.overflow import results_dir
from taskloom.tools.todo import TodoList
from taskloom.tools.workdir import WorkingDirectory
from taskloom.untrusted import NO_CONTENT, vet_answer, without_empty_text

if TYPE_CHECKING:
    from taskloom.hooks import HookOutcome
    from taskloom.tasks.runtime import TaskRuntime

log = logging.getLogger(__name__)


class Engine:
    """One agent's conversation: its messages, usage, and the loop that extends them."""

    def __init__(
        self,
        config: EngineConfig,
        runtime: TaskRuntime,
        messages: list[Message] | None = None,
        files: FileState | None = None,
    ) -> None:
        """Continue ``messages`` (empty for a new conversation)."""
        self.config = config
        self.runtime = runtime
        self.messages: list[Message] = list(messages or [])
        self.files = files or FileState()
        self.todos = TodoList.from_messages(self.messages)  # its TodoWrite list, its own
        #: Where its shell stands: a ``cd`` holds for its next calls (its own, not its
        #: parent's nor its subagents').
        self.workdir = WorkingDirectory(config.place(), config.shell_roots())
        self.tools = by_name(config.tools)
        #: Its latest request's context (input, cache reads and writes): not usage, which the
        #: session's ledger counts (under :attr:`ledger_key`).
        self.context_tokens = 0
        self.num_turns = 0
        self.api_seconds = 0.0
        #: Grows with every model stream event and every tool call started or ended: what the
        #: watchdog reads as the agent's progress.
        self.progress = 0
        #: Set when its budget ran out (:meth:`halt`): no more requests, no more waiting.
        self.halted: str | None = None
        #: Its wait at the end of a turn, for its tasks and what they deliver.
        self._waiting = OwnerWait(
            runtime, config.owner, config.settings, listens=config.inbox is not None
        )
        #: What its model knows of its running tasks (the ``<task-statuses>`` context).
        self.board = TaskBoard(runtime, config.owner)
        #: Set when a hook answered ``continue: false``: the loop ends after this turn.
        self.stop_reason: str | None = None
        #: Tool calls refused by the permission policy: ``{tool_name, tool_use_id, tool_input}``.
        self.denials: list[dict[str, Any]] = []
        #: Keeps its conversation within the model's context window (clearing, compaction).
        self.context = ContextKeeper(config, results_dir(runtime.session_id, runtime.home))

    @property
    def ledger_key(self) -> str:
        """Whose usage its responses and tool calls are in the session's ledger."""
        return self.config.agent_id or MAIN

    def halt(self, why: str) -> None:
        """Its budget ran out: it makes no more requests, and stops waiting for its tasks.

        Each run ends at once, with ``why``; one waiting at its end for notifications ends.
        """
        self.halted = why
        self._waiting.stop()

    def unhalt(self) -> None:
        """Make requests again (a new run of an agent that was told to stop as it ended)."""
        self.halted = None
        self._waiting.resume()

    def continued(self, config: EngineConfig) -> Engine:
        """This conversation carried on under ``config``: messages, files and counts kept.

        For an agent that goes on elsewhere (resumed in a fresh worktree): a configuration
        is never changed under a live engine, a new engine takes the conversation over.
        """
        engine = Engine(config, self.runtime, self.messages, self.files)
        if config.cwd == self.config.cwd:
            engine.workdir = self.workdir  # the same place: where its shell stood holds
        engine.context_tokens = self.context_tokens
        engine.context.take_over(self.context)  # what that count holds
        engine.num_turns = self.num_turns
        engine.api_seconds = self.api_seconds
        engine.stop_reason = self.stop_reason
        engine.denials, engine.todos = list(self.denials), self.todos
        engine.board = self.board
        if self.halted is not None:
            engine.halt(self.halted)
        return engine

    async def run(self, prompt: str | Message | None = None) -> AsyncIterator[EngineEvent]:
        """Add ``prompt`` (if any) and run until the model is done; yields every event.

        A prompt message with no content stands for what waits for the agent: its pending
        notifications and messages become the prompt (nothing waiting: it ends at once).
        """
        if prompt is not None:
            message = Message.user(prompt) if isinstance(prompt, str) else prompt
            refuse_orphans(self.messages, message)
            # An empty prompt wakes it for what waits (a message to an idle main thread): the
            # turn is then told as one of messages, not as the program's prompt.
            origin: Literal["prompt", "messages"] = "prompt" if message.content else "messages"
            pending = self._take_notifications()
            message = _with_notes(message, pending)
            # Sent while it was idle: with the prompt, in order.
            inbox = [TextBlock(text=t) for t in self._take_inbox()]
            if inbox:
                message = Message(role="user", content=[*message.content, *inbox])
            if self.messages and self.messages[-1].role == "user":
                # The conversation already ends with a user message (a run that stopped after
                # its tool results): one user message, or the API refuses the request.
                previous = self.messages.pop()
                message = Message(role="user", content=[*previous.content, *message.content])
            if not message.content:
                yield Finished("end_turn", self.last_text())  # woken for nothing: no request
                return
            if told := self._reminders(pending, meter=False):  # news of its tasks
                message = Message(role="user", content=[*message.content, *told])
            self.messages.append(message)
            yield UserTurn(message, origin, tuple(pending))
            self._ack(pending)
        turns = 0
        while True:
            if self.halted is not None:
                yield Finished("end_turn", self.halted)
                return
            if self.config.max_turns is not None and turns >= self.config.max_turns:
                yield Finished("max_turns", self.last_text())
                return
            async for step in self._answer():
                if isinstance(step, Compacted):
                    yield step
                else:
                    answer = step
            turns += 1
            self.num_turns += 1
            self.messages.append(answer)
            yield AssistantTurn(answer)
            calls = answer.tool_uses()
            if calls:
                results: list[ToolResultBlock] = []
                async for call, result in self._run_tools(calls):
                    yield ToolDone(call, result)
                    results.append(result.block(call.id))
                notes = self._take_notifications()
                steering = [TextBlock(text=t) for t in self._take_inbox()]
                steering += self._reminders(notes, [c.id for c in calls])  # kept in its record
                steering += self.config.instructions_after(calls, results, self._where())
                message = _with_notes(Message(role="user", content=[*results, *steering]), notes)
                self.messages.append(message)
                yield UserTurn(message, "tool_results", tuple(notes))
                self._ack(notes)
                if self.stop_reason is not None:
                    yield Finished("end_turn", self.stop_reason)
                    return
                continue
            meanwhile = self._sent_meanwhile()
            if meanwhile is not None:  # it must see them before it is done
                yield meanwhile
                continue
            if not self._waiting.must_wait() and not self.runtime.notifications.has_pending(
                self.config.owner
            ):
                yield Finished("end_turn", answer.text())
                return
            if self.config.max_turns is not None and turns >= self.config.max_turns:
                # More would have to happen (tasks to wait for), but no turn is left for it.
                yield Finished("max_turns", answer.text())
                return
            notes = await self._await_notifications()
            sent = self._take_inbox()  # a message woke it, or came with the notifications
            if not notes and not sent:
                yield Finished("end_turn", answer.text())
                return
            content: list[ContentBlock] = [TextBlock(text=render_batch(notes))] if notes else []
            content += [TextBlock(text=t) for t in sent]
            content += self._reminders(notes)
            message = Message(role="user", content=content)
            self.messages.append(message)
            yield UserTurn(message, "notifications" if notes else "messages", tuple(notes))
            self._ack(notes)

    def _sent_meanwhile(self) -> UserTurn | None:
        """Messages sent while it was answering, as a message of their own (if any)."""
        sent = self._take_inbox()
        if not sent:
            return None
        content: list[ContentBlock] = [*(TextBlock(text=t) for t in sent), *self._reminders()]
        message = Message(role="user", content=content)
        self.messages.append(message)
        return UserTurn(message, "messages")

    # -- model --------------------------------------------------------------------------------

    async def _answer(self) -> AsyncIterator[Compacted | Message]:
        """The next answer (last), after the compaction its request needed, if any."""
        compacted = await self.context.before_request(self)
        if compacted is not None:
            yield compacted
        try:
            answer = await self.ask(self.request())
        except ModelError as exc:  # too long for the window: compacted, tried once more
            yield await self.context.overflowed(self, exc)
            answer = await self.ask(self.request())
        yield answer

    def request(self) -> ModelRequest:
        """The request the next turn will make."""
        cfg = self.config
        return ModelRequest(
            model=cfg.model_name or cfg.model.name,
            system=cfg.system_prompt,
            messages=request_messages(cfg.tools, self.messages),
            tools=request_tools(cfg.tools, self.messages),
            max_tokens=cfg.max_tokens,
            agent_id=cfg.agent_id,
            metadata=dict(cfg.metadata),
            # Without deltas a stalled stream can be retried: asked for only when watched.
            deltas=bool(cfg.observer and cfg.observer.partial_messages),
            cache_ttl=cfg.cache_ttl(),
        )

    async def compact(self, instructions: str | None = None) -> Compacted:
        """Compact the conversation now (``/compact``): the event saying so.

        Raises:
            CompactionRefused: A PreCompact hook blocked it, or there is nothing to compact.
            ModelError: The summary request failed.
        """
        return await self.context.compact(self, "manual", instructions)

    async def ask(self, request: ModelRequest, *, observe: bool = True) -> Message:
        """Stream ``request``'s answer, charge its usage; the answer, made safe to use.

        Args:
            request: The request (:meth:`request`, or another one of this agent's).
            observe: Whether the observer hears it (not for compaction's summary).
        """
        final: Message | None = None
        started = time.monotonic()
        observer = self.config.observer if observe else None
        if observer is not None:
            observer.model_event(self.config.agent_id, request)
        try:
            async with self.config.model.stream(request) as events:
                async for event in events:
                    self.progress += 1
                    if observer is not None:
                        observer.model_event(self.config.agent_id, event)
                    if isinstance(event, MessageComplete):
                        final = event.message
        finally:
            self.api_seconds += time.monotonic() - started
        if final is None:
            raise ModelError("the model's stream ended without a complete message")
        # Model output is untrusted: made safe to record, its bad calls marked (untrusted.py).
        seen = {c.id for m in self.messages if m.role == "assistant" for c in m.tool_uses()}
        final = vet_answer(without_empty_text(final), seen)
        model, cost = final.model or request.model, 0.0
        if final.usage is not None:
            self.context_tokens = final.usage.context_tokens
            cost = self._cost(model, final.usage)
        # Every response is charged, one without usage too (counted as unreported); the
        # budgets count what the ledger is charged.
        self.runtime.usage.charge(self.ledger_key, model, final.usage, cost)
        return final

    def _cost(self, model: str, usage: Usage) -> float:
        from taskloom.models.pricing import price_for

        prices = self.config.settings.get("modelPrices")
        price = price_for(model, prices if isinstance(prices, dict) else None)
        return price.cost(usage) if price is not None else 0.0

    def _reminders(
        self, notes: Sequence[Notification] = (), calls: Sequence[str] = (), meter: bool = True
    ) -> list[TextBlock]:
        """News of its tasks (``<task-statuses>``), and the meter's note (a wrap-up), once."""
        said = [self.board.block(notes, calls)]
        said.append(self.config.meter.reminder() if meter and self.config.meter else None)
        return [TextBlock(text=note) for note in said if note]

    def last_text(self) -> str:
        """The text of the last answer (no tool blocks)."""
        for message in reversed(self.messages):
            if message.role == "assistant":
                return message.text()
        return ""

    # -- tools --------------------------------------------------------------------------------

    async def _run_tools(
        self, calls: list[ToolUseBlock]
    ) -> AsyncIterator[tuple[ToolUseBlock, ToolResult]]:
        """Run ``calls``: runs of concurrency-safe calls together, others alone, in order."""
        i = 0
        while i < len(calls):
            j = i + 1
            if self._concurrent(calls[i]):
                while j < len(calls) and self._concurrent(calls[j]):
                    j += 1
            group = calls[i:j]
            results = await asyncio.gather(*(self._traced(c) for c in group))
            self.progress += len(group)
            for call, result in zip(group, results, strict=True):
                yield call, result
            i = j

    def _concurrent(self, call: ToolUseBlock) -> bool:
        tool = self.tools.get(call.name)
        return tool is not None and tool.concurrency_safe

    async def _traced(self, call: ToolUseBlock) -> ToolResult:
        # An observer that hears tool calls (telemetry's spans) is told of each start and end.
        hook = getattr(self.config.observer, "tool_event", None)
        if hook is None:
            return await self._run_one(call)
        hook(self.config.agent_id, call, None)
        result: ToolResult | None = None
        try:
            result = await self._run_one(call)
            return result
        finally:
            hook(self.config.agent_id, call, result or tool_error("cancelled"))

    async def _run_one(self, call: ToolUseBlock) -> ToolResult:
        self.progress += 1
        refused = self.config.meter.admit_tool_call() if self.config.meter is not None else None
        if refused is not None:  # not run: not counted as a use (the budget says as much)
            return tool_error(f"Not run: {refused}. Stop and report what you have.")
        self.runtime.usage.charge_tool_call(self.ledger_key)
        if call.defect is not None:
            return tool_error(call.defect)
        tool = self.tools.get(call.name)
        if tool is None:
            return tool_error(f"No such tool available: {clipped(call.name)}")
        params = tool.validate(call.input)
        if isinstance(params, ToolResult):
            return params
        raw = call.input
        ctx = ToolContext(
            runtime=self.runtime,
            owner=self.config.owner,
            cwd=self._where(),
            tool_use_id=call.id,
            files=self.files,
            agent_id=self.config.agent_id,
            settings=self.config.settings,
            engine=self,
            read_denied=read_denied(self.config.permissions, self.config.rules_root()),
            workdir=self.workdir,
            rules_base=self.config.rules_root(),
            hook_response=self._hooked("PostToolUse", tool.name),
            text_files=self.config.text_files,
            commands=self.config.commands,
            sandboxed=self.config.permissions is not None and self.config.permissions.is_read_only,
        )
        policy = self.config.permissions
        pre = await self.run_hook(
            "PreToolUse", tool.name, call=hook_call(tool, params, ctx, raw, policy),
            tool_name=tool.name, tool_input=raw, tool_use_id=call.id,
        )  # fmt: skip
        if pre is not None and pre.stop:
            self.stop_reason = pre.stop_reason or "stopped by a PreToolUse hook"
        if pre is not None:
            if pre.blocked:
                return tool_error(f"Blocked by a PreToolUse hook: {pre.block_reason}")
            if pre.updated_input is not None:
                raw = {**raw, **pre.updated_input}
                params = tool.validate(raw)
                if isinstance(params, ToolResult):
                    return params
            if pre.permission_decision == "deny":
                return tool_error(f"Denied by a PreToolUse hook: {pre.permission_reason}")
        saved = results_dir(self.runtime.session_id, self.runtime.home)
        outputs = tasks_dir(self.runtime.session_id, self.runtime.home)
        cfg = self.config
        # The session's saved results and task outputs, which results tell it to read, too.
        readable = [saved, outputs]
        outside = outside_confinement(tool, params, ctx, cfg.confine_to, cfg.confine_also, readable)
        if outside is not None:
            return outside
        # A hook's "allow" skips the rules and the prompt, not a read-only agent's refusal.
        hook_allows = pre is not None and pre.permission_decision == "allow"
        verdict = await self._permit(tool, params, ctx, raw, hook_allows)
        if isinstance(verdict, ToolResult):
            self.denials.append({"tool_name": call.name, "tool_use_id": call.id, "tool_input": raw})
            return verdict
        params, raw = verdict
        began = time.monotonic()
        try:
            result = await tool.call(params, ctx)
        except TaskloomError as exc:
            result = tool_error(f"Error: {exc}")
        except Exception as exc:  # a tool bug must not end the conversation
            log.exception("tool %s failed", tool.name)
            result = tool_error(f"Error: {type(exc).__name__}: {exc}")
        took = round((time.monotonic() - began) * 1000)
        return await self._after(
            tool, call, raw, result, took, hook_call(tool, params, ctx, raw, policy)
        )

    async def _after(
        self,
        tool: Tool[Any],
        call: ToolUseBlock,
        raw: dict[str, Any],
        result: ToolResult,
        duration_ms: int,
        on: Any = None,
    ) -> ToolResult:
        """The call's end: its hooks (``if`` rules tested ``on`` it) see the whole result."""
        common = {"tool_name": tool.name, "tool_input": raw, "tool_use_id": call.id}
        if result.is_error:
            post = await self.run_hook(
                "PostToolUseFailure",
                tool.name,
                call=on,
                **common,
                error=result.content,
                is_interrupt=False,
                duration_ms=duration_ms,
            )
        else:
            # Hooks see the result in Claude Code's shape for the tool (its ``response``).
            response = result.response if result.response is not None else result.data
            post = await self.run_hook(
                "PostToolUse",
                tool.name,
                call=on,
                **common,
                tool_response=response if response is not None else result.content,
                duration_ms=duration_ms,
            )
        if post is not None and post.stop:
            self.stop_reason = post.stop_reason or "stopped by a PostToolUse hook"
        result = bounded_result(
            tool, result, results_dir(self.runtime.session_id, self.runtime.home), call.id
        )
        if post is not None and (post.blocked or post.additional_context):
            feedback = "\n".join([post.block_reason, *post.additional_context]).strip()
            text = f"{result.content}\n\n<hook-feedback>{feedback}</hook-feedback>"
            result = dataclasses.replace(result, content=text)  # its images kept
        return result

    def _where(self) -> Path:
        """Where its next call runs: its shell's directory (back at its place if that moved)."""
        place = self.config.place()
        if place != self.workdir.start:
            self.workdir.follow(place, self.config.shell_roots())
        return self.workdir.here()

    def _hooked(self, event: str, target: str | None) -> bool:
        """Whether some hook (a command or a program's callback) runs for ``event``."""
        hooks = self.config.hooks
        return bool(hooks and hooks.matching(event, target))

    async def run_hook(
        self, event: str, target: str | None, *, call: Any = None, **payload: Any
    ) -> HookOutcome | None:
        """Run the hooks of ``event`` (None when none runs); see :func:`taskloom.gate.fire`."""
        from taskloom.gate import fire

        return await fire(self.config, self.runtime, event, target, call, payload)

    async def _permit(
        self, tool: Tool[Any], params: Any, ctx: ToolContext, raw: dict[str, Any], hooked: bool
    ) -> ToolResult | tuple[Any, dict[str, Any]]:
        """The call's input if it may run (an approver may change it), else the denial."""
        from taskloom.gate import permit

        cfg = self.config
        verdict = await permit(
            tool, params, ctx, raw, policy=cfg.permissions, prompter=cfg.prompter,
            headless=cfg.headless, run_hook=self.run_hook, agent_id=cfg.agent_id,
            hook_allowed=hooked,
        )  # fmt: skip
        if verdict.interrupt:
            self.stop_reason = "interrupted by the permission prompt"
        if verdict.result is not None:
            return verdict.result
        assert verdict.raw is not None
        return verdict.params, verdict.raw

    # -- notifications ------------------------------------------------------------------------

    def _take_inbox(self) -> list[str]:
        return self.config.inbox() if self.config.inbox is not None else []

    def _take_notifications(self) -> list[Notification]:
        return self.runtime.drain(owner=self.config.owner)

    def _ack(self, notes: Sequence[Notification]) -> None:
        # Called once the consumer has processed the event carrying them (e.g. written it
        # to the transcript): only then are they delivered.
        if notes:
            self.runtime.ack(notes)

    async def _await_notifications(self) -> list[Notification]:
        """At the end of a turn: what to deliver now, waiting while owned tasks still run."""
        notes = self._take_notifications()
        if notes or not self.config.wait_for_tasks:
            return notes
        return await self._waiting.next_delivery()


def _with_notes(message: Message, notes: Sequence[Notification]) -> Message:
    if not notes:
        return message
    return Message(role="user", content=[*message.content, TextBlock(text=render_batch(notes))])


__all__ = [
    "NO_CONTENT",
    "AssistantTurn",
    "Compacted",
    "Engine",
    "EngineConfig",
    "EngineEvent",
    "EngineObserver",
    "Finished",
    "ToolDone",
    "UserTurn",
]
