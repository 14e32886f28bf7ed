"""Messages between sessions on different machines: ``bridge:<session id>``, over Ray.

A session that runs with ``--listen`` while a Ray cluster is configured (``RAY_ADDRESS`` or
the setting ``remote.address``) is reached at ``bridge:<its session id>`` by any session on
that cluster: :class:`BridgeListener` makes its named actor (:mod:`taskloom.remote.inbox`) and
takes what senders give it into the session's mailbox; :func:`send_to_bridge` hands a message
to it. The semantics are those of ``uds:`` (:mod:`taskloom.agents.peers`): the sender is told
the message was delivered only once it is a committed row of the recipient's mailbox, and a
retried send (the same message id) is never posted twice. A session without ``--listen`` has
no actor: a sender is told nobody listens at that address.

Ray is imported here only inside functions: this module is loaded on this path alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from taskloom._dataclass import dataclass
from taskloom.agents.peers import commit_request
from taskloom.errors import ToolError, UserError
from taskloom.remote.cluster import Cluster, ClusterError
from taskloom.tasks.mailbox import Mailbox

_log = logging.getLogger(__name__)

#: How the recipient's actor says its session did not take a message in time (its words:
#: :mod:`taskloom.remote.inbox` imports Ray, which this module does not at import).
_NOT_TAKEN = "the session did not take it"
#: The prefix of a session's address on the cluster.
BRIDGE_PREFIX = "bridge:"
#: How long a sender's message may wait for the recipient to commit it.
DELIVER_WAIT_S = 10.0
#: Longest wait for one of the session's own calls to its actor (made, told, asked).
_CALL_S = 30.0
#: How long the session's call for its next message waits before it asks again.
_TAKE_WAIT_S = 5.0
#: The first and the longest pause before a failed call to the actor is made again.
_RETRY_S = (0.1, 5.0)


@dataclass(frozen=True)
class BridgePeer:
    """A session listening on the cluster.

    Attributes:
        session_id: Its session id (its address is ``bridge:<session_id>``).
        host: The machine it runs on.
        cwd: Its working directory.
    """

    session_id: str
    host: str = ""
    cwd: str = ""

    @property
    def address(self) -> str:
        """What SendMessage's ``to`` is for it."""
        return f"{BRIDGE_PREFIX}{self.session_id}"


def _no_cluster(what: str) -> ToolError:
    return ToolError(
        f"{what}: bridge: messages travel over a Ray cluster and none is configured: set "
        "RAY_ADDRESS or the setting remote.address to the recipient's cluster"
    )


class BridgeListener:
    """A session's actor on the cluster, and the loop that commits what it is given."""

    def __init__(self, mailbox: Mailbox, session_id: str, cwd: str, cluster: Cluster) -> None:
        """Prepare to listen for ``session_id``; nothing happens before :meth:`start`."""
        self._mailbox = mailbox
        self._session_id = session_id
        self._cwd = cwd
        self.cluster = cluster
        #: Whether the session's remote agents took the cluster over (they close it then).
        self.shared = False
        self._actor: Any = None
        self._pump: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        """Where other sessions reach this one: ``bridge:<session id>``."""
        return f"{BRIDGE_PREFIX}{self._session_id}"

    async def start(self) -> None:
        """Reach the cluster, make the session's named actor, start taking messages.

        Raises:
            UserError: The cluster cannot be reached, or another live session holds the name.
        """
        try:
            await self.cluster.connect()
        except ClusterError as exc:
            raise UserError(f"cannot listen at {self.address}: {_why(exc)}") from None
        from taskloom.remote.inbox import NAMESPACE, InboxActor

        def make() -> Any:
            options = {"name": self._session_id, "namespace": NAMESPACE}
            return InboxActor.options(**options).remote(self._session_id, self._cwd)

        loop = asyncio.get_running_loop()
        try:
            actor = await loop.run_in_executor(None, make)
        except ValueError as exc:  # the name is taken (Ray's words follow)
            raise UserError(f"another session listens at {self.address}: {exc}") from None
        try:
            await asyncio.wait_for(actor.describe.remote(), _CALL_S)
        except Exception as exc:
            _kill(actor)
            raise UserError(f"cannot listen at {self.address}: {exc}") from None
        self._actor = actor
        self._pump = loop.create_task(self._take_all(actor))

    async def _take_all(self, actor: Any) -> None:
        """Commit each message the actor is given, then tell it (and so its sender)."""
        await pump_inbox(_ActorCalls(actor), self.commit, _actor_dead, self.address)

    def commit(self, request: Any) -> dict[str, Any]:
        """Commit ``request`` to the mailbox: what its sender is told."""
        return commit_request(
            self._mailbox, self._session_id, request, BRIDGE_PREFIX, reply_to_session=True
        )

    async def aclose(self) -> None:
        """Stop taking messages and end the actor; the cluster too, unless it was shared."""
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.cancel()
            await asyncio.wait([pump])
        actor, self._actor = self._actor, None
        if actor is not None:
            await asyncio.get_running_loop().run_in_executor(None, _kill, actor)
        if not self.shared:
            await self.cluster.close()

    async def __aenter__(self) -> BridgeListener:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class InboxCalls(Protocol):
    """What the listening loop calls on a session's inbox (:mod:`taskloom.remote.inbox`)."""

    def take(self, wait: float) -> Awaitable[tuple[str, dict[str, Any]] | None]:
        """The next message, or None if none came within ``wait`` seconds."""
        ...

    def settle(self, message_id: str, reply: dict[str, Any]) -> Awaitable[None]:
        """The session's answer for ``message_id`` (the same answer again is harmless)."""
        ...


