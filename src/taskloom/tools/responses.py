"""Each tool's result as Claude Code's hooks see it: PostToolUse's ``tool_response``.

Hooks written for Claude Code read fields of its tools' results (``tool_response.stdout`` of
Bash, ``file.content`` of Read, ``structuredPatch`` of Edit...), not the text the model is shown
nor taskloom's own ``data``. Every shape lives here, one builder a tool (or a variant of one),
so that a tool states the facts and this module owns the names: the tools put what a builder
returns in :attr:`~taskloom.tools.base.ToolResult.response`, and the engine passes it to the
hooks (command hooks in settings and a program's hook callbacks alike). A result without one
(an MCP tool's, say) reaches hooks as its ``data``, or its text.

The shapes follow the reference CLI 2.1.x (``sdk-tools.d.ts`` of the Agent SDK names them
``BashOutput``, ``FileReadOutput``...). Fields only that CLI can fill (git diffs, sandbox
hints) are left out; those listed there as optional are given when taskloom knows them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

# The diff of Edit's and Write's responses, its cost bounded (see that module).

#: Longest earlier content (characters) a Write or Edit response carries and diffs, as the
#: reference's 10 MiB: past it ``originalFile`` is null and ``structuredPatch`` empty ("the
#: previous content was too large to diff", in the reference's words).
MAX_ORIGINAL_CHARS = 10 * 1024 * 1024


def bash(
    stdout: str,
    *,
    interrupted: bool = False,
    background_task_id: str | None = None,
    timed_out_after_ms: int | None = None,
    return_code_interpretation: str | None = None,
    persisted_output_path: str | None = None,
) -> dict[str, Any]:
    """A Bash call: the output (stderr is merged into it, so ``stderr`` is empty).

    Args:
        stdout: What the command printed, as the model is shown it (without the notes).
        interrupted: It was killed before it ended (its timeout).
        background_task_id: It runs on in the background as this task.
        timed_out_after_ms: It went to the background on reaching this timeout.
        return_code_interpretation: What a non-zero exit meant (``grep``: no match).
        persisted_output_path: Where the whole of a too-long output was saved.
    """
    out: dict[str, Any] = {
        "stdout": stdout,
        "stderr": "",
        "interrupted": interrupted,
        "isImage": False,
        "noOutputExpected": False,
    }
    if background_task_id is not None:
        out["backgroundTaskId"] = background_task_id
    if timed_out_after_ms is not None:
        out["timedOutAfterMs"] = timed_out_after_ms
    if return_code_interpretation:
        out["returnCodeInterpretation"] = return_code_interpretation
    if persisted_output_path is not None:
        out["persistedOutputPath"] = persisted_output_path
    return out


def read_text(
    path: str, content: str, *, start_line: int, num_lines: int, total_lines: int
) -> dict[str, Any]:
    """A Read of a text file: the lines shown, as they are in the file (no line numbers)."""
    file = {
        "filePath": path,
        "content": content,
        "numLines": num_lines,
        "startLine": start_line,
        "totalLines": total_lines,
    }
    return {"type": "text", "file": file}


def read_image(
    data: str, media_type: str, *, original_size: int, width: int, height: int
) -> dict[str, Any]:
    """A Read of an image: its base64 ``data`` as sent to the model (never resized here)."""
    dimensions = {
        "originalWidth": width,
        "originalHeight": height,
        "displayWidth": width,
        "displayHeight": height,
    }
    file = {
        "base64": data,
        "type": media_type,
        "originalSize": original_size,
        "dimensions": dimensions,
    }
    return {"type": "image", "file": file}


def structured_patch(before: str, after: str) -> list[dict[str, Any]]:
    """The hunks from ``before`` to ``after`` (see :mod:`taskloom.tools._patch`).

    The diff is loaded at the first edit or write, not when the tools are offered.
    """
    from taskloom.tools import _patch

    return _patch.structured_patch(before, after)


def read_pdf(path: str, *, original_size: int, pages: Sequence[int], text: str) -> dict[str, Any]:
    """A Read of a PDF: taskloom shows its text (the reference sends the file as base64)."""
    file = {"filePath": path, "originalSize": original_size, "pages": list(pages), "text": text}
    return {"type": "pdf", "file": file}


def edit(
    path: str,
    old_string: str,
    new_string: str,
    *,
    original: str | None,
    updated: str,
    replace_all: bool,
) -> dict[str, Any]:
    """An Edit: the replacement asked for, the file before it, and the change as hunks.

    A file over :data:`MAX_ORIGINAL_CHARS` is neither given nor diffed.
    """
    large = original is not None and len(original) > MAX_ORIGINAL_CHARS
    return {
        "filePath": path,
        "oldString": old_string,
        "newString": new_string,
        "originalFile": None if large else original,
        "structuredPatch": [] if large else structured_patch(original or "", updated),
        "userModified": False,
        "replaceAll": replace_all,
    }


def write(path: str, content: str, *, original: str | None, created: bool) -> dict[str, Any]:
    """A Write: ``create`` when there was no file, else ``update``.

    Args:
        path: The file.
        content: What was written.
        original: The file before (None: there was none, or it was over
            :data:`MAX_ORIGINAL_CHARS` and was not read; then no patch is given either).
        created: There was no file before.
    """
    if original is not None and len(original) > MAX_ORIGINAL_CHARS:
        original = None
    return {
        "type": "create" if created else "update",
        "filePath": path,
        "content": content,
        "structuredPatch": [] if original is None else structured_patch(original, content),
        "originalFile": original,
        "userModified": False,
    }


def glob(
    paths: Sequence[str], *, cwd: str, total: int, truncated: bool, duration_ms: int
) -> dict[str, Any]:
    """A Glob: the files found (relative to ``cwd`` when under it), in the order shown."""
    return {
        "filenames": [relative(path, cwd) for path in paths],
        "durationMs": duration_ms,
        "numFiles": len(paths),
        "truncated": truncated,
        "totalMatches": total,
        "countIsComplete": True,
    }


def grep(
    mode: str,
    page: Sequence[str],
    *,
    total: int,
    applied_limit: int | None = None,
    applied_offset: int | None = None,
) -> dict[str, Any]:
    """A Grep: ``page`` holds the entries shown (files, ``path:line:text`` or ``path:count``).

    Args:
        mode: The output mode.
        page: The entries shown.
        total: How many entries there are in all (``head_limit`` and ``offset`` page them).
        applied_limit: The limit that cut the entries, if one did.
        applied_offset: The entries skipped first, if any.
    """
    out: dict[str, Any] = {"mode": mode}
    if mode == "files_with_matches":
        out |= {"filenames": list(page), "numFiles": len(page), "totalFiles": total}
    elif mode == "count":
        matches = sum(int(entry.rsplit(":", 1)[1]) for entry in page)
        out |= {"numFiles": len(page), "filenames": [], "content": "\n".join(page)}
        out["numMatches"] = matches
    else:
        out |= {"numFiles": 0, "filenames": [], "content": "\n".join(page)}
        out |= {"numLines": len(page), "totalLines": total}
    if applied_limit is not None:
        out["appliedLimit"] = applied_limit
    if applied_offset is not None:
        out["appliedOffset"] = applied_offset
    return out


def task_stop(task_id: str, task_type: str, command: str | None) -> dict[str, Any]:
    """A TaskStop that stopped ``task_id`` (``local_bash`` for a command)."""
    what = f" ({command})" if command else ""
    out = {
        "message": f"Successfully stopped task: {task_id}{what}",
        "task_id": task_id,
        "task_type": task_type,
    }
    if command:
        out["command"] = command
    return out


def task_output(
    retrieval: str,
    *,
    task_id: str,
    task_type: str,
    status: str,
    description: str,
    output: str,
    exit_code: int | None,
) -> dict[str, Any]:
    """A TaskOutput: ``retrieval`` is ``success`` (it ended), ``not_ready`` or ``timeout``."""
    task = {
        "task_id": task_id,
        "task_type": task_type,
        "status": status,
        "description": description,
        "output": output,
        "exitCode": exit_code,
    }
    return {"retrieval_status": retrieval, "task": task}


def agent_completed(
    agent_id: str,
    agent_type: str,
    prompt: str,
    text: str,
    *,
    duration_ms: int,
    total_tokens: int,
    tool_uses: int,
    usage: Mapping[str, int] | None,
    model: str | None = None,
    worktree: tuple[str, str | None] | None = None,
) -> dict[str, Any]:
    """An Agent call that waited for the agent: its answer and what it used.

    Args:
        agent_id: The agent's id.
        agent_type: Its type (``general-purpose``...).
        prompt: The task it was given.
        text: Its final answer.
        duration_ms: How long it ran.
        total_tokens: The tokens it used, input and output.
        tool_uses: How many tool calls it made.
        usage: The token counts of its latest response, as the reference gives them
            (:data:`~taskloom.tasks.usage.TOKEN_FIELDS`; None: none reported, all 0).
        model: The model that gave that response (``resolvedModel``), if known.
        worktree: The git worktree it worked in and its branch, when kept.
    """
    out: dict[str, Any] = {
        "status": "completed",
        "prompt": prompt,
        "agentId": agent_id,
        "agentType": agent_type,
        "content": [{"type": "text", "text": text}],
    }
    if model:
        out["resolvedModel"] = model
    out |= {
        "totalDurationMs": duration_ms,
        "totalTokens": total_tokens,
        "totalToolUseCount": tool_uses,
        "usage": _api_usage(usage or {}),
    }
    if worktree is not None:
        out["worktreePath"] = worktree[0]
        if worktree[1]:
            out["worktreeBranch"] = worktree[1]
    return out


def _api_usage(tokens: Mapping[str, int]) -> dict[str, Any]:
    """A response's usage in the API's shape; what taskloom does not know is null."""
    return {
        "input_tokens": tokens.get("input_tokens", 0),
        "output_tokens": tokens.get("output_tokens", 0),
        "cache_creation_input_tokens": tokens.get("cache_creation_input_tokens", 0),
        "cache_read_input_tokens": tokens.get("cache_read_input_tokens", 0),
        # Server tools, the service tier and the cache writes by lifetime are not kept.
        "server_tool_use": None,
        "service_tier": None,
        "cache_creation": None,
    }


def agent_launched(
    agent_id: str,
    description: str,
    prompt: str,
    output_file: str,
    *,
    can_read_output_file: bool = True,
) -> dict[str, Any]:
    """An Agent call that started the agent in the background (SendMessage continues it).

    ``can_read_output_file``: whether the caller has Read or Bash to read the output file.
    """
    return {
        "isAsync": True,
        "status": "async_launched",
        "agentId": agent_id,
        "description": description,
        "prompt": prompt,
        "outputFile": output_file,
        "canReadOutputFile": can_read_output_file,
        "canContinueAgent": True,
    }


def web_fetch(
    *, size: int, code: int, code_text: str, result: str, duration_ms: int, url: str
) -> dict[str, Any]:
    """A WebFetch call: the page's size in bytes, its status, the answer, the URL asked for."""
    return {
        "bytes": size,
        "code": code,
        "codeText": code_text,
        "result": result,
        "durationMs": duration_ms,
        "url": url,
    }


def web_search(
    query: str, results: Sequence[str | Mapping[str, Any]], duration_seconds: float
) -> dict[str, Any]:
    """A WebSearch call: the query, then text and ``{tool_use_id, content: [{title, url}]}``."""
    return {
        "query": query,
        "results": [r if isinstance(r, str) else dict(r) for r in results],
        "durationSeconds": duration_seconds,
    }


def relative(path: str, cwd: str) -> str:
    """``path`` relative to ``cwd`` when it is under it, else as it is."""
    if os.path.isabs(path) and (path == cwd or path.startswith(cwd.rstrip("/") + "/")):
        return os.path.relpath(path, cwd)
    return path
