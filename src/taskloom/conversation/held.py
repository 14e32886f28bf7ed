"""Idle notices held for the lead: when it is shown them, and folded one per teammate.

A teammate's idle notice (a mailbox row of kind ``held``, as its shutdown approval is) wakes
nobody: each would otherwise cost its lead a whole request, its context resent, to learn what
it mostly knows already. It goes with the lead's next turn: one its user or a teammate's
message starts, one whose prompt is the user's, or — so that a lead waiting for its team is
still told — the turn that starts once every teammate is idle or ended, whatever the lead's
own commands, background agents and monitors are doing (they tell of their ends themselves).
That rule has one owner, :func:`~taskloom.tasks.owner_wait.held_due`: the front ends' wait
(:class:`~taskloom.conversation.next_input.Held`), a ``-p`` run's wait for its tasks and the
session's inbox all ask it, so that the turn started for the notices is the turn that shows
them. The lead may ask for a teammate's next notice to wake it (SendMessage
``notify_when_idle``: the row is then a ``protocol`` row, see
:meth:`~taskloom.tasks.mailbox.Mailbox.promote`).

The notices of one teammate shown together are folded into its latest: its last answer is
the latest, and the peer messages each summarised are all kept, in order. (Where none was
held — setting ``teammateIdleNotices: "each"`` — none is folded either.)
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from taskloom.quoting import quote
from taskloom.tasks.mailbox import HELD

if TYPE_CHECKING:
    from taskloom.tasks.mailbox import Letter

#: The topic (structured type) of an idle notice.
IDLE_TOPIC = "idle_notification"
#: The longest peer-message summary line a folded notice carries (the rest is cut).
FOLDED_SUMMARY_LIMIT = 400


def fold(letters: list[Letter]) -> list[str]:
    """The bodies of ``letters``, in order, a teammate's idle notices folded into its latest.

    A folded notice is the latest one's, its ``summary`` (the peer messages it sent) joining
    those of the notices folded into it; the element around it is the latest's.
    """
    notices: dict[str, list[Letter]] = {}
    for letter in letters:
        if letter.topic == IDLE_TOPIC and letter.data is not None:
            notices.setdefault(letter.sender, []).append(letter)
    # Only where some were held: with every notice its own turn (teammateIdleNotices
    # "each") none is, and none is folded.
    held = {s for s, group in notices.items() if any(g.kind in HELD for g in group)}
    bodies = []
    for letter in letters:
        group = notices.get(letter.sender) if letter.sender in held else None
        if letter.topic != IDLE_TOPIC or group is None or len(group) < 2:
            bodies.append(letter.body)
        elif letter is group[-1]:
            bodies.append(_folded(group))
    return bodies


def _folded(group: list[Letter]) -> str:
    """One notice standing for ``group`` (one teammate's, oldest first)."""
    latest = group[-1]
    data = dict(latest.data or {})
    said = [str(s) for g in group if (s := (g.data or {}).get("summary"))]
    if said:
        line = "; ".join(said)
        if len(line) > FOLDED_SUMMARY_LIMIT:
            line = line[: FOLDED_SUMMARY_LIMIT - 1] + "…"
        data["summary"] = line
    opening, _, _ = latest.body.partition("\n")
    payload = json.dumps(data, ensure_ascii=False)
    return f"{opening}\n{quote(payload)}\n</teammate-message>"


__all__ = ["FOLDED_SUMMARY_LIMIT", "IDLE_TOPIC", "fold"]
