"""The usage ledger: every model response and tool call of a session, per agent and per model.

One :class:`UsageLedger` counts what a session's agents spent: each response's tokens
(:meth:`~UsageLedger.charge`), each tool call (:meth:`~UsageLedger.charge_tool_call`), and the
reports of agents whose calls another process makes — a remote agent's worker, a pane
teammate's process — whose figures are cumulative: :meth:`~UsageLedger.report` counts what
they grew by, as a response would be. Everything the session shows of its usage reads it: the
results' ``modelUsage``, ``total_cost_usd`` and ``agentUsage``, the budgets, task progress and
the listings.

Each agent's own figures (:meth:`~UsageLedger.own`) and its subtree's — it and every agent it
started, recursively (:meth:`~UsageLedger.subtree`; see :meth:`~UsageLedger.link`) — are
:class:`Figures`; its latest response is kept too (:meth:`~UsageLedger.latest`: the ``usage``
Claude Code's Agent result gives). A charge carries its cost in dollars when its charger
priced it (an engine prices its responses by the session's price table); one that does not is
priced by the ledger's ``price``, and a model it does not price costs 0.

A response whose provider reported no usage (``None``: some OpenAI-compatible servers send
none) adds no tokens but is counted as unreported: the figures are then a lower bound, and say
so (``unreported``).

A report from elsewhere travels as a mapping of model to token counts under :data:`REPORT_KEY`
(a worker's event, a teammate's task record): :func:`report_fields` writes it there and
:func:`report_in` reads it back, leaving bad entries out. Which tasks' usage arrives so is
each task kind's to say (``TaskKind.usage_from_elsewhere``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from typing import Any, NamedTuple, Protocol

from taskloom._dataclass import dataclass

#: The key under which a report from another process carries its usage per model.
REPORT_KEY = "usage_by_model"
#: The token counts a report carries per model (Anthropic's names).
TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)
#: Of the cache writes, those to the one-hour cache (priced higher): a report carries them
#: under this key (the API's name, in its ``usage.cache_creation``) when there are some.
HOUR_WRITES_KEY = "ephemeral_1h_input_tokens"
#: The main thread's key in a ledger.
MAIN = "main"


class TokenCounts(Protocol):
    """Token counts of a response or a sum of them (a model response's ``Usage``, ``Tokens``)."""

    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cache_read_input_tokens(self) -> int: ...
    @property
    def cache_creation_input_tokens(self) -> int: ...
    @property
    def context_tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Tokens:
    """Token counts, summed (Anthropic's field names): what the ledger keeps per model.

    Not the messages' ``Usage``: the ledger sums counts and keeps the one-hour writes as a
    count of their own.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0  # of the cache writes, the one-hour cache's

    @property
    def hour_cache_writes(self) -> int:
        """The cache writes of the one-hour cache (a price table charges them more)."""
        return self.ephemeral_1h_input_tokens

    @property
    def context_tokens(self) -> int:
        """Everything the model read: input plus cache reads and writes."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def dump(self) -> dict[str, int]:
        """The counts as a dict, as a ``Usage`` dumps them."""
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }


#: What ``usage`` of ``model`` costs in dollars; None: the model is not priced (costs 0).
Pricer = Callable[[str, TokenCounts], "float | None"]
#: Cumulative token counts per model, as reports carry them.
ByModel = dict[str, dict[str, int]]


def _unpriced(model: str, usage: TokenCounts) -> float | None:
    return None


def _plus(a: TokenCounts, b: TokenCounts, sign: int = 1) -> Tokens:
    hour = _hour(a) + sign * _hour(b)
    return Tokens(
        **{k: getattr(a, k) + sign * getattr(b, k) for k in TOKEN_FIELDS},
        ephemeral_1h_input_tokens=hour,
    )


def _hour(usage: TokenCounts) -> int:
    """Its one-hour cache writes (a response's ``Usage`` and ``Tokens`` say; else 0)."""
    hour = getattr(usage, "hour_cache_writes", 0)
    return hour if isinstance(hour, int) else 0


def _tokens(raw: Mapping[str, int]) -> Tokens:
    """Token counts from a report's entry for one model."""
    counts = {k: int(raw.get(k, 0)) for k in TOKEN_FIELDS}
    return Tokens(**counts, ephemeral_1h_input_tokens=int(raw.get(HOUR_WRITES_KEY, 0)))