class _ActorCalls:
    """The inbox's calls on its Ray actor."""

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def take(self, wait: float) -> Awaitable[tuple[str, dict[str, Any]] | None]:
        return self._actor.take.remote(wait)  # type: ignore[no-any-return]

    def settle(self, message_id: str, reply: dict[str, Any]) -> Awaitable[None]:
        return self._actor.settle.remote(message_id, reply)  # type: ignore[no-any-return]


def _actor_dead(exc: BaseException) -> bool:
    """Whether ``exc`` says the actor is gone for good (it is never restarted)."""
    from ray.exceptions import ActorUnavailableError, RayActorError

    return isinstance(exc, RayActorError) and not isinstance(exc, ActorUnavailableError)


async def pump_inbox(
    inbox: InboxCalls,
    post: Callable[[Any], dict[str, Any]],
    dead: Callable[[BaseException], bool],
    address: str,
    *,
    call_s: float = _CALL_S,
    retry_s: tuple[float, float] = _RETRY_S,
) -> None:
    """Take each message of ``inbox``, ``post`` it, settle it with the answer; until ``dead``.

    A call that fails or is slow (a busy cluster) is made again after a pause that doubles up
    to ``retry_s[1]``: the listener stops only once its actor is gone, never while the actor
    still takes messages for it. A take that is slow is waited for again rather than asked
    anew (a second take could strand the message the first one returns), and a failed settle
    is made again with the same message id and answer: the message is posted once.

    Args:
        inbox: The session's inbox.
        post: Commits a request to the mailbox; the answer its sender is told.
        dead: Whether an error of a call says the inbox is gone for good.
        address: The session's address (for the log).
        call_s: How long one call may take before it counts as failed.
        retry_s: The first and the longest pause before a failed call is made again.
    """
    taking: asyncio.Future[Any] | None = None
    pause = retry_s[0]
    try:
        while True:
            try:
                if taking is None:
                    taking = asyncio.ensure_future(inbox.take(_TAKE_WAIT_S))
                await asyncio.wait([taking], timeout=call_s)
                if not taking.done():
                    raise TimeoutError(f"no message taken within {call_s:g} s")
                done, taking = taking, None
                item = done.result()
                if item is not None:
                    message_id, request = item
                    reply = post(request)
                    await _settle(inbox, (message_id, reply), dead, address, call_s, retry_s)
                pause = retry_s[0]
            except Exception as exc:
                if dead(exc):
                    _log.warning("%s stopped listening: its actor is gone: %s", address, exc)
                    return
                # Said once per run of failures; a cluster that stays away is not logged per try.
                say = _log.warning if pause == retry_s[0] else _log.debug
                say("%s: taking a message failed, trying again: %s", address, exc)
                await asyncio.sleep(pause)  # not a sync: a pause before asking again
                pause = min(pause * 2, retry_s[1])
    finally:
        if taking is not None:
            taking.cancel()


