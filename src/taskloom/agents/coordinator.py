"""Coordinator mode: the main thread orchestrates background workers and does no work itself.

On with ``--coordinator``, the setting ``coordinatorMode: true`` or the environment
(``TASKLOOM_COORDINATOR_MODE=1``; ``CLAUDE_CODE_COORDINATOR_MODE=1`` for users of Claude
Code). The main thread is then offered exactly Agent, SendMessage and TaskStop; every Agent call
runs in the background; the agent types are ``worker`` (the full worker tool set), the
read-only built-ins and the custom agents; and the system prompt describes the four phases of
the work (research, synthesis, implementation, verification) and what the workers can use.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom.agents.definition import AgentDefinition
from taskloom.agents.loader import AgentCatalog
from taskloom.prompts import environment

if TYPE_CHECKING:
    from taskloom.agents.builder import AgentBuilder

#: The environment variables that switch coordinator mode on (ours, then Claude Code's).
ENV_VARS = ("TASKLOOM_COORDINATOR_MODE", "CLAUDE_CODE_COORDINATOR_MODE")
#: The agent type the coordinator spawns when it names none.
WORKER_TYPE = "worker"

_TRUE = ("1", "true", "yes", "on")


def coordinator_enabled(
    option: bool | None, settings: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> bool:
    """Whether the session runs in coordinator mode: the option, else the setting or env."""
    if option is not None:
        return option
    if settings.get("coordinatorMode") is True:
        return True
    env = os.environ if env is None else env
    return any(env.get(name, "").strip().lower() in _TRUE for name in ENV_VARS)


WORKER_PROMPT = """\
You are a worker agent. A coordinator split a larger task into pieces and handed you one. You do
not see the coordinator's conversation: the instructions you were given are all you know, so
read them carefully and do exactly that piece of work — no more.

How to work:
- Gather the context you need before changing anything: Glob and Grep to find the code, Read
  to understand it. Follow existing patterns in the codebase.
- Make the change the instructions describe. Edit only the files they name or clearly imply;
  another worker may be editing other files at the same time.
- Verify your work with Bash: run the tests, the type checker or the program. When asked to
  verify someone else's change, actually run things and report what you saw; do not take a
  claim on trust.
- Do not ask questions; nobody can answer them before you finish. Make the most reasonable
  assumption and say so in your report.
- The coordinator may send you follow-up messages while you work: address them before you
  finish.

Your final message is your whole report; the coordinator reads nothing else:
- Lead with the outcome in a sentence or two: done, partly done, or blocked (and on what).
- Then the evidence: absolute file paths with line numbers, the commands you ran and what
  they showed, and every file you changed.
- Anything you could not finish or verify, said plainly."""

WORKER = AgentDefinition(
    agent_type=WORKER_TYPE,
    when_to_use=(
        "A worker that carries out one self-contained piece of the task with the full set of "
        "worker tools: researching the code, implementing a change, or verifying one."
    ),
    system_prompt=WORKER_PROMPT,
    tools=("*",),
)

COORDINATOR_PROMPT = """\
You are taskloom in coordinator mode. You do not do the work yourself: you direct workers —
agents that run in the background, each with its own context window — and you combine what
they find into the answer. Your tools are Agent (start a worker), SendMessage (continue a
worker) and TaskStop (stop one). Every worker runs in the background: you get its id at once,
and a <task-notification> arrives when it ends, with its final report in <result> and its
<usage>. Never wait by polling; end your turn and the notifications will come to you.

Work in four phases:

1. Research. Start workers (or the read-only Explore agent) to investigate in parallel: find
   the code involved, how it works, what tests cover it. Launch independent workers in ONE
   message so that they run at the same time.
2. Synthesis. Read the results yourself and decide what must be done. Write each next step as
   a specification a worker can carry out on its own: workers never see your conversation or
   each other's, so a spec names the files, the functions, the exact change and how to check
   it. "Based on the research, fix it" is not a spec.
3. Implementation. Hand the specs to workers. Changes to different files may run in parallel;
   two workers never edit the same file at the same time (their edits would collide) — run
   those one after the other.
4. Verification. Have a worker that did not write the change test it: run the tests, try the
   behaviour, report what it saw. A failure sends you back to implementation with a precise
   spec.

Continue or start afresh:
- SendMessage to a worker (by its id or name) continues it with its context intact — use it
  when the follow-up builds on what that worker already read or did, such as fixing what it
  just wrote. A finished worker is resumed in the background with your message; a running
  one sees it at its next step.
- Start a fresh worker when the next step is a new direction, or when the old context would
  only mislead it (verification by the author of the change, for one).
- TaskStop a worker whose work is no longer needed, as soon as you know it; everything it
  started stops with it.

Tell the user what you are doing in a line or two as you go, and finish with a summary of the
outcome: what changed, how it was verified, and what is left."""


def coordinator_catalog(catalog: AgentCatalog) -> AgentCatalog:
    """The agent types a coordinator may spawn: ``worker``, the read-only built-ins, custom.

    ``general-purpose`` gives way to ``worker``; a custom agent named ``worker`` wins over
    ours, as custom agents do over built-ins.
    """
    active: dict[str, AgentDefinition] = {}
    if WORKER_TYPE not in catalog.active:
        active[WORKER_TYPE] = WORKER
    for name, definition in catalog.active.items():
        if definition.source == "built-in" and name == "general-purpose":
            continue
        active[name] = definition
    return dataclasses.replace(catalog, active=active)


def worker_context(
    tool_names: Iterable[str], mcp_servers: Iterable[str], skills: Iterable[str] = ()
) -> str:
    """What the coordinator is told of its workers' means: tools, MCP servers and skills.

    Skills are listed when the workers have the Skill tool to load them with.
    """
    names = list(dict.fromkeys(tool_names))
    lines = [f"Workers have access to: {', '.join(names) if names else '(no tools)'}"]
    servers = sorted(mcp_servers)
    if servers:
        lines.append(f"MCP servers available to workers: {', '.join(servers)}")
    loadable = sorted(skills) if "Skill" in names else []
    if loadable:
        lines.append(
            f"Skills available to workers (the Skill tool loads them): {', '.join(loadable)}"
        )
    return "\n".join(lines)


def coordinator_system_prompt(
    builder: AgentBuilder, cwd: Path, mcp_servers: Iterable[str], append: str | None = None
) -> str:
    """The coordinator's system prompt: the four phases, the environment, the workers' means.

    The worker tools listed are those a ``worker`` would be given now (its definition, the
    session's MCP tools, the background allow-list).
    """
    worker = builder.config(
        WORKER_TYPE, builder.definition(WORKER_TYPE), description="", cwd=cwd, is_async=True
    )
    skills = [c.name for c in builder.skills.for_model()] if builder.skills is not None else []
    context = worker_context((t.name for t in worker.tools), mcp_servers, skills)
    told = builder.instructions.text()  # the project's instructions, as the main thread's
    parts = (COORDINATOR_PROMPT, environment(cwd), context, told, append)
    return "\n\n".join(p for p in parts if p)
