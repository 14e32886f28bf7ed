"""Transcripts: one JSON line per message, enough to resume a session, in Claude Code's shape.

Where (see :func:`transcript_path`): a session's transcript is Claude Code's,
``$CLAUDE_CONFIG_DIR/projects/<project key>/<session id>.jsonl`` (``~/.claude`` without the
variable; the key is the working directory with every character but letters and digits made
``-``, see :func:`project_key`), so that the Agent SDKs' ``listSessions`` /
``getSessionMessages`` and other Claude Code tools find it; its subagents' sidechains are
``<project key>/<session id>/subagents/agent-<agent id>.jsonl``. With ``TASKLOOM_TRANSCRIPTS=
taskloom`` new sessions keep them in taskloom's state instead,
``$TASKLOOM_HOME/sessions/<id>/transcript.jsonl`` and ``.../subagents/``. Either way there is
one transcript per session: a recorded one is found (and continued) wherever it is.

Each line: ``{"parentUuid", "isSidechain", "type": "user"|"assistant", "message": {...},
"uuid", "timestamp", "sessionId", "cwd", "version", "userType"}`` (a sidechain's also
``"agentId"``), plus ``"taskloomOrigin"`` for user messages (``prompt``, ``tool_results``,
``notifications``, ``messages``, ``compact`` for a compaction's summary) and ``"entrypoint"``
when ``CLAUDE_CODE_ENTRYPOINT`` names the program that started taskloom (the SDKs set
``sdk-ts`` / ``sdk-py``). A compaction writes Claude Code's ``system/compact_boundary`` line
and then the conversation as it goes on (see :meth:`TranscriptWriter.boundary`). ``parentUuid``
chains every message to the one before it, across resumes. Lines are appended and flushed one
by one, so a crash loses at most the message being written; a torn last line is ignored on
load, and so are the lines that are not messages (titles, tags and the other records Claude
Code's tools append).
"""

from __future__ import annotations

import json
import logging
import os
import re
import unicodedata
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from taskloom._version import __version__
from taskloom.errors import UsageError
from taskloom.messages import Message, TextBlock
from taskloom.settings import claude_config_dir, ensure_private_dir, refuse_symlinks, session_dir
from taskloom.tasks.ids import new_uuid
from taskloom.untrusted import clean_text

log = logging.getLogger(__name__)

#: Where new sessions keep their transcripts: ``claude`` (Claude Code's project directories,
#: the default) or ``taskloom`` (taskloom's state directory only).
TRANSCRIPTS_ENV = "TASKLOOM_TRANSCRIPTS"
#: The name of a transcript kept in taskloom's state directory.
OWN_NAME = "transcript.jsonl"
#: The longest project key Claude Code uses as it is; a longer one is cut and hashed.
MAX_KEY_LENGTH = 200
#: The message records of a transcript (the other lines are titles, tags, bookkeeping).
MESSAGE_TYPES = ("user", "assistant")
#: The most of a prompt a ``last-prompt`` record keeps (the SDKs show it as a summary).
LAST_PROMPT_CHARS = 200
#: How the texts the engine adds to a conversation start: none is a prompt of the user's.
NOT_PROMPTS = ("[Request interrupted", "<task-notification>", "<system-reminder>")
#: How much of a transcript's end is read to find the message a new one follows.
TAIL_BYTES = 256 * 1024
#: Names the program that started taskloom (the SDKs set it). Kept in each line as Claude
#: Code does: the SDKs' ``listSessions(includeProgrammatic: false)`` leaves such sessions out.
ENTRYPOINT_ENV = "CLAUDE_CODE_ENTRYPOINT"


def project_key(cwd: str | Path) -> str:
    """The directory name Claude Code gives the project of ``cwd`` under ``projects/``.

    The real path (NFC), every character but ASCII letters and digits replaced by ``-``; a
    key longer than :data:`MAX_KEY_LENGTH` is cut there and given the path's hash (the
    SDKs read such a directory by its prefix).
    """
    path = unicodedata.normalize("NFC", os.path.realpath(cwd))
    key = re.sub(r"[^a-zA-Z0-9]", "-", path)
    if len(key) <= MAX_KEY_LENGTH:
        return key
    return f"{key[:MAX_KEY_LENGTH]}-{_base36(_string_hash(path))}"


def _string_hash(text: str) -> int:
    """The 32-bit string hash the SDKs name long project directories by (``h*31 + c``)."""
    value = 0
    for char in text:
        value = (value * 31 + ord(char)) & 0xFFFFFFFF
    return abs(value - 0x100000000 if value >= 0x80000000 else value)


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
        if not number:
            return out


