"""Agent memory: a directory per agent type and scope that outlives its runs.

An agent whose definition says ``memory: user | project | local`` has a memory directory, in
Claude Code's places (so the memories its users have are found):

- ``user``: ``agent-memory/<agent-type>/`` in Claude Code's user configuration directory
  (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``), for every project;
- ``project``: ``<project>/.claude/agent-memory/<agent-type>/``, shared through the repository;
- ``local``: ``<project>/.claude/agent-memory-local/<agent-type>/``, this checkout's only.

Its ``MEMORY.md`` (the first :data:`MAX_LINES` lines, :data:`MAX_CHARS` characters at most)
is put in the agent's system prompt at its start, with where the directory is; the agent keeps
it up to date with its file tools (its permission mode applies: the directory is one of its
working directories).
"""

from __future__ import annotations

import logging
from pathlib import Path

from taskloom._dataclass import dataclass
from taskloom.settings import claude_config_dir, find_project_root

log = logging.getLogger(__name__)

#: Lines of MEMORY.md put in the prompt (the rest stays in the file, for the agent to read).
MAX_LINES = 200
#: And at most this many characters of them (a few huge lines must not fill the prompt).
MAX_CHARS = 25_000
_DIRS = {"project": "agent-memory", "local": "agent-memory-local"}


@dataclass(frozen=True)
class AgentMemory:
    """One agent type's memory in one scope.

    Attributes:
        scope: ``user``, ``project`` or ``local``.
        directory: Where it is kept.
        text: What MEMORY.md held at the start (cut at :data:`MAX_LINES` lines).
    """

    scope: str
    directory: Path
    text: str

    @property
    def index(self) -> Path:
        """Its MEMORY.md."""
        return self.directory / "MEMORY.md"

    def prompt(self) -> str:
        """The part of the agent's system prompt that gives it its memory."""
        held = self.text.strip() or "(empty: nothing remembered yet)"
        return (
            f"# Your memory ({self.scope})\n"
            f"You have a persistent memory directory, {self.directory}, kept across your runs"
            f" (shared by every {self.directory.name} agent of this {self.scope} scope). Its"
            f" index, {self.index}, is below. Before you finish, record there what a later run"
            " should know (facts learned, decisions, where things are), briefly; keep the"
            " index short and put details in other files of the directory.\n\n"
            f'<memory file="{self.index}">\n{held}\n</memory>'
        )


def memory_project(cwd: Path) -> Path:
    """The project whose memory an agent working in ``cwd`` keeps: the main checkout.

    A git worktree (its ``.git`` a file naming its git directory, whose ``commondir`` leads to
    the repository's) belongs to the checkout it was made from: a note kept there outlives the
    worktree, and is the one the next run finds wherever it works.
    """
    root = find_project_root(cwd)
    marker = root / ".git"
    try:
        if not marker.is_file():
            return root
        text = marker.read_text(encoding="utf-8", errors="replace").strip()
        if not text.startswith("gitdir:"):
            return root
        gitdir = (root / text.removeprefix("gitdir:").strip()).resolve()
        common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
    except OSError:
        return root  # not a worktree of a repository this can read: the checkout itself
    return common.parent if common.name == ".git" and common.parent.is_dir() else root


def memory_dir(
    scope: str, agent_type: str, project_root: Path, config_dir: Path | None = None
) -> Path:
    """Where ``agent_type``'s memory of ``scope`` is kept.

    Args:
        scope: ``user``, ``project`` or ``local``.
        agent_type: The agent's type (made a safe directory name).
        project_root: The project a ``project`` or ``local`` memory belongs to.
        config_dir: Claude Code's user configuration directory, where a ``user`` memory is
            (default :func:`~taskloom.settings.claude_config_dir`).
    """
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in agent_type)
    if not safe.strip("."):
        safe = "agent"  # "..", ".": never a directory above the memories
    if scope == "user":
        return (config_dir or claude_config_dir()) / "agent-memory" / safe
    return project_root / ".claude" / _DIRS[scope] / safe


def load_memory(
    scope: str | None, agent_type: str, project_root: Path, config_dir: Path | None = None
) -> AgentMemory | None:
    """The memory of an agent whose definition names ``scope`` (None: it has none).

    Its directory is made if need be; a MEMORY.md that cannot be read counts as empty
    (warned), so the agent still starts.
    """
    if scope not in ("user", "project", "local"):
        return None
    directory = memory_dir(scope, agent_type, project_root, config_dir)
    text = ""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        index = directory / "MEMORY.md"
        if index.is_file():
            with index.open(encoding="utf-8", errors="replace") as f:
                head = f.read(MAX_CHARS + 1)
            # Lines as a text file has them (splitlines would also break at \f, \u2028, ...).
            pieces = head.split("\n")
            lines = [p + "\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
            text = "".join(lines[:MAX_LINES])[:MAX_CHARS]
            if len(lines) > MAX_LINES or len(head) > MAX_CHARS:
                text += f"\n[more in {index}]\n"
    except OSError as exc:
        log.warning("agent memory %s: cannot be read: %s", directory, exc)
    return AgentMemory(scope, directory, text)


__all__ = ["MAX_CHARS", "MAX_LINES", "AgentMemory", "load_memory", "memory_dir", "memory_project"]
