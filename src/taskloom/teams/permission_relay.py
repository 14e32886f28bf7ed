"""The lead's side of its pane teammates' permission requests: asked here, answered there.

A teammate in a process of its own has no terminal to ask the user in: a call that needs
approval is posted to the lead as a ``permission_request`` row (kind ``control``: only code
reads it, and only code posts it; see
:class:`taskloom.teams.member.LeadPrompter`). The lead asks its own prompter — the REPL asks
the user, naming the teammate — and posts the ``permission_response`` back. Each request is
answered as it comes; several may wait at once. Whatever goes wrong in the asking, the
teammate gets an answer (a denial saying why): it never waits for one that cannot come.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from taskloom.errors import StoreError, reason
from taskloom.teams import protocol

if TYPE_CHECKING:
    from taskloom.permissions import PermissionPrompter, PromptAnswer
    from taskloom.tasks.mailbox import Letter, Mailbox

log = logging.getLogger(__name__)

#: One wait for a permission request lasts at most this long before looking again (a bound,
#: not a poll: a request posted wakes it at once).
_ASK_WAIT_S = 3600.0
#: After a store failure reading the requests, look again this much later.
_STORE_RETRY_S = 0.5


class PermissionRelay:
    """Answers the permission requests posted to the lead (see the module docstring)."""

    def __init__(
        self,
        mailbox: Mailbox,
        lead: str,
        prompter: PermissionPrompter | None,
        asking: Callable[[str], str | None],
        cwd: str | None,
    ) -> None:
        """Answer what is posted to ``lead`` in ``mailbox``.

        Args:
            mailbox: The team's mailbox.
            lead: The lead's address (its session id).
            prompter: Who decides (None: nobody; every request is denied, saying so).
            asking: The agent id of the running teammate a sender is, None if none is.
            cwd: The lead's directory (for a request that names none).
        """
        self.mailbox = mailbox
        self.lead = lead
        self.prompter = prompter
        self.asking = asking
        self.cwd = cwd
        self._loop_task: asyncio.Task[None] | None = None
        self._asks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Start answering (in this event loop)."""
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(
                self._serve(), name="teammate permission requests"
            )

    async def close(self) -> None:
        """Stop answering; requests being asked are dropped with their asks."""
        tasks = [t for t in [self._loop_task, *self._asks] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop_task = None

    async def _serve(self) -> None:
        mailbox, me = self.mailbox, self.lead
        while True:
            await mailbox.wait(_ASK_WAIT_S, me, "control")
            try:
                letters = mailbox.take(me, "control")
            except StoreError as exc:
                # The rows stay pending (nothing is lost): look again once the store may
                # write again, as its own retries do.
                log.warning("teammate permission requests: %s; retrying", exc)
                await asyncio.sleep(_STORE_RETRY_S)
                continue
            for letter in letters:
                task = asyncio.get_running_loop().create_task(self._answer(letter))
                self._asks.add(task)
                task.add_done_callback(self._asks.discard)

    async def _answer(self, letter: Letter) -> None:
        data = letter.data or {}
        request = str(data.get("requestId") or "")
        agent_id = self.asking(letter.sender)
        if letter.topic != "permission_request" or agent_id is None or not request:
            with contextlib.suppress(StoreError):
                self.mailbox.ack([letter.id])  # nobody's to answer: a stray row is not kept
            return
        tool = str(data.get("toolName") or "")
        answer = await self._ask(data, tool, agent_id)
        body = protocol.permission_response(
            request,
            allow=answer.allow,
            message=answer.message,
            updated_input=answer.updated_input,
            interrupt=answer.interrupt,
        )
        if self.asking(letter.sender) is not None:  # else it ended meanwhile: nobody waits
            try:
                self.mailbox.post(
                    recipient=agent_id,
                    sender=self.lead,
                    kind="control",
                    topic="permission_response",
                    body=body,
                    priority="next",
                    commit=True,
                    payload=body,
                )
            except StoreError as exc:
                log.error("the answer to %s's %s request was not sent: %s", agent_id, tool, exc)
        with contextlib.suppress(StoreError):
            self.mailbox.ack([letter.id])

    async def _ask(self, data: dict[str, object], tool: str, agent_id: str) -> PromptAnswer:
        from taskloom.permissions import PermissionRequest, PromptAnswer, PromptError
        from taskloom.permissions.rules import Decision

        raw = data.get("input")
        target = data.get("target")
        asked = PermissionRequest(
            tool_name=tool,
            kind=str(data.get("kind") or "other"),  # type: ignore[arg-type]
            target=target if isinstance(target, str) else None,
            cwd=Path(str(data.get("cwd") or self.cwd or ".")),
            input=dict(raw) if isinstance(raw, dict) else {},
        )
        decision = Decision("ask", str(data.get("reason") or ""), tool_name=tool)
        if self.prompter is None:
            return PromptAnswer(False, f"Permission to use {tool} was denied: no one to ask.")
        try:
            return await self.prompter.ask(
                asked, decision, tool_use_id=str(data.get("toolUseId") or ""), agent_id=agent_id
            )
        except PromptError as exc:
            return PromptAnswer(False, f"Permission to use {tool} was not given: {exc}")
        except Exception as exc:
            # Whatever broke, the teammate waits for an answer: it gets a denial.
            log.exception("asking about %s's %s call failed", agent_id, tool)
            return PromptAnswer(
                False,
                f"Permission to use {tool} was not given: asking failed ({reason(exc)})",
            )


__all__ = ["PermissionRelay"]
