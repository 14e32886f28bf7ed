"""Running a workflow: many subagents as one task (``local_workflow``).

A :class:`WorkflowRun` registers the workflow's task and drives its agents through the
session's :class:`~taskloom.agents.spawner.Spawner` (so every agent is spawned, budgeted,
limited and watched as any other): at most ``concurrency`` at once, each a background agent
whose owner is the workflow's task id. Its agents' ends are told to that id through the
session's mailbox; the run reads each one's outcome from its task, counts it in the workflow's
state (``done/total``) and appends a line about it to the workflow's output file, and
acknowledges the notifications so that nothing is left for an owner that reads no mail. A
failure (an agent that failed, one that could not start) is collected, not fatal. Once every
item is done, an optional reduce agent is given all the results; then the workflow ends, and
its owner is notified once, with the aggregated result and where each agent's output is.

Stopping the workflow (TaskStop, its owner's end, the session's end) stops its driver first, so
that nothing more starts, then every agent it started, verified as any kill is.

Limits: the session's ``maxConcurrentAgents`` (the run waits for room rather than failing), its
``maxAgentDepth`` (the workflow's agents are one level below its caller) and its budgets (the
agents' spending counts against the caller's subtree) apply as to any spawn. Once a budget
above it has run out (the session's: ``--max-budget-usd``, ``--max-budget-tokens``,
``sessionBudget``; or its caller's), the workflow starts no more agents: it stops those still
running (verified) and ends ``killed``, its one notification saying which budget ended it,
with ``done/total`` so far and the outcomes it has. The workflow's own
limits, ``workflowMaxConcurrency`` and ``workflowMaxAgents``, are checked by the Workflow tool
(:mod:`taskloom.agents.workflow_tool`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._aio import finish_despite_cancel
from taskloom._dataclass import dataclass
from taskloom.agents.limits import MAX_CONCURRENT, limit
from taskloom.agents.spawn_request import SpawnRequest
from taskloom.errors import TaskloomError, ToolError
from taskloom.tasks.narrow import as_agent
from taskloom.tasks.types import TaskStatus, TaskType
from taskloom.tasks.workflow import WorkflowTaskState

if TYPE_CHECKING:
    from taskloom.agents.service import AgentService
    from taskloom.agents.spawner import Spawner
    from taskloom.permissions import PermissionPolicy
    from taskloom.tasks.output import DiskTaskOutput
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tools.base import ToolContext

#: How long one wait for room under ``maxConcurrentAgents`` lasts before it looks again.
ROOM_WAIT_S = 5.0
#: How long one wait for an agent's end lasts before it waits again (agents end by themselves).
END_WAIT_S = 3600.0
#: Most characters of one agent's answer in the aggregated result (all of it is in its file).
ANSWER_CHARS = 400
#: Most characters of all the results given inline to the reduce agent.
REDUCE_INPUT_CHARS = 100_000


@dataclass(frozen=True)
class WorkflowSpec:
    """What a workflow runs.

    Attributes:
        description: A few words naming it.
        prompts: One agent's prompt per item, already rendered from the template.
        items: Each item as shown in the result.
        agent_type: The agent type of its agents (None: the session's default type).
        concurrency: The most agents it runs at once.
        reduce: The reduce agent's prompt (all results are appended to it), if any.
        script: A Python script that runs the agents itself (then there are no prompts):
            see :mod:`taskloom.agents.workflow_script`.
    """

    description: str
    prompts: tuple[str, ...]
    items: tuple[str, ...]
    agent_type: str | None
    concurrency: int
    reduce: str | None = None
    script: str | None = None

    @property
    def total(self) -> int:
        """How many agents it runs: one per item, and one more with a reduce step."""
        return len(self.prompts) + (1 if self.reduce is not None else 0)


@dataclass(frozen=True)
class Outcome:
    """What one agent of a workflow came to.

    Attributes:
        index: Its item's index (0-based; the reduce agent's is the number of items).
        item: Its item, as shown.
        agent_id: Its agent's id ('' if it could not start).
        status: ``completed``, ``failed`` or ``killed``.
        answer: Its answer, or why it failed.
        output_file: Where its output (its transcript's text) is ('' if it did not start).
        tokens: Tokens it used.
        tool_uses: Tool calls it made.
    """

    index: int
    item: str
    agent_id: str
    status: str
    answer: str
    output_file: str
    tokens: int = 0
    tool_uses: int = 0

    @property
    def ok(self) -> bool:
        """Whether it completed."""
        return self.status == TaskStatus.COMPLETED.value


class WorkflowRun:
    """One workflow as it runs: its task's live handle (see the module docstring)."""

    def __init__(self, spawner: Spawner, spec: WorkflowSpec, ctx: ToolContext) -> None:
        """Run ``spec`` for the caller of ``ctx`` (the workflow's owner)."""
        self.spawner = spawner
        self.runtime: TaskRuntime = spawner.runtime
        self.spec = spec
        self.task_id = self.runtime.new_id(TaskType.LOCAL_WORKFLOW)
        # Its agents are the workflow's tasks; their spending counts under its caller.
        self._child_ctx = dataclasses.replace(
            ctx, owner=self.task_id, agent_id=ctx.agent_id or ctx.owner, tool_use_id=""
        )
        self._owner = ctx.owner
        self._tool_use_id = ctx.tool_use_id
        #: Whose budgets its agents spend (they are opened under the workflow's caller).
        self._payer = ctx.agent_id or ctx.owner
        #: The stop a budget that ran out started (one), and whether its end was recorded.
        self._budget_stop: asyncio.Task[object] | None = None
        self._budget_recorded = False
        #: The agents started and not yet counted: their item, agent id and output file.
        self._in_flight: dict[int, tuple[str, str, str]] = {}
        self.outcomes: list[Outcome | None] = [None] * len(spec.prompts)
        self.reduced: Outcome | None = None
        self.driver: asyncio.Task[None] | None = None
        self._output: DiskTaskOutput | None = None

    @property
    def output_file(self) -> str:
        """The workflow's output file."""
        return str(self.runtime.output_path(self.task_id))

    def start(self) -> str:
        """Register the workflow's task and start driving it; returns its id."""
        self._output = self.runtime.create_output(self.task_id)
        self.runtime.register(
            WorkflowTaskState(
                id=self.task_id,
                status=TaskStatus.RUNNING,
                description=self.spec.description,
                owner=self._owner,
                tool_use_id=self._tool_use_id or None,
                output_file=self.output_file,
                agent_type=self.spec.agent_type or self.spawner.builder.default_type,
                total=self.spec.total,
                concurrency=self.spec.concurrency,
            ),
            handle=self,
        )
        self.driver = asyncio.get_running_loop().create_task(self._run())
        return self.task_id

    # -- the live handle ----------------------------------------------------------------------

    async def kill(self) -> None:
        """Stop the driver (nothing more starts), then every agent it started, verified."""
        driver = self.driver
        if driver is not None and not driver.done():
            driver.cancel()
            await asyncio.wait([driver])
        await self.runtime.kill_owned(self.task_id)
        self._count_stopped()
        self._forget_mail()
        why = self.spawner.budgets.exhausted(self._payer)
        if why is not None:  # a budget ended it (whoever stops it now): its end says so
            self._record_budget_end(why)
        self._close_output()

    async def detach(self) -> None:
        """Nothing outlives its session's process here: it runs on until that process ends."""

    # -- the driver ---------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._drive()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug or a store error must not leave its agents running
            await finish_despite_cancel(self._fail(f"{type(exc).__name__}: {exc}"))

    async def _drive(self) -> None:
        pending = iter(range(len(self.spec.prompts)))
        width = max(1, min(self.spec.concurrency, len(self.spec.prompts)))
        await asyncio.gather(*(self._worker(pending) for _ in range(width)))
        if any(o is not None and o.status == TaskStatus.KILLED.value for o in self.outcomes):
            await self._stop_if_spent()  # its agents were stopped by a budget: it says so
        if self.spec.reduce is not None:
            index = len(self.spec.prompts)
            prompt = reduce_prompt(self.spec.reduce, self.finished(), self.output_file)
            self.reduced = await self._agent(index, "reduce", prompt)
        self._finish()

    async def _worker(self, pending: Any) -> None:
        """Take the next item until none is left (the iterator is shared by the workers)."""
        for index in pending:
            self.outcomes[index] = await self._agent(
                index, self.spec.items[index], self.spec.prompts[index]
            )

    async def _agent(
        self, index: int, item: str, prompt: str, agent_type: str | None = None
    ) -> Outcome:
        """Spawn one agent, wait for its end, count it; a failure is its outcome."""
        request = SpawnRequest(
            description=f"{self.spec.description} #{index + 1}",
            prompt=prompt,
            subagent_type=agent_type or self.spec.agent_type or self.spawner.builder.default_type,
            run_in_background=True,
        )
        while True:
            await self._stop_if_spent()
            try:
                launched = await self.spawner.spawn(request, self._child_ctx)
                break
            except (ToolError, TaskloomError) as exc:
                if await self._room():
                    continue  # refused for room: there is some now
                outcome = Outcome(index, item, "", TaskStatus.FAILED.value, str(exc), "")
                self._count(outcome, started=False)
                return outcome
        self._launched(index, launched.agent_id)
        self.runtime.update(self.task_id, lambda s: _add(s, running=1))
        self._in_flight[index] = (item, launched.agent_id, launched.output_file)
        state = self.runtime.get(launched.agent_id)
        while state is not None and not state.terminal:
            state = await self.runtime.wait(launched.agent_id, END_WAIT_S)
        del self._in_flight[index]
        outcome = _outcome(index, item, launched.agent_id, launched.output_file, state)
        self._count(outcome, started=True)
        return outcome

    def _count_stopped(self) -> None:
        """Once its agents are stopped: count those whose waits the stop cancelled."""
        for index, (item, agent_id, output_file) in sorted(self._in_flight.items()):
            state = self.runtime.get(agent_id)
            outcome = _outcome(index, item, agent_id, output_file, state)
            if index < len(self.outcomes):
                self.outcomes[index] = outcome
            else:  # the reduce agent
                self.reduced = outcome
            self._count(outcome, started=True)
        self._in_flight.clear()

    async def _stop_if_spent(self) -> None:
        """If a budget above the workflow ran out: stop it (it never returns then).

        The stop is a task of its own (the runtime's kill, which cancels this driver first),
        so that the driver is not cancelling itself; the first to find the budget spent
        starts it, the others wait for it too.
        """
        if self.spawner.budgets.exhausted(self._payer) is None:
            return
        if self._budget_stop is None:
            loop = asyncio.get_running_loop()
            self._budget_stop = loop.create_task(self.runtime.kill(self.task_id))
        await asyncio.shield(self._budget_stop)
        raise asyncio.CancelledError  # the kill has cancelled this driver by now

    def _record_budget_end(self, why: str) -> None:
        """Record, once, that the budget ended it: why, and what its agents came to so far."""
        if self._budget_recorded:
            return
        self._budget_recorded = True
        reason = f"{why}; it started no more agents"
        text = f"Stopped: {reason}.\n" + self._aggregate_so_far()
        self._write("\n" + text + "\n")
        self.runtime.update(
            self.task_id,
            lambda s: s if s.terminal else s.replace(stopped_reason=reason, result=text),
        )

    def _aggregate_so_far(self) -> str:
        """The aggregated result of the agents that ended so far."""
        return aggregate(self.task_id, self.spec, self.finished(), self.reduced, self.output_file)

    def _launched(self, index: int, agent_id: str) -> None:
        """Agent ``index`` started as ``agent_id`` (a script may message it from now on)."""

    async def _room(self) -> bool:
        """After a refused spawn: wait for room if the session was full; whether it was.

        Counting the session's agents costs a look at every task, so it is done only when a
        spawn was refused: under ``maxConcurrentAgents`` the workflow waits for room rather
        than failing its item.
        """
        try:
            most = limit(self.spawner.settings, MAX_CONCURRENT)
        except ToolError:
            return False  # the setting is wrong: the refusal says so
        if self.spawner.limits.live() < most:
            return False
        while self.spawner.limits.live() >= most:
            await self.runtime.wait_for_task_end(ROOM_WAIT_S)
        return True

    def _count(self, outcome: Outcome, *, started: bool) -> None:
        """An agent ended (or did not start): count it, and say so in the output file."""
        running = -1 if started else 0
        failed = 0 if outcome.ok else 1
        self.runtime.update(
            self.task_id,
            lambda s: _add(
                s,
                running=running,
                done=1,
                failed=failed,
                total_tokens=outcome.tokens,
                tool_uses=outcome.tool_uses,
            ),
        )
        self._forget_mail()
        self._write(json.dumps(dataclasses.asdict(outcome)) + "\n")

    def finished(self) -> list[Outcome]:
        """The outcomes of the items that ended, in item order."""
        return [o for o in self.outcomes if o is not None]

    def _finish(self) -> None:
        """End the workflow with its aggregated result: failed only if no agent completed."""
        outcomes = self.finished()
        text = aggregate(self.task_id, self.spec, outcomes, self.reduced, self.output_file)
        self._write("\n" + text + "\n")
        self._close_output()
        ok = any(o.ok for o in outcomes) and (self.reduced is None or self.reduced.ok)
        self.runtime.update(
            self.task_id,
            lambda s: s.replace(
                status=TaskStatus.COMPLETED if ok else TaskStatus.FAILED,
                result=text if ok else None,
                error=None if ok else text,
            ),
        )

    async def _fail(self, why: str) -> None:
        """The driver broke: stop what it started, and end the workflow failed."""
        await self.runtime.kill_owned(self.task_id)
        self._forget_mail()
        self._close_output()
        self.runtime.update(
            self.task_id,
            lambda s: s if s.terminal else s.replace(status=TaskStatus.FAILED, error=why),
        )

    def _forget_mail(self) -> None:
        """Acknowledge what its agents' ends queued for it: the run read their tasks instead."""
        self.runtime.notifications.discard_owner(self.task_id)

    def _write(self, text: str) -> None:
        if self._output is not None:
            self._output.append(text)

    def _close_output(self) -> None:
        if self._output is not None:
            self._output.close()
            self._output = None


def refused_agent_type(policy: PermissionPolicy | None, agent_type: str, cwd: Path) -> str | None:
    """Why a workflow may not start ``agent_type``, as the Agent tool's rules would say.

    A workflow's agents are decided as an Agent call for their type would be (``Agent(X)``
    deny rules, ``--disallowedTools``): denied, refused. One that would need approval is
    refused too, saying so: nobody is asked once per agent of a workflow.
    """
    if policy is None:
        return None
    from taskloom.permissions import PermissionRequest

    request = PermissionRequest("Agent", "other", agent_type, cwd, {"subagent_type": agent_type})
    decision = policy.decide(request)
    if decision.behavior == "allow":
        return None
    rule = decision.rule
    if decision.behavior == "deny":
        if rule is None or rule.content is None:
            return decision.reason
        return (
            f"Agent type '{agent_type}' has been denied by permission rule "
            f"'Agent({rule.content})' ({rule.source})."
        )
    return (
        f"Agent type '{agent_type}' needs approval ({decision.reason}), and a workflow's "
        f"agents are not asked for one by one: allow it (an Agent({agent_type}) rule) or "
        "start it with the Agent tool."
    )


def caller_policy(service: AgentService, ctx: ToolContext) -> PermissionPolicy | None:
    """The permission policy the caller's own Agent calls are decided by."""
    if ctx.engine is not None:
        policy: PermissionPolicy | None = ctx.engine.config.permissions
        return policy
    return service.builder.policy


def _add(state: WorkflowTaskState, **deltas: int) -> WorkflowTaskState:
    """``state`` with each named count grown by its delta (a workflow that ended is kept)."""
    if state.terminal:
        return state
    return state.replace(**{k: getattr(state, k) + v for k, v in deltas.items()})


def _outcome(index: int, item: str, agent_id: str, output_file: str, state: Any) -> Outcome:
    """What an ended agent's task says it came to."""
    agent = as_agent(state)
    if agent is None:  # its record is gone: nothing is known of it
        return Outcome(index, item, agent_id, TaskStatus.FAILED.value, "no record", output_file)
    if agent.status == TaskStatus.COMPLETED:
        answer = agent.result or ""
    else:
        answer = agent.stopped_reason or agent.error or agent.status.value
    return Outcome(
        index,
        item,
        agent_id,
        agent.status.value,
        answer,
        agent.output_file or output_file,
        agent.total_tokens,
        agent.tool_uses,
    )


def _clip(text: str, most: int) -> str:
    text = text.strip()
    return text if len(text) <= most else text[:most] + " […]"


def aggregate(
    task_id: str,
    spec: WorkflowSpec,
    outcomes: Sequence[Outcome],
    reduced: Outcome | None,
    output_file: str,
) -> str:
    """The workflow's result: its counts, the reduce step's answer, then each agent's outcome.

    One line or so per agent (its answer cut at :data:`ANSWER_CHARS`), so that a notification
    holds many; where each agent's output is is said once, for the directory all share.
    """
    ok = sum(1 for o in outcomes if o.ok)
    where = str(Path(output_file).parent)
    lines = [
        f"Workflow {task_id}: {len(outcomes)} of {len(spec.prompts)} items ran, {ok} completed, "
        f"{len(outcomes) - ok} failed (concurrency {spec.concurrency}).",
        f"Each agent's output file is {where}/ID.output, ID its agent id below; every "
        f"outcome, one JSON object a line, is in {output_file}.",
    ]
    if reduced is not None:
        lines += ["", f"Reduce ({reduced.agent_id or 'not started'}, {reduced.status}):"]
        lines += [reduced.answer.strip(), ""]
    lines.append("Items (number · item · status · agent id: answer):")
    for o in outcomes:
        answer = _clip(o.answer, ANSWER_CHARS).replace("\n", "\n    ")
        line = f"[{o.index + 1}] {_clip(o.item, 80)} · {o.status} · {o.agent_id or '-'}: {answer}"
        if o.output_file and str(Path(o.output_file).parent) != where:
            line += f" (output: {o.output_file})"
        lines.append(line)
    return "\n".join(lines)


def reduce_prompt(prompt: str, outcomes: Sequence[Outcome], output_file: str) -> str:
    """The reduce agent's prompt: its own, then every result (long ones cut, all in the file)."""
    parts = [prompt.rstrip(), "", f'<results count="{len(outcomes)}">']
    room = REDUCE_INPUT_CHARS
    for o in outcomes:
        answer = o.answer.strip()
        if len(answer) > room:
            answer = answer[: max(0, room)] + f" […cut: the whole is in {o.output_file}]"
        room -= len(answer)
        parts.append(f'<result item="{o.index + 1}" status="{o.status}">')
        parts += [_clip(o.item, 200), answer, "</result>"]
    parts += ["</results>", f"Every outcome, one JSON object a line: {output_file}"]
    return "\n".join(parts)


__all__ = [
    "Outcome",
    "WorkflowRun",
    "WorkflowSpec",
    "aggregate",
    "caller_policy",
    "reduce_prompt",
    "refused_agent_type",
]
