"""A workflow given as a Python script: the script decides which agents run, and when.

The script runs as a shell task of the workflow (``python SCRIPT``, owner the workflow's task
id): recorded before it starts, in a process group of its own, killed — verified — with the
workflow, as any command is (:func:`~taskloom.tasks.shell.run_shell`). Its stdout is that
task's output file; its stderr goes to a file beside the workflow's output. It talks to the
session through two pipes opened for it (:mod:`taskloom.workflow_client`): ``spawn`` starts an
agent through the same runner as a list workflow's (owner the workflow, its concurrency and
``workflowMaxAgents``, the session's limits and budgets), ``wait`` and ``gather`` give their
answers, ``send`` messages one. ``done/total`` counts the agents spawned so far.

Every request line gets a reply, one that is not a request an error. The workflow follows
the script's exit, not its pipes: once the script has exited, what it left running (a child
holding its pipe open, say) is killed, verified. When the script exits 0 the workflow waits
for the agents still running, then ends with the script's stdout tail and every agent's
outcome. Any other exit fails the workflow with the
script's stderr tail; the agents still running are stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom.agents.workflow import (
    END_WAIT_S,
    Outcome,
    WorkflowRun,
    WorkflowSpec,
    aggregate,
    caller_policy,
    refused_agent_type,
)
from taskloom.errors import ToolError
from taskloom.tasks.narrow import as_shell
from taskloom.tasks.types import TaskStatus

if TYPE_CHECKING:
    from taskloom.agents.service import AgentService
    from taskloom.tools.base import ToolContext

log = logging.getLogger(__name__)

#: Most characters of the script's stdout (and, on failure, stderr) in the workflow's result.
TAIL_CHARS = 2000
#: A script that waits on its agents prints nothing for long: it is not stalled.
_NEVER_STALLED_S = 365 * 24 * 3600.0


class ScriptRun(WorkflowRun):
    """A workflow driven by a script (see the module docstring)."""

    def __init__(
        self, service: AgentService, spec: WorkflowSpec, ctx: ToolContext, most_agents: int
    ) -> None:
        """Run ``spec.script`` for the caller of ``ctx``; at most ``most_agents`` agents."""
        super().__init__(service.spawner, spec, ctx)
        self.service = service
        self.most_agents = most_agents
        self._cwd = ctx.cwd
        self._caller = ctx.agent_id
        #: What the caller's own Agent calls are decided by: its script's spawns are too.
        self._policy = caller_policy(service, ctx)
        self._slots: asyncio.Semaphore | None = None
        self._agents: list[asyncio.Task[Outcome]] = []
        self._ids: list[asyncio.Future[str]] = []
        self._replies: set[asyncio.Task[None]] = set()
        self.script_task = ""

    @property
    def script_path(self) -> Path:
        """Where the script is written, beside the workflow's output."""
        return Path(self.output_file).with_suffix(".py")

    @property
    def stderr_path(self) -> Path:
        """Where the script's stderr goes."""
        return Path(self.output_file).with_suffix(".stderr")

    async def _drive(self) -> None:
        from taskloom.process.shell_env import shell_env
        from taskloom.tasks.shell import WatchSettings, run_shell
        from taskloom.workflow_client import FDS_ENV

        assert self.spec.script is not None
        self._slots = asyncio.Semaphore(self.spec.concurrency)
        self.script_path.write_text(self.spec.script, encoding="utf-8")
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        env = shell_env(home=self.runtime.home)
        env[FDS_ENV] = f"{request_w},{reply_r}"
        env["PYTHONUNBUFFERED"] = "1"  # its stdout tail is whole even when it is stopped
        command = (
            f"exec {shlex.quote(sys.executable)} {shlex.quote(str(self.script_path))} "
            f"2> {shlex.quote(str(self.stderr_path))}"
        )
        try:
            launched = await run_shell(
                self.runtime,
                command,
                owner=self.task_id,
                description=f"{self.spec.description} (script)",
                run_in_background=True,
                cwd=self._cwd,
                env=env,
                agent_id=self._caller,
                watch=WatchSettings(stall_after=_NEVER_STALLED_S),
                pass_fds=(request_w, reply_r),
            )
        finally:
            os.close(request_w)
            os.close(reply_r)
        self.script_task = launched.task_id
        try:
            await self._serve_until_exit(request_r, reply_w)
            await self._after_script()
        except BaseException:  # stopped: the kill that follows stops what they started
            self._cancel_all()
            raise

    def _cancel_all(self) -> None:
        """Stop answering, and starting agents (their tasks are killed by the caller)."""
        for reply in list(self._replies):
            reply.cancel()
        for agent in self._agents:
            agent.cancel()

    async def _serve_until_exit(self, request_fd: int, reply_fd: int) -> None:
        """Answer the script's requests until it exits; then stop what it left running.

        Not until its request pipe closes: a child the script left behind holds the pipe open,
        and would keep the workflow running as long as it lives. What is left of the script's
        processes is killed, verified, once it has exited.
        """
        from taskloom.process.kill import kill_tree

        read_end, write_end = os.fdopen(request_fd, "rb"), os.fdopen(reply_fd, "wb")
        serving = asyncio.ensure_future(self._serve(read_end, write_end))
        ending = asyncio.ensure_future(self._script_end())
        try:
            done, _ = await asyncio.wait({serving, ending}, return_when=asyncio.FIRST_COMPLETED)
            if serving in done:
                serving.result()  # what broke the serving, if anything did
            await ending  # the pipe may close before the script has exited
        except BaseException:
            # Stopped: kill the script before its pipes close under it, or it fails on the
            # closed pipe first and is recorded failed instead of killed.
            with contextlib.suppress(Exception):
                await asyncio.shield(self.runtime.kill(self.script_task))
            raise
        finally:
            for task in (serving, ending, *self._replies):
                task.cancel()  # nobody reads the replies of a script that exited
            await asyncio.gather(serving, ending, return_exceptions=True)
            read_end.close()
            write_end.close()
        report = await kill_tree(None, tag=self.script_task, grace=self.runtime.kill_grace)
        if not report.verified:
            log.warning("workflow %s: its script's processes survived: %s", self.task_id,
                        report.survivors)  # fmt: skip

    async def _script_end(self) -> None:
        """Return once the script's task has ended."""
        state = self.runtime.get(self.script_task)
        while state is not None and not state.terminal:
            state = await self.runtime.wait(self.script_task, END_WAIT_S)

    async def _serve(self, read_end: Any, write_end: Any) -> None:
        """Answer the script's requests as they come, until its request pipe closes."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=2**24)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), read_end
        )
        out, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, write_end)
        try:
            while line := await reader.readline():
                task = loop.create_task(self._answer(line, out))
                self._replies.add(task)
                task.add_done_callback(self._replies.discard)
        finally:
            transport.close()
            out.close()

    async def _answer(self, line: bytes, out: asyncio.WriteTransport) -> None:
        """One request's reply, written when it is ready (a wait may take long)."""
        request: Any = None
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                raise ValueError(
                    f"a request is a JSON object, got {type(request).__name__}: "
                    f"{line.decode(errors='replace').strip()[:200]!r}"
                )
            reply = {"value": await self._do(request)}
        except _Failed as exc:
            reply = {"failed": str(exc)}
        except Exception as exc:  # every request line gets an answer, or its script hangs
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        reply["id"] = request.get("id") if isinstance(request, dict) else None
        if not out.is_closing():
            out.write(json.dumps(reply).encode() + b"\n")

    async def _do(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        if op == "spawn":
            return self._spawn(str(request["prompt"]), request.get("subagent_type"))
        if op == "wait":
            return _answer_of(await self._outcome(request["handle"]))
        if op == "gather":
            outcomes = [await self._outcome(h) for h in request["handles"]]
            return [_answer_of(o) for o in outcomes]
        if op == "send":
            agent_id = await self._id(request["handle"])
            await self.service.send(agent_id, str(request["text"]), self._child_ctx)
            return None
        raise ValueError(f"unknown request {op!r} (spawn, wait, gather, send)")

    def _spawn(self, prompt: str, agent_type: Any) -> int:
        """Start one agent (it waits for a slot); its handle, numbered from 1."""
        if agent_type is not None:
            self.service.definition(str(agent_type))  # an unknown type: refused now
        kind = str(agent_type) if agent_type is not None else self.service.builder.default_type
        refused = refused_agent_type(self._policy, kind, self._cwd)
        if refused is not None:
            raise ToolError(f"spawn refused: {refused}")
        if len(self._agents) >= self.most_agents:
            raise ToolError(
                f"spawn refused: this workflow has run its {self.most_agents} agents (setting "
                "workflowMaxAgents)"
            )
        index = len(self._agents)
        self.outcomes.append(None)
        self._ids.append(asyncio.get_running_loop().create_future())
        item = prompt.strip().splitlines()[0] if prompt.strip() else "(empty prompt)"
        self.runtime.update(
            self.task_id, lambda s: s if s.terminal else s.replace(total=s.total + 1)
        )
        run = self._run_agent(index, item, prompt, agent_type and str(agent_type))
        self._agents.append(asyncio.get_running_loop().create_task(run))
        return index + 1

    async def _run_agent(
        self, index: int, item: str, prompt: str, agent_type: str | None
    ) -> Outcome:
        assert self._slots is not None
        async with self._slots:
            outcome = await self._agent(index, item, prompt, agent_type)
        self.outcomes[index] = outcome
        ids = self._ids[index]
        if not ids.done():  # it never started: a send to it is refused
            ids.set_exception(ToolError(f"agent {index + 1} did not start: {outcome.answer}"))
        return outcome

    def _launched(self, index: int, agent_id: str) -> None:
        self._ids[index].set_result(agent_id)

    def _handle(self, handle: Any) -> int:
        if isinstance(handle, bool) or not isinstance(handle, int):
            raise ValueError(f"a handle is a number spawn returned, got {handle!r}")
        if not 1 <= handle <= len(self._agents):
            raise ValueError(f"no agent {handle}: spawn has returned 1 to {len(self._agents)}")
        return handle - 1

    async def _outcome(self, handle: Any) -> Outcome:
        return await asyncio.shield(self._agents[self._handle(handle)])

    async def _id(self, handle: Any) -> str:
        return await asyncio.shield(self._ids[self._handle(handle)])

    async def _after_script(self) -> None:
        """The script exited: end the workflow as its exit says (see the module docstring)."""
        shell = as_shell(self.runtime.get(self.script_task))
        code = shell.exit_code if shell is not None else None
        if code == 0:
            await asyncio.gather(*(asyncio.shield(a) for a in self._agents))
            if any(o is not None and o.status == TaskStatus.KILLED.value for o in self.outcomes):
                await self._stop_if_spent()  # a budget stopped its agents: it says so
        else:  # nothing waits for them any more: stop them, and start no more
            self._cancel_all()
            if self._agents:
                await asyncio.wait(self._agents)
            await self.runtime.kill_owned(self.task_id)
        self._forget_mail()
        outcomes = self.finished()
        text = self._aggregate(code, outcomes)
        self._write("\n" + text + "\n")
        self._close_output()
        ok = code == 0
        self.runtime.update(
            self.task_id,
            lambda s: s.replace(
                status=TaskStatus.COMPLETED if ok else TaskStatus.FAILED,
                result=text if ok else None,
                error=None if ok else text,
            ),
        )

    def _aggregate(self, code: int | None, outcomes: list[Outcome]) -> str:
        """The result: how the script ended, its output's tail, then every agent's outcome."""
        stdout = self.runtime.output_path(self.script_task)
        if code == 0:
            head = (
                f"Workflow script exited 0. Its stdout (the last {TAIL_CHARS} characters; "
                f"all of it is in {stdout}):"
            )
            tail = _tail(stdout)
        else:
            head = (
                f"Workflow script failed (exit code {code}). Its stderr (the last "
                f"{TAIL_CHARS} characters; all of it is in {self.stderr_path}):"
            )
            tail = _tail(self.stderr_path)
        return f"{head}\n{tail}\n\n{self._agents_aggregate(outcomes)}"

    def _aggregate_so_far(self) -> str:
        return self._agents_aggregate(self.finished())

    def _agents_aggregate(self, outcomes: list[Outcome]) -> str:
        """Every agent's outcome (the script's agents are its items)."""
        spec = WorkflowSpec(
            description=self.spec.description,
            prompts=tuple(o.item for o in outcomes),
            items=(),
            agent_type=self.spec.agent_type,
            concurrency=self.spec.concurrency,
        )
        return aggregate(self.task_id, spec, outcomes, None, self.output_file)


class _Failed(Exception):
    """An agent the script waited for did not complete."""


def _answer_of(outcome: Outcome) -> str:
    if not outcome.ok:
        who = outcome.agent_id or "not started"
        raise _Failed(f"agent {outcome.index + 1} ({who}) {outcome.status}: {outcome.answer}")
    return outcome.answer


def _tail(path: Path) -> str:
    """The last :data:`TAIL_CHARS` characters of ``path`` (nothing if it is not there)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_CHARS * 4))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return "(none)"
    text = text[-TAIL_CHARS:].rstrip()
    return text or "(none)"


__all__ = ["TAIL_CHARS", "ScriptRun"]
