"""What a teammate's own process is started with: its :class:`JoinSpec`, in a private file.

The lead writes it to its session directory (``teammates/<task id>.json``, mode 0600) once the
teammate's pane exists, and starts ``taskloom teammate --join FILE`` in that pane. The file,
not the command line, carries it: the prompt and the session's options are nobody else's to
read in a process list, and nothing in them needs quoting for tmux.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import field
from pathlib import Path
from typing import Any

from taskloom._dataclass import dataclass
from taskloom.errors import UsageError
from taskloom.settings import ensure_private_dir, session_dir

#: Schema of the file; a process refuses a file of another one (a taskloom of another age).
VERSION = 1


@dataclass(frozen=True, kw_only=True)
class JoinSpec:
    """One teammate's process: who it is, whose team, and the session options it inherits.

    Attributes:
        session: The lead's session id (the team's mailbox and roster).
        team: The team's name.
        name: The teammate's name in it.
        task_id: Its task id in the lead's session (the owner of what it starts).
        prompt: Its task, from the lead.
        color: The colour its messages are shown in, if any.
        pane_id: Its tmux pane.
        lead_pid: The lead's process: when it ends, the teammate stops.
        lead_start: That process's start (seconds since boot), to know it again.
        home: The lead's ``TASKLOOM_HOME``.
        cwd: Where it works (its own worktree, if it has one).
        agent_type: The agent type it is built from (its tools, prompt, model, mode...).
        confined: Its file tools may not leave ``cwd`` (its worktree).
        model: Its model spec (None: the settings' and the environment's).
        mode: Its permission mode (None: the settings').
        lead_prompts: The lead has someone to ask (a terminal, a program): calls that need
            approval are asked of it; otherwise they are decided here, headless.
        options: The rest of the lead's session options it inherits (``allowed_tools``,
            ``settings``...), by :class:`taskloom.Options` field name.
        process_session: The session id its process runs as (its own tasks are recorded
            under it: the lead sees whether it has work running).
        env: Its process's environment, the lead's: here, not on the pane's command line
            (which tmux shows to whoever asks), since it holds the lead's API keys.
        resume: It goes on from its transcript (its lead's session was resumed).
        keep_transcript: Its conversation is recorded as its lead's sidechain (False: the
            lead's session keeps no transcripts, ``--no-session-persistence``).
    """

    session: str
    team: str
    name: str
    task_id: str
    prompt: str
    color: str | None = None
    pane_id: str = ""
    lead_pid: int = 0
    lead_start: float = 0.0
    home: str = ""
    cwd: str = "."
    agent_type: str = "general-purpose"
    confined: bool = False
    model: str | None = None
    mode: str | None = None
    lead_prompts: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    process_session: str = ""
    env: dict[str, str] = field(default_factory=dict)
    resume: bool = False
    keep_transcript: bool = True

    @property
    def agent_id(self) -> str:
        """Its agent id and mailbox address, ``<name>@<team>``."""
        return f"{self.name}@{self.team}"

    def write(self, home: Path) -> Path:
        """Save it where its process will read it (private); the path.

        Raises:
            OSError: It could not be written.
        """
        folder = session_dir(self.session, home) / "teammates"
        ensure_private_dir(folder)
        path = folder / f"{self.task_id}.json"
        data = {"version": VERSION, **dataclasses.asdict(self)}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out)
        return path

    @classmethod
    def read(cls, path: Path) -> JoinSpec:
        """Read a spec the lead wrote.

        Raises:
            UsageError: The file is missing, unreadable, or not a spec of this version.
        """
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"taskloom teammate: --join {path}: cannot read it ({exc})") from None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise UsageError(
                f"taskloom teammate: --join {path}: not a teammate spec of version {VERSION}"
            )
        data.pop("version")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise UsageError(f"taskloom teammate: --join {path}: unknown fields {unknown}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise UsageError(f"taskloom teammate: --join {path}: {exc}") from None


__all__ = ["VERSION", "JoinSpec"]