def claude_transcripts() -> bool:
    """Whether new sessions keep their transcripts where Claude Code does (:data:`TRANSCRIPTS_ENV`).

    Raises:
        UsageError: The variable holds something other than ``claude`` or ``taskloom``.
    """
    value = os.environ.get(TRANSCRIPTS_ENV, "").strip().lower()
    if value in ("", "claude"):
        return True
    if value == "taskloom":
        return False
    raise UsageError(
        f"{TRANSCRIPTS_ENV}={os.environ[TRANSCRIPTS_ENV]!r}: expected 'claude' (Claude Code's "
        "project directories, the default) or 'taskloom' (taskloom's state directory)"
    )


def transcript_path(
    session_id: str,
    home: Path | None = None,
    cwd: str | Path | None = None,
    *,
    search: bool = False,
) -> Path:
    """Where the transcript of ``session_id`` is, or will be (see the module docstring).

    A recorded one is looked for in the project directory of ``cwd`` and in taskloom's
    state; only with ``search`` (a session named to be continued: ``--resume``) in every
    project directory too, and the place found there is remembered for the process, so a
    session started elsewhere is continued in its file without another search. A session
    with none gets the place :func:`claude_transcripts` chooses (taskloom's state, with a
    warning, when Claude Code's directory cannot be created). Without ``search`` no
    directory is listed: a new session's place is known from its id and ``cwd``.

    Args:
        session_id: The session.
        home: taskloom's state directory (default ``$TASKLOOM_HOME``).
        cwd: The session's working directory (default: the process's).
        search: Look in every project directory when it is in neither place.

    Raises:
        UsageError: :data:`TRANSCRIPTS_ENV` holds a value it does not take.
    """
    claude = claude_transcripts()  # a wrong value is refused whether or not it matters here
    name = f"{session_id}.jsonl"
    projects = claude_config_dir() / "projects"
    here = projects / project_key(cwd if cwd is not None else os.getcwd()) / name
    own = session_dir(session_id, home) / OWN_NAME
    for candidate in (here, own, _FOUND.get((projects, session_id))):
        if candidate is not None and candidate.is_file():
            return candidate
    if search:
        elsewhere = _search(projects, session_id)
        if elsewhere is not None:
            _FOUND[(projects, session_id)] = elsewhere
            return elsewhere
    if claude and not _creatable(here.parent):
        # A home that cannot be written (a read-only one, a sandbox's) must not stop a run
        # that taskloom's own state directory would record.
        if here.parent not in _WARNED:
            _WARNED.add(here.parent)
            log.warning("%s cannot be created: transcripts are kept in %s", here.parent, own)
        return own
    return here if claude else own


#: Transcripts a search found outside their session's project directory, by the
#: ``projects`` directory searched and the session id: the session goes on there.
_FOUND: dict[tuple[Path, str], Path] = {}


def _search(projects: Path, session_id: str) -> Path | None:
    """The transcript of ``session_id`` in any project directory (the first by name), if any."""
    if "/" in session_id or session_id in ("", ".", ".."):
        return None
    import glob  # only a resume by id from another project searches

    try:
        found = projects.glob(f"*/{glob.escape(session_id)}.jsonl")  # an id is no pattern
        elsewhere = sorted(p for p in found if p.is_file())
    except OSError:
        return None
    return elsewhere[0] if elsewhere else None


#: The project directories a warning said could not be created (said once a process).
_WARNED: set[Path] = set()


def _creatable(directory: Path) -> bool:
    """Whether ``directory`` is a writable directory, or could be made one.

    As far as the permissions of its nearest existing ancestor tell.
    """
    probe = directory
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)


def sidechain_dir(transcript: Path) -> Path:
    """The directory of a session's subagent transcripts, next to its own transcript."""
    if transcript.name == OWN_NAME:
        return transcript.parent / "subagents"
    return transcript.with_suffix("") / "subagents"


def sidechain_agent(path: Path) -> str | None:
    """The agent whose sidechain ``path`` is (``subagents/agent-<id>.jsonl``), else None."""
    name = path.name
    if path.parent.name == "subagents" and name.startswith("agent-") and name.endswith(".jsonl"):
        return name[len("agent-") : -len(".jsonl")]
    return None


def private_dir(path: Path) -> Path:
    """Create a transcript's directory (0700) and return it; no symlink below the config dir.

    As in taskloom's state (:func:`~taskloom.settings.ensure_private_dir`), the configuration
    directory itself may be a symlink, but a symlink at ``projects``, a project's or a
    session's directory is refused, never followed.

    Raises:
        OSError: A component is a symlink, or not a directory.
    """
    config = claude_config_dir()
    if path.is_relative_to(config):
        refuse_symlinks(config, path.relative_to(config).parts)
    return ensure_private_dir(path)