@dataclass(frozen=True, slots=True)
class Figures:
    """What an agent (or a subtree, or a model) spent.

    Attributes:
        input_tokens: Input tokens, cache excluded.
        output_tokens: Output tokens.
        cache_read_input_tokens: Tokens read from the prompt cache.
        cache_creation_input_tokens: Tokens written to the prompt cache.
        tool_uses: Tool calls made.
        cost_usd: Dollars, by the ledger's prices.
        unreported: Responses whose provider reported no usage (counted as 0 tokens).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    tool_uses: int = 0
    cost_usd: float = 0.0
    unreported: int = 0

    @property
    def tokens(self) -> int:
        """Every token read and written (input, cache reads and writes, output): budgets' count."""
        return (
            self.input_tokens
            + self.cache_read_input_tokens
            + self.cache_creation_input_tokens
            + self.output_tokens
        )

    def __add__(self, other: Figures) -> Figures:
        return Figures(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.tool_uses + other.tool_uses,
            self.cost_usd + other.cost_usd,
            self.unreported + other.unreported,
        )


class ModelFigures(NamedTuple):
    """One model's share of what was counted.

    Attributes:
        usage: Its tokens.
        cost_usd: What they cost (0 when the model is not priced).
        unreported: Its responses that reported no usage.
    """

    usage: Tokens
    cost_usd: float
    unreported: int


class Spent(NamedTuple):
    """What one charge added: tokens (as :attr:`Figures.tokens` counts), tool calls, dollars."""

    tokens: int = 0
    tool_calls: int = 0
    usd: float = 0.0


class Latest(NamedTuple):
    """An agent's latest response, as the ledger was charged with it.

    Attributes:
        model: The model that gave it.
        usage: Its tokens (None: its provider reported none).
    """

    model: str
    usage: Tokens | None


class Reported(NamedTuple):
    """What another process reported of an agent whose calls it makes (cumulative figures).

    Attributes:
        agent_id: Its key in the ledger.
        by_model: Its tokens per model.
        tool_uses: Its tool calls.
    """

    agent_id: str
    by_model: ByModel
    tool_uses: int = 0


@dataclass(frozen=True, slots=True)
class Mark:
    """What a ledger had counted at one moment (for ``since`` in :meth:`UsageLedger.models`)."""

    usage: dict[str, Tokens] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    unreported: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Account:
    """One agent's counts."""

    usage: dict[str, Tokens] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    unreported: dict[str, int] = field(default_factory=dict)
    tool_uses: int = 0
    #: What its other process last reported, per model, and its tool calls then.
    reported: dict[str, Tokens] = field(default_factory=dict)
    reported_calls: int = 0
    latest: Latest | None = None

    def add(self, model: str, usage: TokenCounts | None, usd: float) -> None:
        self.latest = Latest(model, None if usage is None else _plus(Tokens(), usage))
        self.usage[model] = _plus(self.usage.get(model, Tokens()), usage or Tokens())
        self.cost[model] = self.cost.get(model, 0.0) + usd
        self.counts[model] = self.counts.get(model, 0) + 1
        if usage is None:
            self.unreported[model] = self.unreported.get(model, 0) + 1


