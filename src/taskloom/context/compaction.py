"""Compaction: the conversation so far replaced by the model's summary of it, and its last turns.

:func:`compact` runs the PreCompact hooks (``manual`` or ``auto``; one that blocks refuses
the compaction, the plain output of the others joins the summary's instructions), asks the
model for a structured summary of the whole conversation (the same system prompt, tools and
messages, so the request reads the conversation's cached prefix; one instruction added at the
end), and makes the conversation that summary — a user message — followed by the last turns
as they were. What lives outside the conversation is untouched (running tasks, notifications
not yet delivered, messages in the mailbox, the team): the summary message lists the tasks
still running, from the runtime, not from the model's memory, and the agent's todo list
(TodoWrite). The main thread then runs the SessionStart hooks with source ``compact`` (their
context joins the summary message); every engine runs the PostCompact hooks.

A summary request that is itself too long for the window is tried again with the oldest
turns left out and long tool results cut, at most :data:`SUMMARY_TRIES` times.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from taskloom.context.window import estimate_tokens
from taskloom.errors import ModelError, TaskloomError
from taskloom.events import Compacted
from taskloom.messages import ContentBlock, ImageBlock, Message, TextBlock, ToolResultBlock
from taskloom.models.base import SUMMARY_PURPOSE, ModelRequest
from taskloom.tasks.narrow import as_teammate
from taskloom.tasks.statuses import TaskBoard, render

if TYPE_CHECKING:
    from taskloom.engine_config import EngineConfig
    from taskloom.hooks import HookOutcome
    from taskloom.tools.todo import TodoList

Trigger = Literal["manual", "auto"]

#: How many of the last assistant turns (with the messages after them) are kept as they were.
KEEP_TURNS = 2
#: The most of the window the kept turns may take; fewer are kept when they are bigger.
KEEP_SHARE = 0.25
#: How many summary requests are made before compaction gives up (too long each time).
SUMMARY_TRIES = 3
#: On a retry, the most of one tool result the summary request carries.
RESULT_CHARS_ON_RETRY = 4_000
#: How the summary message starts (what the model reads first after a compaction).
CONTINUED = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The summary below covers the earlier part of the conversation."
)
#: Said after an automatic compaction: the model goes on with its work, not with a question.
GO_ON = (
    "Continue the conversation from where it left off without asking the user any further "
    "questions. Continue with the last task that you were asked to work on."
)
#: The instruction added at the end of the summary request.
SUMMARY_INSTRUCTIONS = """\
Your task now is to write a detailed summary of this conversation so far. It will replace the \
conversation: the work continues from the summary alone (and the last few messages, kept as \
they are), so leave out nothing needed to carry on. Do not call any tool: answer with text \
only, in this form.

<analysis>
Go through the conversation in order and note what matters for continuing the work.
</analysis>

<summary>
1. Requests and intent: every request of the user's, in full detail.
2. Decisions and technical concepts: what was decided, and why.
3. Files and code: each file read, written or edited, why, and the snippets that matter.
4. Errors and fixes: what went wrong, how it was fixed, what the user said about it.
5. User messages: each message of the user's that is not a tool result, briefly.
6. Background work: every task, agent and teammate started, and its state as last known.
7. Pending work: what was asked and is not done yet.
8. Current work: precisely what was being done just before this summary.
9. Next step: the next step, only if it follows directly from the latest request (quote it).
</summary>"""

_SUMMARY = re.compile(r"<summary>(.*?)(?:</summary>|\Z)", re.DOTALL)
_ANALYSIS = re.compile(r"<analysis>.*?(?:</analysis>|\Z)", re.DOTALL)
#: What the providers say when a request does not fit the model's context window.
_TOO_LONG = re.compile(
    r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length|"
    r"exceed context limit|"
    r"context window|too many (input )?tokens",
    re.IGNORECASE,
)


class CompactionRefused(TaskloomError):
    """Compaction did not happen: a PreCompact hook blocked it, or nothing to compact."""


class Compactable(Protocol):
    """What compaction needs of an engine (:class:`taskloom.engine.Engine` is one)."""

    messages: list[Message]
    config: EngineConfig
    board: TaskBoard
    context_tokens: int
    todos: TodoList

    async def run_hook(self, event: str, target: str | None, **payload: Any) -> HookOutcome | None:
        """Run the hooks of ``event`` (None when none is configured)."""
        ...

    async def ask(self, request: ModelRequest, *, observe: bool = True) -> Message:
        """Stream ``request``'s answer and charge its usage; the answer."""
        ...

    def request(self) -> ModelRequest:
        """The request the next turn would make."""
        ...