async def _settle(
    inbox: InboxCalls,
    answer: tuple[str, dict[str, Any]],
    dead: Callable[[BaseException], bool],
    address: str,
    call_s: float,
    retry_s: tuple[float, float],
) -> None:
    """Tell ``inbox`` the answer (message id, reply), trying until it is told or gone.

    Raises:
        Exception: The error of a call that says the inbox is gone (``dead``).
    """
    message_id, reply = answer
    pause = retry_s[0]
    while True:
        try:
            await asyncio.wait_for(inbox.settle(message_id, reply), call_s)
            return
        except Exception as exc:
            if dead(exc):
                raise
            say = _log.warning if pause == retry_s[0] else _log.debug
            say("%s: settling message %s failed, trying again: %s", address, message_id, exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, retry_s[1])


def _why(exc: ClusterError) -> str:
    # The cluster's errors speak of remote agents, its first users: here it is messages.
    return str(exc).removeprefix("remote agents: ")


def _kill(actor: Any) -> None:
    import ray

    with contextlib.suppress(Exception):  # dead already, or the cluster gone
        ray.kill(actor, no_restart=True)


async def send_to_bridge(
    cluster: Cluster,
    session_id: str,
    *,
    sender: str,
    text: str,
    summary: str | None = None,
    reply_to: str | None = None,
    wait: float = DELIVER_WAIT_S,
) -> str:
    """Deliver ``text`` to the session listening at ``bridge:<session_id>``.

    The message gets an id of its own; a try that is not answered is made once more with it
    (the recipient posts it once whatever happens).

    Args:
        cluster: The sending session's cluster (reached here if it was not yet).
        session_id: The recipient's session id.
        sender: The sending session's id.
        text: The message (non-empty text; callers validate).
        summary: A short preview for the recipient.
        reply_to: The sender's own session id, when it listens on the cluster too.
        wait: Seconds the recipient has to commit it.

    Returns:
        The id of the mailbox row the message became.

    Raises:
        ToolError: It was not delivered, or may not have been (see :func:`deliver_to`); the
            message says which, why, and names the address.
    """
    address = f"{BRIDGE_PREFIX}{session_id}"
    actor = await _actor_of(cluster, session_id, address)
    request: dict[str, Any] = {"type": "message", "from": sender, "reply_to": reply_to}
    request["text"] = text
    if summary is not None:
        request["summary"] = summary
    return await deliver_to(actor.deliver.remote, address, request, wait)


#: What a sender is told when the recipient may have committed its message all the same.
MAY_HAVE_BEEN_DELIVERED = (
    "the message may have been delivered all the same (the session may have committed it "
    "before failing to answer): do not send it again blindly; wait for a reply, or ask "
    "whether it arrived"
)


async def deliver_to(
    deliver: Callable[[str, dict[str, Any], float], Awaitable[Any]],
    address: str,
    request: dict[str, Any],
    wait: float,
    grace: float = _TAKE_WAIT_S,
) -> str:
    """Hand ``request`` to a recipient's inbox (its actor's ``deliver``), posted once.

    The message gets an id of its own; a try that is not answered is made once more with it
    (the recipient posts it once whatever happens).

    Args:
        deliver: The inbox's ``deliver(message_id, request, wait)``.
        address: The recipient's address, for the errors.
        request: The message request.
        wait: Seconds the recipient has to commit it.
        grace: Seconds a try may take beyond ``wait`` before it counts as unanswered.

    Returns:
        The id of the mailbox row the message became.

    Raises:
        ToolError: It was not delivered, or may not have been (the message says which).
    """
    message_id = secrets.token_hex(12)
    reply: Any = None
    # The retry goes to this same actor handle, never to a name looked up again: a session
    # restarted meanwhile has a new actor that never saw this id (its ids are kept in memory,
    # see taskloom.remote.inbox), and must not be offered it. Against the dead one it fails.
    for _ in range(2):  # a try not answered in time is made once more, with the same id
        try:
            reply = await asyncio.wait_for(deliver(message_id, request, wait), wait + grace)
        except TimeoutError:
            continue
        except Exception as exc:  # its actor died (the session ended) or the cluster is gone
            raise ToolError(
                f"the session at {address} could not be reached: {exc}; {MAY_HAVE_BEEN_DELIVERED}"
            ) from None
        if not (isinstance(reply, dict) and str(reply.get("error", "")).startswith(_NOT_TAKEN)):
            break
    return _delivered(address, reply, wait)


