"""Permission prompts in the REPL: the calls waiting for the user's answer, in order.

In ``default`` mode a call the policy answers with ``ask`` waits here (this is the session's
:class:`~taskloom.permissions.PermissionPrompter`) until the user allows it once, allows it
always, or denies it (with a reason for the model, if one is typed). Calls from the main
thread, subagents and teammates queue alike; the first is shown, the others wait their turn
and none is dropped: each gets an answer, if only "the session ended" when it closes. A plan
to approve and the model's questions wait here too (:mod:`taskloom.repl.questions`).

"Always" writes the rule that would allow the call (``Bash(npm test:*)``, ``Write``) to the
project's ``.taskloom/settings.local.json`` and applies it to the running session at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from taskloom._dataclass import dataclass
from taskloom.errors import UsageError
from taskloom.permissions import Decision, PermissionRequest, PromptAnswer, PromptError
from taskloom.repl.questions import QuestionForm
from taskloom.repl.transcript import call_line

#: Where "always" rules are written, under the project root.
LOCAL_SETTINGS = Path(".taskloom") / "settings.local.json"
#: A question takes its answer keys only once it has been shown this long (seconds): keys
#: typed for a prompt must not answer a question that appeared under them.
ARM_S = 0.4


@dataclass(slots=True)
class Ask:
    """One call waiting for an answer.

    Attributes:
        request: The call.
        decision: Why it asks, and the rule that would allow it.
        who: Whose call it is, when not the main thread's (``teammate alice@build``).
        answer: Resolved with the user's answer.
        form: The answers typed so far, for an AskUserQuestion call
            (:mod:`taskloom.repl.questions`).
    """

    request: PermissionRequest
    decision: Decision
    who: str
    answer: asyncio.Future[PromptAnswer]
    form: QuestionForm | None = None

    @property
    def rule(self) -> str:
        """The allow rule "always" writes."""
        return self.decision.suggestion or self.request.tool_name

    @property
    def title(self) -> str:
        """The call in a few words: ``Write(/src/app.py)``."""
        return call_line(self.request.tool_name, self.request.input)


class PermissionAsks:
    """The queue of calls waiting for the user (see the module docstring).

    Args:
        on_change: Called when the queue changes (to redraw).
        describe: Whose call an agent id is, in words (``''`` for the main thread).
    """

    def __init__(
        self, on_change: Callable[[], None], describe: Callable[[str | None], str]
    ) -> None:
        self._on_change = on_change
        self._describe = describe
        self._queue: deque[Ask] = deque()
        self._closed: str | None = None
        self._shown: tuple[Ask | None, float] = (None, 0.0)

    @property
    def current(self) -> Ask | None:
        """The call shown now, if any."""
        return self._queue[0] if self._queue else None

    @property
    def settled(self) -> bool:
        """Whether a call is shown and has been for :data:`ARM_S` (it takes its answer keys)."""
        current = self.current
        shown, since = self._shown
        return current is not None and current is shown and time.monotonic() - since >= ARM_S

    def _changed(self) -> None:
        if self._shown[0] is not self.current:
            self._shown = (self.current, time.monotonic())
        self._on_change()

    @property
    def waiting(self) -> int:
        """How many calls wait behind the one shown."""
        return max(0, len(self._queue) - 1)

    async def ask(
        self,
        request: PermissionRequest,
        decision: Decision,
        *,
        tool_use_id: str,
        agent_id: str | None,
    ) -> PromptAnswer:
        """Wait for the user's answer to ``request`` (see the module docstring).

        Raises:
            PromptError: The REPL closed before the user answered.
        """
        if self._closed is not None:
            raise PromptError(self._closed)
        form = QuestionForm.of(request.tool_name, request.input)
        item = Ask(request, decision, self._describe(agent_id), asyncio.Future(), form)
        self._queue.append(item)
        self._changed()  # the question, or how many wait behind it
        try:
            return await item.answer
        finally:
            # Answered, or the caller was cancelled (its turn interrupted): off the queue.
            with contextlib.suppress(ValueError):
                self._queue.remove(item)
            self._changed()

    def answer(self, answer: PromptAnswer) -> Ask | None:
        """Answer the call shown; the next one (if any) is shown. Returns the one answered."""
        item = self.current
        if item is not None and not item.answer.done():
            item.answer.set_result(answer)
        return item

    def close(self, why: str) -> None:
        """No answer can come any more: every waiting call is denied with ``why``."""
        self._closed = why
        for item in list(self._queue):
            if not item.answer.done():
                item.answer.set_exception(PromptError(why))


def save_allow_rule(project_root: Path, rule: str) -> Path:
    """Add ``rule`` to ``permissions.allow`` of the project's local settings; returns the file.

    The file keeps everything else it holds; it is replaced in one step (written beside it,
    then renamed), so a crash never leaves half a file.

    Raises:
        UsageError: The file exists but is not a JSON object (it is left as it is).
        OSError: It cannot be written.
    """
    path = project_root / LOCAL_SETTINGS
    data: dict[str, object] = {}
    if path.exists():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8") or "{}")
        except ValueError as exc:
            raise UsageError(f"{path} is not JSON ({exc}); the rule {rule} was not saved") from exc
        if not isinstance(loaded, dict):
            raise UsageError(f"{path} does not hold a JSON object; the rule {rule} was not saved")
        data = loaded
    permissions = data.setdefault("permissions", {})
    if not isinstance(permissions, dict):
        raise UsageError(f"{path}: permissions is not an object; the rule {rule} was not saved")
    allow = permissions.setdefault("allow", [])
    if not isinstance(allow, list):
        raise UsageError(f"{path}: permissions.allow is not a list; the rule {rule} was not saved")
    if rule not in allow:
        allow.append(rule)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".settings.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


__all__ = ["LOCAL_SETTINGS", "Ask", "PermissionAsks", "save_allow_rule"]