def agent_meta_path(sidechain: Path) -> Path:
    """The ``agent-<id>.meta.json`` beside a sidechain: what the SDKs read of its agent."""
    return sidechain.with_name(sidechain.name.removesuffix(".jsonl") + ".meta.json")


def write_agent_meta(sidechain: Path, meta: dict[str, Any]) -> None:
    """Write the metadata of a sidechain's agent beside it, once (a resumed run keeps it).

    ``meta`` holds Claude Code's fields: ``agentType``, ``description``, ``toolUseId`` (the
    Agent call that started it: the SDKs give its messages that ``parent_tool_use_id``) and,
    for an agent started by another, ``parentAgentId``; None values are left out.
    """
    target = agent_meta_path(sidechain)
    private_dir(target.parent)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(_compact({k: v for k, v in meta.items() if v is not None}))


def _compact(record: dict[str, Any]) -> str:
    """One record as a line, compact as Claude Code writes them.

    Its readers scan lines for ``"type":"user"`` and the like without parsing them.
    """
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


class TranscriptWriter:
    """Appends messages to a transcript file."""

    def __init__(self, path: Path, session_id: str, *, cwd: str | Path | None = None) -> None:
        """Open ``path`` for appending (created 0600 in a private directory).

        A file that holds messages already is continued: the first new message's
        ``parentUuid`` is its last message's ``uuid``. A sidechain (:func:`sidechain_agent`)
        marks its lines ``isSidechain`` with the agent's id.

        Args:
            path: The transcript.
            session_id: The session it belongs to.
            cwd: The working directory its lines record (default: the process's).
        """
        self.path = path
        self.session_id = session_id
        private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        # Each line is written whole and at once: a buffered file would only hold a
        # buffer per open transcript (a fan-out keeps thousands open).
        self._fd = fd
        self._last_uuid: str | None = last_message_uuid(path)
        agent = sidechain_agent(path)
        self._fields: dict[str, Any] = {"isSidechain": agent is not None}
        if agent is not None:
            self._fields["agentId"] = agent
        self._tail = {
            "sessionId": session_id,
            "cwd": str(cwd if cwd is not None else os.getcwd()),
            "version": __version__,
            "userType": "external",
        }
        entrypoint = os.environ.get(ENTRYPOINT_ENV, "").strip()
        if entrypoint:
            self._tail["entrypoint"] = entrypoint

    def append(
        self, message: Message, *, origin: str | None = None, compact_summary: bool = False
    ) -> str:
        """Write one message; returns its uuid.

        Args:
            message: The message.
            origin: What a user message is (``prompt``, ``tool_results``, ``notifications``,
                ``messages``), kept as ``taskloomOrigin``: Claude Code's own ``origin`` is
                an object of another meaning (the SDKs read it as the message's provenance).
                A prompt of a main transcript is followed by Claude Code's ``last-prompt``
                record: the SDKs' session lists show it as the session's summary.
            compact_summary: The message is a compaction's summary (``isCompactSummary``,
                as Claude Code marks it).
        """
        extra: dict[str, Any] = {"taskloomOrigin": origin} if origin is not None else {}
        if compact_summary:
            extra["isCompactSummary"] = True
        line_id = new_uuid()
        record = {
            "parentUuid": self._last_uuid,
            **self._fields,
            "type": message.role,
            **extra,
            "message": message.full(),
            "uuid": line_id,
            "timestamp": _now(),
            **self._tail,
        }
        self._write(record)
        self._last_uuid = line_id
        if origin == "prompt" and not self._fields["isSidechain"]:
            self._last_prompt(message, line_id)
        return line_id

    def boundary(self, trigger: str, pre_tokens: int) -> str:
        """Write a compact boundary (Claude Code's ``system/compact_boundary``); its uuid.

        The conversation starts again after it: the boundary has no parent (its
        ``logicalParentUuid`` is the message before it), and :func:`load_messages` reads
        only what follows the last one.
        """
        line_id = new_uuid()
        record = {
            "parentUuid": None,
            "logicalParentUuid": self._last_uuid,
            **self._fields,
            "type": "system",
            "subtype": "compact_boundary",
            "content": "Conversation compacted",
            "isMeta": False,
            "level": "info",
            "compactMetadata": {"trigger": trigger, "preTokens": pre_tokens},
            "uuid": line_id,
            "timestamp": _now(),
            **self._tail,
        }
        self._write(record)
        self._last_uuid = line_id
        return line_id

    def _last_prompt(self, message: Message, line_id: str) -> None:
        # The prompt's own text comes first; what the engine joined to it (notifications,
        # messages, an interrupt's note) follows in blocks of its own.
        texts = [b.text for b in message.content if isinstance(b, TextBlock) and b.text.strip()]
        text = " ".join(texts[0].split()) if texts else ""
        if not text or text.startswith(NOT_PROMPTS):
            return
        if len(text) > LAST_PROMPT_CHARS:
            text = text[:LAST_PROMPT_CHARS].rstrip() + "\u2026"
        self._write(
            {
                "type": "last-prompt",
                "lastPrompt": text,
                "leafUuid": line_id,
                "sessionId": self.session_id,
            }
        )

    def _write(self, record: dict[str, Any]) -> None:
        line, replaced = clean_text(_compact(record))
        if replaced:
            # Model output is cleaned before it gets here; anything else (a prompt from bytes
            # that were not UTF-8) must not make the line unwritable either.
            log.warning("%s: %d unpaired surrogate(s) replaced with U+FFFD", self.path, replaced)
        data = (line + "\n").encode("utf-8")
        while data:
            written = os.write(self._fd, data)
            data = data[written:]

    def close(self) -> None:
        """Close the file."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects of a transcript, with their line numbers (a torn line is skipped)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            log.warning("%s:%d: unreadable transcript line skipped (%s)", path, number, exc)
            continue
        if isinstance(record, dict):
            records.append((number, record))
    return records


def last_message_uuid(path: Path) -> str | None:
    """The ``uuid`` of the last message a transcript holds (None: none, or no file).

    Its tail is read first (a long transcript is not parsed whole to continue it).
    """
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            start = max(0, size - TAIL_BYTES)
            file.seek(start)
            tail = file.read().decode("utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(tail[1:] if start else tail):  # the first may be cut
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(record, dict)
            and record.get("type") in MESSAGE_TYPES
            and isinstance(record.get("uuid"), str)
        ):
            return str(record["uuid"])
    if start:
        for _, record in reversed(_records(path)):
            if record.get("type") in MESSAGE_TYPES and isinstance(record.get("uuid"), str):
                return str(record["uuid"])
    return None


def load_messages(path: Path) -> list[Message]:
    """Read a transcript back into a conversation that a model will accept.

    Only message records count (``type`` user or assistant, not ``isMeta``), after the last
    compact boundary if there is one; the parts of one
    answer that Claude Code writes as lines of their own (one per content block, the same
    ``message.id``) are joined again. A torn last line is dropped. If the session stopped
    between a tool call and its result, the missing results are filled in as errors saying
    the call was interrupted.
    """
    messages: list[Message] = []
    last_id: str | None = None
    for number, record in _records(path):
        if record.get("type") == "system" and record.get("subtype") == "compact_boundary":
            messages, last_id = [], None  # compacted: the conversation starts again here
            continue
        if record.get("type") not in MESSAGE_TYPES or record.get("isMeta"):
            continue
        raw = record.get("message")
        if isinstance(raw, dict) and isinstance(raw.get("content"), str):
            # Claude Code writes a plain prompt as a string.
            raw = {**raw, "content": [{"type": "text", "text": raw["content"]}]}
        try:
            message = Message.from_dict(raw)
        except (ValueError, TypeError) as exc:
            log.warning("%s:%d: unreadable transcript line skipped (%s)", path, number, exc)
            continue
        answer_id = raw.get("id") if isinstance(raw, dict) and message.role == "assistant" else None
        if answer_id and answer_id == last_id and messages and messages[-1].role == "assistant":
            messages[-1] = Message(
                role="assistant", content=[*messages[-1].content, *message.content]
            )
            continue
        last_id = answer_id if isinstance(answer_id, str) else None
        messages.append(message)
    return messages


def copy_transcript(source: Path, target: Path, session_id: str) -> None:
    """Copy ``source``'s messages to ``target`` as the start of session ``session_id`` (a fork).

    Each message gets a new ``uuid`` (its ``parentUuid`` following), the new ``sessionId``
    and ``forkedFrom`` (the session and message it was copied from), as the SDKs' own fork
    does; other records are left behind.
    """
    mapping: dict[str, str] = {}
    lines = []
    for _, record in _records(source):
        old = record.get("uuid")
        if record.get("type") not in MESSAGE_TYPES or not isinstance(old, str):
            continue
        mapping[old] = new_uuid()
        parent = record.get("parentUuid")
        lines.append(
            _compact(
                {
                    **record,
                    "parentUuid": mapping.get(parent) if isinstance(parent, str) else None,
                    "uuid": mapping[old],
                    "sessionId": session_id,
                    "forkedFrom": {"sessionId": record.get("sessionId"), "messageUuid": old},
                }
            )
        )
    private_dir(target.parent)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write("".join(line + "\n" for line in lines))