async def _actor_of(cluster: Cluster, session_id: str, address: str) -> Any:
    """The recipient's actor.

    Raises:
        ToolError: No cluster is configured or reachable, or nobody listens at ``address``.
    """
    if cluster.address is None:
        raise _no_cluster(f"SendMessage: to: {address}")
    try:
        await cluster.connect()
    except ClusterError as exc:
        raise ToolError(f"cannot reach {address}: {_why(exc)}") from None
    import ray

    from taskloom.remote.inbox import NAMESPACE

    def find() -> Any:
        return ray.get_actor(session_id, namespace=NAMESPACE)

    try:
        return await asyncio.get_running_loop().run_in_executor(None, find)
    except ValueError:
        raise ToolError(
            f"no taskloom session listens at {address} on the cluster at {cluster.address} "
            "(a session is reached there only while it runs with --listen)"
        ) from None


def _delivered(address: str, reply: Any, wait: float) -> str:
    """The row id from the recipient's answer, or the ToolError it stands for."""
    if isinstance(reply, dict) and reply.get("ok") is True and isinstance(reply.get("id"), str):
        return str(reply["id"])
    if isinstance(reply, dict) and str(reply.get("error", "")).startswith(_NOT_TAKEN):
        # It stays in the recipient's queue: the session may still take and commit it.
        raise ToolError(
            f"the session at {address} did not take the message within {wait:g} s; it stays "
            f"queued there, so {MAY_HAVE_BEEN_DELIVERED}"
        )
    if isinstance(reply, dict) and reply.get("ok") is False:
        error = reply.get("error") or "no reason given"
        raise ToolError(f"the session at {address} refused the message: {error}")
    if reply is None:
        raise ToolError(
            f"the session at {address} did not answer within {wait:g} s; {MAY_HAVE_BEEN_DELIVERED}"
        )
    raise ToolError(
        f"the session at {address} sent a malformed reply: {str(reply)[:200]!r}; "
        f"{MAY_HAVE_BEEN_DELIVERED}"
    )


async def bridge_peers(cluster: Cluster) -> list[BridgePeer]:
    """The sessions listening on ``cluster`` (reached here if it was not yet), by session id.

    Raises:
        ToolError: No cluster is configured, or it cannot be reached.
    """
    if cluster.address is None:
        raise _no_cluster("ListPeers")
    try:
        await cluster.connect()
    except ClusterError as exc:
        raise ToolError(f"cannot list the bridge: peers: {_why(exc)}") from None
    import ray

    from taskloom.remote.inbox import NAMESPACE

    def names() -> list[str]:
        found = ray.util.list_named_actors(all_namespaces=True)
        return sorted(a["name"] for a in found if a.get("namespace") == NAMESPACE)

    loop = asyncio.get_running_loop()
    peers: list[BridgePeer] = []
    for name in await loop.run_in_executor(None, names):
        try:
            actor = await loop.run_in_executor(None, ray.get_actor, name, NAMESPACE)
            about: dict[str, Any] = await asyncio.wait_for(actor.describe.remote(), _TAKE_WAIT_S)
        except Exception:  # ended meanwhile: not a peer any more
            continue
        peers.append(BridgePeer(name, str(about.get("host", "")), str(about.get("cwd", ""))))
    return peers


__all__ = [
    "BRIDGE_PREFIX",
    "DELIVER_WAIT_S",
    "BridgeListener",
    "BridgePeer",
    "InboxCalls",
    "bridge_peers",
    "pump_inbox",
    "send_to_bridge",
]