def too_long(error: BaseException) -> bool:
    """Whether ``error`` is the provider saying the request does not fit the window."""
    return isinstance(error, ModelError) and bool(_TOO_LONG.search(str(error)))


async def compact(
    engine: Compactable,
    trigger: Trigger,
    instructions: str | None = None,
    *,
    window: int,
    pre_tokens: int | None = None,
) -> Compacted:
    """Compact ``engine``'s conversation (see the module docstring); the event saying so.

    Args:
        engine: Whose conversation.
        trigger: ``manual`` or ``auto``.
        instructions: What the summary should focus on (``/compact <instructions>``).
        window: The model's context window, in tokens (bounds the turns kept).
        pre_tokens: What the context holds now (default: the last request's, or an estimate).

    Raises:
        CompactionRefused: A PreCompact hook blocked it, or the conversation is empty.
        ModelError: The summary request failed.
    """
    if not any(m.role == "assistant" for m in engine.messages):
        raise CompactionRefused("Not enough messages to compact.")
    if pre_tokens is None:
        pre_tokens = engine.context_tokens or estimate_tokens(engine.messages)
    hooked = await engine.run_hook(
        "PreCompact", trigger, trigger=trigger, custom_instructions=instructions or ""
    )
    if hooked is not None and hooked.blocked:
        raise CompactionRefused(f"Compaction blocked by a PreCompact hook: {hooked.block_reason}")
    extra = [instructions or "", *(hooked.additional_context if hooked else [])]
    summary = await _summarize(engine, "\n\n".join(t for t in extra if t.strip()))
    tail = kept_turns(engine.messages, int(window * KEEP_SHARE))
    note = [TextBlock(text=_summary_text(summary, trigger, bool(tail)))]
    note += [TextBlock(text=text) for text in _running(engine)]
    if engine.config.agent_id is None:  # the main thread's SessionStart, as on a start
        started = await engine.run_hook("SessionStart", "compact", source="compact")
        note += [TextBlock(text=t) for t in (started.additional_context if started else [])]
    head = Message(role="user", content=[*note, *_loose_text(engine.messages, tail)])
    engine.messages = [head, *tail]
    engine.context_tokens = estimate_tokens(engine.messages)
    await engine.run_hook("PostCompact", trigger, trigger=trigger, compact_summary=summary)
    return Compacted(trigger, pre_tokens, tuple(engine.messages))


def kept_turns(messages: Sequence[Message], budget: int) -> list[Message]:
    """The conversation's end kept through a compaction: its last turns, within ``budget``.

    It starts at an assistant message (whose tool calls the next message answers), so that
    it follows the summary message as a valid conversation; fewer turns are kept when they
    would take more than ``budget`` tokens, none at worst.
    """
    starts = [i for i, m in enumerate(messages) if m.role == "assistant"]
    for keep in range(min(KEEP_TURNS, len(starts)), 0, -1):
        tail = list(messages[starts[-keep] :])
        if estimate_tokens(tail) <= budget:
            return tail
    return []


def _loose_text(messages: Sequence[Message], tail: Sequence[Message]) -> list[ContentBlock]:
    """What the conversation's last user message says that no kept turn carries on.

    With no turn kept, the prompt, notifications and messages in its last user message, and
    the prompt's images, stay as they were after the summary (its tool results are
    summarized).
    """
    if tail or not messages or messages[-1].role != "user":
        return []
    return [b for b in messages[-1].content if isinstance(b, TextBlock | ImageBlock)]


