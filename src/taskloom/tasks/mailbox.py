"""The durable mailbox: every message to one recipient address, delivered exactly once.

Each row is a message to one address — a session id (the main thread) or an agent id — from a
sender, of a kind:

- ``notification``: a task's end or stall, sent by the task to its owner;
- ``message``: text for an agent (SendMessage), which nothing but a model reads;
- ``protocol``: a protocol message (a team's shutdown and plan approval exchanges, idle
  notifications, task assignments; a structured SendMessage), which the recipient's model is
  shown (its body) and its code acts on (its ``payload``, the JSON object it was sent as);
- ``control``: a protocol message only code reads (a pane teammate's permission request and
  the answer), its ``payload`` that object;
- ``held``: a teammate's idle notification or shutdown approval: shown to its lead (and read
  by code) as a ``protocol`` row is, but it wakes nobody. It goes with the lead's next turn,
  or starts one once every teammate is idle or ended (see :mod:`taskloom.conversation.held`).
  The lead may ask for a teammate's next one to wake it (:meth:`Mailbox.promote`): it is then
  a ``protocol`` row.

Only the code paths that send protocol post the last two: text is ``message`` whatever it
says, so no text (whatever a model was led to write) is ever taken for protocol. What a
model reads as mail from other agents is :data:`MESSAGES`. The life of a row:

1. :meth:`Mailbox.post` writes it to the store. It can be handed out only once it is
   committed: :meth:`Mailbox.take` commits the store's queue before it hands anything out.
2. :meth:`Mailbox.take` hands it out once (``next`` before ``later``, then in posting order).
3. :meth:`Mailbox.ack` marks it delivered, durably, once the recipient's transcript holds it.
   Until then it is only in flight: :meth:`Mailbox.requeue` puts it back, and if the process
   dies a resumed session hands it out again (:meth:`Mailbox.replay`).

A recipient waiting for input is woken by an asyncio event set when a row for it is posted in
this process (:meth:`Mailbox.wait`): there is no polling.

Several processes may share a session's mailbox (a teammate in a pane of its own): each
serves some of the addresses (``serves``) and hands out only their rows. A row posted for an
address another process serves is committed at once and that process is told
(``elsewhere``, which pings its wake-up socket, see :mod:`taskloom.tasks.wakeup`); it then
reads what is new with :meth:`Mailbox.replay`. Each process numbers the rows it posts: the
rows of one sender arrive in the order they were posted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import operator
from collections.abc import Callable, Iterable
from typing import Any, Literal

from taskloom._dataclass import dataclass
from taskloom.clock import SYSTEM_CLOCK, Clock
from taskloom.errors import StoreError
from taskloom.store import Store
from taskloom.tasks._makers import positional_maker
from taskloom.tasks._pending import PendingRows
from taskloom.tasks.ids import random_hex
from taskloom.tasks.types import Priority

log = logging.getLogger(__name__)

#: After a failed commit of a row another process serves, try again (and wake it) this often.
_WAKE_RETRY_S = 0.5

#: What a row carries: a task notification, text, protocol shown to a model, or protocol only
#: code reads (see the module docstring).
Kind = Literal["notification", "message", "protocol", "control", "held"]
KINDS: tuple[Kind, ...] = ("notification", "message", "protocol", "control", "held")
#: The kinds a recipient's model reads as mail from other agents: text and protocol.
MESSAGES: tuple[Kind, ...] = ("message", "protocol")
#: The kinds whose rows carry a payload, which only code posts.
PROTOCOL: tuple[Kind, ...] = ("protocol", "control", "held")
#: The kinds of rows held for their recipient's next turn: they wake nobody.
HELD: tuple[Kind, ...] = ("held",)


@dataclass(frozen=True, slots=True)
class Letter:
    """One mailbox row as the session holds it.

    Attributes:
        id: Unique id (used to acknowledge).
        seq: Posting order within the session (a resumed session goes on from the last).
        recipient: The address it is for (a session id or an agent id).
        sender: Who sent it (an agent or session id; for a notification, its task's id).
        kind: ``notification``, ``message``, ``protocol``, ``control`` or ``held``.
        topic: What a notification reports (``terminal``, ``stall``), the type of a protocol
            or control row; '' otherwise.
        priority: ``next`` (at the next delivery point) or ``later``.
        body: The text the recipient will see.
        summary: A short preview ('' when none).
        created_at: Wall-clock time it was posted.
        payload: A protocol or control row's JSON object, as its sender's code made it ('' for
            text and notifications): what code reads, never the body.
    """

    id: str
    seq: int
    recipient: str
    sender: str
    kind: Kind
    topic: str
    priority: Priority
    body: str
    summary: str
    created_at: float
    payload: str = ""

    @property
    def data(self) -> dict[str, Any] | None:
        """The object a protocol or control row carries (None: any other row)."""
        if self.kind not in PROTOCOL or not self.payload:
            return None
        try:
            found = json.loads(self.payload)
        except (ValueError, RecursionError):  # a store written by hand: nothing to act on
            return None
        return found if isinstance(found, dict) else None


def _first_letter(*values: Any) -> Letter:
    global _make_letter
    _make_letter = positional_maker(Letter)  # on first use, as Letter's own methods
    return _make_letter(*values)


# Letter(**fields) at less than half the cost: a row is posted per task end.
_make_letter: Callable[..., Letter] = _first_letter
_SEQ = operator.attrgetter("seq")

#: Which kinds a look at the mailbox is about: one, several, or None for any.
Kinds = Kind | tuple[Kind, ...] | None


def _matches(kinds: Kinds, kind: Kind) -> bool:
    return kinds is None or kind == kinds or (isinstance(kinds, tuple) and kind in kinds)


def _kind(value: str) -> Kind:
    for kind in KINDS:
        if kind == value:
            return kind
    return "message"  # a kind a newer taskloom wrote: text for its recipient all the same


class Mailbox:
    """The mailbox rows of one session, for every recipient (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        session_id: str,
        clock: Clock = SYSTEM_CLOCK,
        *,
        serves: Callable[[str], bool] | None = None,
        elsewhere: Callable[[str], None] | None = None,
    ) -> None:
        """Bind the mailbox to a session's rows in ``store``.

        Args:
            store: The store.
            session_id: The session.
            clock: Time source.
            serves: Which recipients this process hands out rows to (None: all of them).
            elsewhere: Told, once a row for a recipient served elsewhere is committed, whom
                it is for.
        """
        self.serves = serves
        self.elsewhere = elsewhere
        self._store = store
        self._session_id = session_id
        self._clock = clock
        self._pending: PendingRows[Letter] = PendingRows()
        self._in_flight: dict[str, Letter] = {}
        # Rows for recipients that are gone for now (a stopped agent), by recipient: kept out
        # of every look at what is pending until the recipient is back.
        self._parked: dict[str, dict[str, Letter]] = {}
        self._seq = 0
        # Who waits for what: (recipient or None for anyone, kind or None, the event to set).
        self._waiters: list[tuple[str | None, Kinds, asyncio.Event]] = []
        # (recipient, sender): the next held row from sender to recipient wakes it.
        self._promoted: set[tuple[str, str]] = set()

    @property
    def session_id(self) -> str:
        """The session whose rows these are."""
        return self._session_id

    def replay(self) -> list[Letter]:
        """Load every unacknowledged row of the session from the store (on start or resume)."""
        loaded = []
        for row in self._store.undelivered_mail(self._session_id):
            if row.id in self._pending or row.id in self._in_flight:
                continue
            if self.serves is not None and not self.serves(row.recipient):
                continue  # another process hands it out
            if any(row.id in rows for rows in self._parked.values()):
                continue
            letter = Letter(
                id=row.id,
                seq=row.seq,
                recipient=row.recipient,
                sender=row.sender,
                kind=self._promoted_kind(row.recipient, row.sender, _kind(row.kind)),
                topic=row.topic,
                priority="next" if row.priority == "next" else "later",
                body=row.body,
                summary=row.summary,
                created_at=row.created_at,
                payload=row.payload,
            )
            self._pending.add(letter)
            self._seq = max(self._seq, row.seq + 1)
            loaded.append(letter)
        for letter in loaded:
            self._signal(letter)
        return loaded

    def post(
        self,
        *,
        recipient: str,
        sender: str,
        kind: Kind,
        body: str,
        topic: str = "",
        priority: Priority = "later",
        summary: str = "",
        commit: bool = False,
        payload: str = "",
    ) -> Letter:
        """Write a row for ``recipient``; it is handed out only once it is committed.

        Args:
            recipient: The address it is for.
            sender: Who sends it.
            kind: What it carries.
            body: Its text.
            topic: What a notification reports; a protocol or control row's type.
            priority: ``next`` or ``later``.
            summary: A short preview.
            commit: Commit it now rather than with the loop iteration's group commit (the
                sender is about to be told that it is queued).
            payload: The JSON object a protocol or control row carries (required for those,
                refused for the others).

        Raises:
            StoreError: ``commit`` was asked for and the store could not be written.
            ValueError: A protocol or control row without a payload, or another with one.
        """
        if (kind in PROTOCOL) != bool(payload):
            raise ValueError(f"a {kind} row {'needs' if kind in PROTOCOL else 'has no'} payload")
        if self._promoted:
            kind = self._promoted_kind(recipient, sender, kind)
        letter_id, seq, now = random_hex(8), self._seq, self._clock.time()
        # Positional, in field order: a row per task end makes this the runtime's hot path.
        letter = _make_letter(
            letter_id, seq, recipient, sender, kind, topic, priority, body, summary, now, payload
        )
        self._seq += 1
        self._store.add_mail_values(
            letter_id,
            seq,
            self._session_id,
            recipient,
            sender,
            kind,
            topic,
            priority,
            body,
            summary,
            now,
            payload,
        )
        if self.serves is not None and not self.serves(recipient):
            self._post_elsewhere(letter, commit)
            return letter
        self._pending.add(letter)
        if commit:
            try:
                self._store.flush()
            except StoreError:
                # The sender is told it failed, so it must never arrive: the withdrawal is
                # queued behind the row and reaches the disk with it, whenever that is.
                with contextlib.suppress(StoreError):
                    self.withdraw([letter.id])
                raise
        self._signal(letter)
        return letter

    def promote(self, recipient: str, sender: str) -> None:
        """The next held row from ``sender`` to ``recipient`` is a ``protocol`` row: it wakes.

        Posted in this process or read from the store (a teammate in a pane of its own): the
        recipient asked to be told (SendMessage ``notify_when_idle``). Kept in memory only.
        """
        self._promoted.add((recipient, sender))

    def _promoted_kind(self, recipient: str, sender: str, kind: Kind) -> Kind:
        if kind in HELD and (recipient, sender) in self._promoted:
            self._promoted.discard((recipient, sender))
            return "protocol"
        return kind

    def _post_elsewhere(self, letter: Letter, commit: bool) -> None:
        """A row another process serves: committed now, then that process is told.

        Raises:
            StoreError: ``commit`` was asked for and the row could not be written (it is
                withdrawn: the sender is told it failed, so it must never arrive).
        """
        try:
            self._store.flush()  # it must find the row in the store when woken
        except StoreError:
            if commit:
                with contextlib.suppress(StoreError):
                    self._store.ack_mail([letter.id], self._clock.time())
                raise
            # Queued in the store, written with its next commit: its process is told then.
            self._wake_later(letter.recipient)
            return
        self._wake(letter.recipient)

    def _wake(self, recipient: str) -> None:
        if self.elsewhere is not None:
            try:
                self.elsewhere(recipient)
            except OSError:
                # Only a wake-up is lost: the row waits in the store for the next look.
                log.debug("could not wake the process of %s", recipient, exc_info=True)

    def _wake_later(self, recipient: str) -> None:
        """Tell ``recipient``'s process once the store commits again (it retries on its own)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop to come back on: the next commit's own wake-up tells it

        def again() -> None:
            try:
                self._store.flush()
            except StoreError:
                loop.call_later(_WAKE_RETRY_S, again)
                return
            self._wake(recipient)

        loop.call_later(_WAKE_RETRY_S, again)

    def pending(self, recipient: str | None = None, kind: Kinds = None) -> list[Letter]:
        """Rows not yet handed out (to ``recipient``, of ``kind``): ``next`` first, then by seq."""
        # By seq, then the ``next`` ones moved ahead (both stable): what sorting on (priority,
        # seq) gives, without a key tuple built per row in Python.
        found = sorted(self._pending.select(recipient, kind), key=_SEQ)
        first = [letter for letter in found if letter.priority == "next"]
        if not first or len(first) == len(found):
            return found
        return first + [letter for letter in found if letter.priority != "next"]

    def has_pending(self, recipient: str | None = None, kind: Kinds = None) -> bool:
        """Whether anything waits to be handed out (to ``recipient``, of ``kind``)."""
        return self._pending.any(recipient, kind)

    def take(
        self,
        recipient: str | None = None,
        kind: Kinds = None,
        priority: Priority | None = None,
    ) -> list[Letter]:
        """Hand out every pending row (for ``recipient``, of ``kind``) as one batch, once.

        Each stays in the store until :meth:`ack`; if the process dies before that, a resumed
        session hands it out again.
        """
        batch = [
            letter
            for letter in self.pending(recipient, kind)
            if priority is None or letter.priority == priority
        ]
        if not batch:
            return []
        self._store.flush()  # nothing leaves the mailbox before it is durable
        for letter in batch:
            self._pending.pop(letter.id)
            self._in_flight[letter.id] = letter
        return batch

    def ack(self, ids: Iterable[str]) -> list[Letter]:
        """Record that the rows ``ids`` reached their recipient's transcript; never replayed.

        Returns:
            The rows acknowledged now (a row not in flight is left alone).
        """
        done = [letter for i in ids if (letter := self._in_flight.pop(i, None)) is not None]
        if not done:
            return []
        self._store.ack_mail((letter.id for letter in done), self._clock.time())
        try:
            self._store.flush()  # acknowledged durably: a crash now must not deliver it twice
        except StoreError:
            # The ack waits in the store's queue; until it is written, the rows stay in flight
            # here so that a replay (another process's ping) does not hand them out again.
            self._in_flight.update((letter.id, letter) for letter in done)
            raise
        return done

    def requeue(self, ids: Iterable[str]) -> None:
        """Put back rows that were handed out but never reached a transcript."""
        for i in ids:
            letter = self._in_flight.pop(i, None)
            if letter is not None:
                self._pending.add(letter)
                self._signal(letter)

    def hand_over(self, recipient: str) -> None:
        """Forget what is pending here for ``recipient``: a process of its own serves it now.

        Its rows stay undelivered in the store, where its process reads them (:meth:`replay`):
        a row posted for a name before a teammate of that name had a process is its.
        """
        for letter in self.pending(recipient):
            self._pending.pop(letter.id)

    def park(self, recipient: str) -> None:
        """Set aside what is pending for a recipient that stopped (durable, not handed out).

        Rows that arrive for it later are pending as usual; :meth:`unpark` brings these back.
        """
        rows = {letter.id: letter for letter in self.pending(recipient)}
        if rows:
            for letter_id in rows:
                self._pending.pop(letter_id)
            self._parked.setdefault(recipient, {}).update(rows)

    def unpark(self, recipient: str) -> None:
        """The recipient is back: what was set aside for it is pending again."""
        rows = self._parked.pop(recipient, {})
        for letter in rows.values():
            self._pending.add(letter)
        for letter in rows.values():
            self._signal(letter)

    def parked(self, recipient: str) -> list[Letter]:
        """What is set aside for ``recipient``, in posting order."""
        return sorted(self._parked.get(recipient, {}).values(), key=lambda letter: letter.seq)

    def discard(self, recipient: str, kind: Kind | None = None) -> list[Letter]:
        """Acknowledge, undelivered, what is pending for a recipient that is gone for good."""
        return self.withdraw(letter.id for letter in self.pending(recipient, kind))

    def withdraw(self, ids: Iterable[str]) -> list[Letter]:
        """Acknowledge, undelivered, pending rows that must never be handed out.

        For a message whose delivery failed where the sender is told so (it is not sent).
        """
        wanted = list(ids)
        gone = [letter for i in wanted if (letter := self._pending.get(i)) is not None]
        for letter in gone:
            self._pending.pop(letter.id)
            self._in_flight[letter.id] = letter
        if self.serves is not None:
            # Rows for addresses served elsewhere were never pending here: marked delivered in
            # the store all the same, so that their process never hands them out.
            known = {letter.id for letter in gone} | set(self._in_flight)
            others = [i for i in wanted if i not in known]
            if others:
                self._store.ack_mail(others, self._clock.time())
        return self.ack(letter.id for letter in gone)

    async def wait(self, timeout: float, recipient: str | None = None, kind: Kinds = None) -> bool:
        """Wait until a row is pending (for ``recipient``, of ``kind``); False on timeout.

        Woken by the event :meth:`post` (or :meth:`requeue`) sets for a matching row.
        """
        try:
            async with asyncio.timeout(timeout):
                while not self.has_pending(recipient, kind):
                    entry = (recipient, kind, asyncio.Event())
                    self._waiters.append(entry)
                    try:
                        await entry[2].wait()
                    finally:
                        self._waiters.remove(entry)
        except TimeoutError:
            return False
        return True

    def _signal(self, letter: Letter) -> None:
        for recipient, kind, event in self._waiters:
            if (recipient is None or recipient == letter.recipient) and _matches(kind, letter.kind):
                event.set()