class UsageLedger:
    """A session's usage per agent and per model (see the module docstring).

    Args:
        price: Prices the tokens of a charge that comes without its cost (None: nothing is
            priced).
    """

    def __init__(self, price: Pricer | None = None) -> None:
        #: Prices the tokens of a charge that comes without its cost.
        self.price: Pricer = price or _unpriced
        self._accounts: dict[str, _Account] = {}
        self._parents: dict[str, str] = {}
        self._whole = _Account()  # every agent's, for the session's figures and marks
        self._listeners: list[Callable[[str, Spent], None]] = []

    def _account(self, agent_id: str) -> _Account:
        found = self._accounts.get(agent_id)
        if found is None:
            found = self._accounts[agent_id] = _Account()
        return found

    # -- charging -----------------------------------------------------------------------------

    def listen(self, heard: Callable[[str, Spent], None]) -> None:
        """Call ``heard(agent_id, spent)`` with what each charge adds (the budgets count so)."""
        self._listeners.append(heard)

    def _tell(self, agent_id: str, spent: Spent) -> None:
        if any(spent):
            for heard in self._listeners:
                heard(agent_id, spent)

    def link(self, agent_id: str, parent: str | None) -> None:
        """``agent_id`` was started by ``parent`` (None: by the main thread, at the top)."""
        self._account(agent_id)
        if parent is not None and parent != agent_id:
            self._parents[agent_id] = parent

    def charge(
        self, agent_id: str, model: str, usage: TokenCounts | None, usd: float | None = None
    ) -> Spent:
        """Count one response of ``model`` to ``agent_id``; what it added.

        ``usage`` None: the provider reported none. ``usd``: what it cost (None: priced by
        the ledger's ``price``).
        """
        if usd is None:
            usd = (self.price(model, usage) if usage is not None else None) or 0.0
        self._account(agent_id).add(model, usage, usd)
        self._whole.add(model, usage, usd)
        if usage is None:
            return Spent()
        spent = Spent(usage.context_tokens + usage.output_tokens, 0, usd)
        self._tell(agent_id, spent)
        return spent

    def charge_tool_call(self, agent_id: str, calls: int = 1) -> None:
        """Count tool calls ``agent_id`` made."""
        self._account(agent_id).tool_uses += calls
        self._tell(agent_id, Spent(0, calls, 0.0))

    def report(
        self,
        agent_id: str,
        by_model: Mapping[str, Mapping[str, int]],
        tool_uses: int | None = None,
        price: Pricer | None = None,
    ) -> Spent:
        """Count what an agent whose calls another process makes spent since its last report.

        ``by_model`` (and ``tool_uses``) are that process's cumulative figures; what grew is
        counted as a response would be, priced by ``price`` (default: the ledger's), and
        returned. Figures that went back mean a new process counting from zero (see
        :meth:`restart`): they are counted whole.
        """
        price = price or self.price
        account = self._account(agent_id)
        tokens, usd = 0, 0.0
        for model, raw in by_model.items():
            now = _tokens(raw)
            grown = _plus(now, account.reported.get(model, Tokens()), -1)
            if min(getattr(grown, k) for k in (*TOKEN_FIELDS, HOUR_WRITES_KEY)) < 0:
                grown = now
            if grown == Tokens():
                continue
            account.reported[model] = now
            spent = self.charge(agent_id, model, grown, price(model, grown) or 0.0)
            tokens, usd = tokens + spent.tokens, usd + spent.usd
        calls = 0
        if tool_uses is not None:
            calls = tool_uses - account.reported_calls
            calls = tool_uses if calls < 0 else calls
            account.reported_calls = tool_uses
            if calls:
                self.charge_tool_call(agent_id, calls)
        return Spent(tokens, calls, usd)

    def baseline(
        self, agent_id: str, by_model: Mapping[str, Mapping[str, int]], tool_uses: int = 0
    ) -> None:
        """What ``agent_id`` had reported before this process: counted already, by another."""
        account = self._account(agent_id)
        account.reported = {m: _tokens(u) for m, u in by_model.items()}
        account.reported_calls = tool_uses

    def restart(self, agent_id: str) -> None:
        """A new process runs ``agent_id`` (a spawn, a resume): its reports start from zero."""
        account = self._account(agent_id)
        account.reported, account.reported_calls = {}, 0

    # -- reading ------------------------------------------------------------------------------

    def agents(self) -> list[str]:
        """Every agent charged or linked, in the order first seen."""
        return list(self._accounts)

    def parent(self, agent_id: str) -> str | None:
        """Who started ``agent_id`` (None: the main thread, or not known)."""
        return self._parents.get(agent_id)

    def own(self, agent_id: str) -> Figures:
        """What ``agent_id`` itself spent (its agents' not included)."""
        account = self._accounts.get(agent_id)
        return self._figures(account) if account is not None else Figures()

    def latest(self, agent_id: str) -> Latest | None:
        """``agent_id``'s latest response (None: none was counted in this process).

        Of an agent whose calls another process makes, what its latest report added.
        """
        account = self._accounts.get(agent_id)
        return account.latest if account is not None else None

    def subtree(self, agent_id: str) -> Figures:
        """What ``agent_id`` and every agent it started, recursively, spent."""
        children: dict[str, list[str]] = {}
        for child, parent in self._parents.items():
            children.setdefault(parent, []).append(child)
        total, stack, seen = Figures(), [agent_id], set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            total += self.own(node)
            stack += children.get(node, [])
        return total

    def total(self) -> Figures:
        """What the whole session spent."""
        figures = self._figures(self._whole)
        calls = sum(a.tool_uses for a in self._accounts.values())
        return Figures(**{**_fields(figures), "tool_uses": calls})

    def models(
        self, agent_id: str | None = None, since: Mark | None = None
    ) -> dict[str, ModelFigures]:
        """Per model what was counted (of ``agent_id``, else of the session; since ``since``).

        ``since`` is a :meth:`mark` of the same agent (or of the session).

        A model is listed when something was counted for it (since ``since``), whatever it
        reported (nothing, or 0 tokens).
        """
        account = self._whole if agent_id is None else self._accounts.get(agent_id, _Account())
        before = since or Mark()
        out: dict[str, ModelFigures] = {}
        for model, usage in account.usage.items():
            if since is not None and account.counts.get(model, 0) == before.counts.get(model, 0):
                continue
            usage = _plus(usage, before.usage.get(model, Tokens()), -1)
            cost = account.cost.get(model, 0.0) - before.cost.get(model, 0.0)
            unreported = account.unreported.get(model, 0) - before.unreported.get(model, 0)
            out[model] = ModelFigures(usage, cost, unreported)
        return out

    def cost(self, since: Mark | None = None) -> float:
        """Dollars the session spent (since ``since``)."""
        return sum(m.cost_usd for m in self.models(since=since).values())

    def mark(self, agent_id: str | None = None) -> Mark:
        """What was counted so far of ``agent_id`` (None: the session), for ``since``.

        A mark is read against the same agent's (or the session's) counts.
        """
        counted = self._whole if agent_id is None else self._accounts.get(agent_id, _Account())
        return Mark(
            dict(counted.usage), dict(counted.cost), dict(counted.counts), dict(counted.unreported)
        )

    def usage(self, agent_id: str | None = None, since: Mark | None = None) -> Tokens:
        """Tokens of ``agent_id`` (None: the session's) summed over its models (since ``since``)."""
        total = Tokens()
        for figures in self.models(agent_id, since).values():
            total = _plus(total, figures.usage)
        return total

    def report_of(self, agent_id: str | None = None) -> ByModel:
        """Tokens so far per model of ``agent_id`` (None: the session's).

        What a process reports of the agent it runs for another (a worker, a pane).
        """
        return _by_model(self.models(agent_id))

    def _figures(self, account: _Account) -> Figures:
        usage = Tokens()
        for used in account.usage.values():
            usage = _plus(usage, used)
        return Figures(
            **{k: getattr(usage, k) for k in TOKEN_FIELDS},
            tool_uses=account.tool_uses,
            cost_usd=sum(account.cost.values()),
            unreported=sum(account.unreported.values()),
        )