def _summary_text(summary: str, trigger: Trigger, kept: bool) -> str:
    parts = [CONTINUED, f"<summary>\n{summary}\n</summary>"]
    if kept:
        parts.append("The last messages before this summary follow, as they were.")
    if trigger == "auto":
        parts.append(GO_ON)
    return "\n\n".join(parts)


def _running(engine: Compactable) -> list[str]:
    """The tasks and teammates still running, as the runtime knows them (not the model).

    Then the agent's todo list, as it stands.
    """
    board = engine.board
    states = board.runtime.live(board.owner)
    members = [m for m in map(as_teammate, states) if m is not None]
    tasks = [s for s in states if as_teammate(s) is None]
    board.shown = {s.id for s in tasks}  # told here: not news for the next request
    lines = [render(tasks)] if tasks else []
    if members:
        names = ", ".join(f"{m.agent_name} ({'idle' if m.is_idle else 'working'})" for m in members)
        lines.append(
            f"Your team {members[0].team_name} still has these teammates: {names}. "
            "They keep their own context; reach them with SendMessage."
        )
    todos = engine.todos.summary()  # its TodoWrite list: kept, and found again on a resume
    if todos is not None:
        lines.append(todos)  # a block of its own: a resume finds it by how it starts
    return lines


async def _summarize(engine: Compactable, instructions: str) -> str:
    """The model's summary of the conversation (its ``<summary>``, or its whole answer)."""
    ask = SUMMARY_INSTRUCTIONS
    if instructions:
        ask += f"\n\nAdditional instructions:\n{instructions}"
    base = engine.request()  # its messages as sent (a deferred tool list added, say)
    messages = list(base.messages)
    for attempt in range(SUMMARY_TRIES):
        request = _summary_request(base, messages, ask)
        try:
            answer = await engine.ask(request, observe=False)
        except ModelError as exc:
            if not too_long(exc) or attempt == SUMMARY_TRIES - 1:
                raise
            messages = _shorter(messages)
            continue
        text = answer.text().strip()
        found = _SUMMARY.search(text)
        summary = found.group(1).strip() if found else _ANALYSIS.sub("", text).strip()
        if summary:
            return summary
        raise ModelError("the model answered the summary request with no text")
    raise AssertionError("unreachable")  # the last try returns or raises


def _summary_request(base: ModelRequest, messages: list[Message], ask: str) -> ModelRequest:
    """The conversation's own request (its cached prefix), with the instruction at the end."""
    instruction = TextBlock(text=ask)
    if messages and messages[-1].role == "user":
        last = messages[-1]
        messages = [*messages[:-1], Message(role="user", content=[*last.content, instruction])]
    else:
        messages = [*messages, Message(role="user", content=[instruction])]
    metadata = {**base.metadata, "purpose": SUMMARY_PURPOSE}
    return dataclasses.replace(base, messages=messages, metadata=metadata, deltas=False)


def _shorter(messages: list[Message]) -> list[Message]:
    """``messages`` with about the oldest third left out, and long tool results cut.

    The cut falls before an assistant message (its calls' results follow it, so nothing is
    orphaned); a note in a user message of its own stands for what was left out.
    """
    start = max(len(messages) // 3, 1)
    cut = next((i for i in range(start, len(messages)) if messages[i].role == "assistant"), None)
    kept = [_cut_results(m) for m in (messages[cut:] if cut is not None else messages)]
    if cut is None:
        return kept
    return [Message.user("[The earliest part of the conversation is left out here.]"), *kept]


def _answers(message: Message) -> bool:
    return any(isinstance(b, ToolResultBlock) for b in message.content)


def _cut_results(message: Message) -> Message:
    if not _answers(message):
        return message
    blocks: list[ContentBlock] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock):
            text = block.text()
            if len(text) > RESULT_CHARS_ON_RETRY:
                text = text[:RESULT_CHARS_ON_RETRY] + "\n[… cut for the summary]"
            block = ToolResultBlock(
                tool_use_id=block.tool_use_id, content=text, is_error=block.is_error
            )
        blocks.append(block)
    return Message(role="user", content=blocks)