def _fields(figures: Figures) -> dict[str, Any]:
    return {name: getattr(figures, name) for name in Figures.__dataclass_fields__}


def _by_model(models: Mapping[str, ModelFigures]) -> ByModel:
    out: ByModel = {}
    for model, figures in models.items():
        counts = {k: getattr(figures.usage, k) for k in TOKEN_FIELDS}
        if figures.usage.hour_cache_writes:
            counts[HOUR_WRITES_KEY] = figures.usage.hour_cache_writes
        out[model] = counts
    return out


# -- reports from other processes -------------------------------------------------------------


def report_fields(by_model: Mapping[str, Mapping[str, int]]) -> dict[str, ByModel]:
    """The fields carrying ``by_model`` in a report (a worker's event, a task record)."""
    return {REPORT_KEY: {m: dict(u) for m, u in by_model.items()}}


def report_in(record: Mapping[str, Any] | object) -> ByModel | None:
    """The usage per model a report carries (bad entries left out); None if it has none.

    ``record``: a mapping (a worker's event, a stored task record) or a task state.
    """
    if isinstance(record, Mapping):
        raw = record.get(REPORT_KEY)
    else:
        raw = getattr(record, REPORT_KEY, None)
    if not isinstance(raw, Mapping):
        return None
    out: ByModel = {}
    for model, usage in raw.items():
        if isinstance(usage, Mapping):
            out[str(model)] = {
                k: int(v)
                for k, v in usage.items()
                if k in (*TOKEN_FIELDS, HOUR_WRITES_KEY)
                and isinstance(v, int)
                and not isinstance(v, bool)
            }
    return out


def spent_tokens(by_model: Iterable[Mapping[str, int]]) -> int:
    """Tokens (as :attr:`Figures.tokens` counts them) of a report's per-model counts."""
    return sum(sum(int(u.get(k, 0)) for k in TOKEN_FIELDS) for u in by_model)


__all__ = [
    "HOUR_WRITES_KEY",
    "MAIN",
    "REPORT_KEY",
    "TOKEN_FIELDS",
    "ByModel",
    "Figures",
    "Latest",
    "Mark",
    "ModelFigures",
    "Pricer",
    "Reported",
    "Spent",
    "UsageLedger",
    "report_fields",
    "report_in",
    "spent_tokens",
]
