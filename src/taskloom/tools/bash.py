"""The Bash tool: run a command in the foreground (killed at its timeout) or the background.

What the model gets follows the CLI that inspired us: a foreground command is killed at its
timeout (``Command timed out after Ns``, exit code 143, or 137 when it outlived SIGTERM),
its working directory holds for the agent's next calls, output over the inline limit is
saved under the session's directory and shown as a preview with its path, ``rg`` works, and
exit code 1 of ``grep``, ``diff``, ``test``… with nothing on stderr is an answer, not an error.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from taskloom.process.shell_env import shell_env
from taskloom.settings import ensure_private_dir, tasks_dir, whole_number
from taskloom.tasks.ids import random_hex
from taskloom.tasks.output import human_size, read_delta
from taskloom.tasks.types import TaskStatus
from taskloom.tools import responses
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error
from taskloom.tools.overflow import results_dir, save_file, save_text

if TYPE_CHECKING:
    from taskloom.tasks.shell import ShellOutcome
    from taskloom.tools.backends import CommandEnd, CommandRunner
    from taskloom.tools.inputs.bash import BashInput

#: Default inline limit (characters) of a command's output: more is saved to a file.
DEFAULT_MAX_OUTPUT_CHARS = 30_000
#: Highest inline limit a setting may ask for (as the CLI that inspired us caps it).
MAX_OUTPUT_CHARS_CAP = 150_000
#: The setting and the environment variable (which wins) that set the inline limit.
MAX_OUTPUT_SETTING = "bashMaxOutputChars"
MAX_OUTPUT_ENV = "BASH_MAX_OUTPUT_LENGTH"
#: The setting that moves a command past its timeout to the background instead of killing it.
AUTO_BACKGROUND_SETTING = "autoBackgroundShells"
#: Output kept of a command run in an editor's terminal (its start is dropped past it): what
#: is over the inline limit is saved to a file, as a local command's output file is.
TERMINAL_OUTPUT_BYTES = 4 * 1024 * 1024

DESCRIPTION = """Run a shell command (bash) and return its output.

- Working directory: it persists between your calls. After `cd sub` the next command runs in
  `sub`; each agent has its own. Environment variables, aliases and shell functions do not
  persist: every call is a new shell. A `cd` out of the directories you may use (the project,
  or your worktree, and the directories added to it) is undone: the next command starts back
  at the start directory, and the result says so. Prefer absolute paths over `cd`.
- `timeout` is in milliseconds: default 120000 (2 minutes); more than 600000 (10 minutes) is
  taken as 600000. A command still running at its timeout is killed, and the result is an
  error with the output so far.
- Set `run_in_background: true` for long commands (builds, test suites, servers) so you can
  keep working; you will be notified when it finishes. Read its output with TaskOutput and
  stop it with TaskStop. Do not poll with sleep.
- stdout and stderr are merged. Output over 30000 characters is saved to a file: you get its
  first 2 KB and the file's path (read on with Read using offset/limit, or Grep the file).
- `rg` (ripgrep) is available. Exit code 1 of grep, rg, diff or test with nothing on
  stderr is an answer (no match, files differ, condition false), not an error.
- Commands cannot be answered interactively: use non-interactive flags (e.g. --yes).
- Give a short `description` (5-10 words) of what the command does."""


#: :class:`BashInput`'s closed schema written out, so that offering the tool does not build
#: the model (it is built when a call is first validated); tests check it is the one
#: generated, byte for byte.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`BashTool`.",
    "properties": {
        "command": {"description": "The command to run.", "type": "string"},
        "timeout": {
            "minimum": 1,
            "type": "integer",
            "description": (
                "Timeout in milliseconds (default 120000; above 600000 counts as 600000)."
            ),
        },
        "description": {"type": "string", "description": "What the command does."},
        "run_in_background": {
            "type": "boolean",
            "description": "Run in the background and return at once.",
        },
    },
    "required": ["command"],
    "type": "object",
}


def max_output_chars(settings: dict[str, Any]) -> int | str:
    """The inline limit: ``BASH_MAX_OUTPUT_LENGTH``, else ``bashMaxOutputChars``, else 30,000.

    Returns:
        The limit (at most :data:`MAX_OUTPUT_CHARS_CAP`), or the one-line error naming a bad
        value and where it came from.
    """
    value = whole_number(settings, MAX_OUTPUT_ENV, MAX_OUTPUT_SETTING, unit="characters")
    if value is None:
        return DEFAULT_MAX_OUTPUT_CHARS
    if isinstance(value, str):
        return value
    return min(value, MAX_OUTPUT_CHARS_CAP)


class BashTool(Tool["BashInput"]):
    """Shell commands through the task runtime."""

    name = "Bash"
    description = DESCRIPTION
    input_model = "taskloom.tools.inputs.bash:BashInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "execute"
    #: Bash bounds its own results (:func:`max_output_chars`), reading its output file.
    max_result_chars: ClassVar[int | None] = None

    def permission_target(self, params: BashInput, ctx: ToolContext) -> str | None:
        """Rules match the command line."""
        return params.command

    async def call(self, params: BashInput, ctx: ToolContext) -> ToolResult:
        """Run the command through :func:`taskloom.tasks.shell.run_shell`."""
        # The shell task's machinery (handoff, input watch, kill) loads with the first command.
        from taskloom.tasks.shell import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, run_shell

        limit = max_output_chars(ctx.settings)
        if isinstance(limit, str):
            return tool_error(f"Bash cannot run: {limit}")
        asked = params.timeout / 1000 if params.timeout else DEFAULT_TIMEOUT_S
        timeout_s = min(asked, MAX_TIMEOUT_S)  # capped, not refused: models ask for more
        background = bool(params.run_in_background)
        workdir = ctx.workdir
        notes = [n for n in [workdir.take_note() if workdir else None] if n]
        # A read-only agent's commands run here, in the sandbox: never in an editor's terminal.
        if ctx.commands is not None and not background and not ctx.sandboxed:
            return await _in_terminal(ctx.commands, params, ctx, timeout_s, limit, notes)
        outcome = await run_shell(
            ctx.runtime,
            params.command,
            owner=ctx.owner,
            description=params.description or params.command,
            tool_use_id=ctx.tool_use_id,
            timeout=timeout_s,
            run_in_background=background,
            auto_background=bool(ctx.settings.get(AUTO_BACKGROUND_SETTING, False)),
            cwd=ctx.cwd,
            env=shell_env(home=ctx.runtime.home),
            agent_id=ctx.agent_id,
            track_cwd=workdir is not None and not background,
            sandboxed=ctx.sandboxed,
        )
        data: dict[str, Any] = {
            "task_id": outcome.task_id,
            "status": outcome.status.value,
            "exit_code": outcome.exit_code,
            "output_file": outcome.output_file,
            "backgrounded": outcome.backgrounded,
        }
        if outcome.backgrounded:
            waited = int(timeout_s * 1000) if outcome.timed_out else None
            response = responses.bash(
                "", background_task_id=outcome.task_id, timed_out_after_ms=waited
            )
            text = _background_text(outcome, timeout_s, notes)
            return ToolResult(text, data=data, response=response)
        if workdir is not None:
            moved = workdir.moved(outcome.cwd)
            notes += [moved] if moved else []
        output = await self._output(outcome.output_file, limit, ctx)
        return _result(params.command, outcome, output, timeout_s, notes, data)

    async def _output(self, path: str, limit: int, ctx: ToolContext) -> str:
        """The command's output for the model: all of it, or a preview of the file it is saved to.

        At most 4 bytes a character past the limit are read: never the whole of a huge output.
        """
        data, _ = read_delta(path, 0, 4 * (limit + 1))
        text = data.decode("utf-8", "replace")
        if len(text) <= limit:  # 4 (limit + 1) bytes are more than limit characters
            return text.rstrip("\n")
        runtime = ctx.runtime
        directory = results_dir(runtime.session_id, runtime.home)
        try:
            return await asyncio.to_thread(save_file, path, directory, ctx.tool_use_id)
        except OSError as exc:
            return (
                f"{text[:limit]}\n\n[Output too large and it could not be saved "
                f"({exc.strerror or exc}): cut at {limit:,} characters; all of it is in {path}]"
            )


async def _in_terminal(
    runner: CommandRunner,
    params: BashInput,
    ctx: ToolContext,
    timeout_s: float,
    limit: int,
    notes: list[str],
) -> ToolResult:
    """Run a foreground command through ``runner`` (an editor's terminal); the same result.

    Its ``cd`` holds as a local command's does: the shell writes the directory it ends in to
    a file of ours, read when it exits. A terminal on another machine cannot write it here;
    then the working directory stays where it was.
    """
    import shlex

    from taskloom.tasks.shell import ShellOutcome
    from taskloom.tools._exit_meaning import stderr_shown  # read once a command ends
    from taskloom.tools.backends import CommandRequest  # only an editor's terminal runs it

    runtime = ctx.runtime
    workdir = ctx.workdir
    script, cwd_file = params.command, None
    if workdir is not None:
        directory = ensure_private_dir(tasks_dir(runtime.session_id, runtime.home))
        cwd_file = directory / f"terminal-{random_hex(16)}.cwd"
        record = f"{{ pwd -P >| {shlex.quote(str(cwd_file))}; }} 2>/dev/null"
        # On the command's line, so the line numbers its errors name stay its own.
        script = f"trap {shlex.quote(record)} EXIT; {params.command}"
    request = CommandRequest(
        script=script,
        command=params.command,
        cwd=ctx.cwd,
        env=shell_env(home=runtime.home),
        timeout=timeout_s,
        tool_use_id=ctx.tool_use_id,
        output_limit=TERMINAL_OUTPUT_BYTES,
    )
    try:
        end = await runner.run(request)
        final_cwd = None if cwd_file is None or end.timed_out else _final_cwd(cwd_file)
    except OSError as exc:
        return tool_error(f"Bash cannot run: {exc.strerror or exc}")
    finally:
        if cwd_file is not None:
            with contextlib.suppress(OSError):
                cwd_file.unlink()
    if workdir is not None:
        moved = workdir.moved(final_cwd)
        notes += [moved] if moved else []
    output = await _terminal_output(end, limit, ctx)
    if end.timed_out:
        status = TaskStatus.KILLED
    else:
        status = TaskStatus.COMPLETED if end.exit_code == 0 else TaskStatus.FAILED
    outcome = ShellOutcome(
        task_id="",
        status=status,
        exit_code=end.exit_code,
        output_file="",
        backgrounded=False,
        timed_out=end.timed_out,
        stderr_written=stderr_shown(params.command, end.output),
    )
    data: dict[str, Any] = {
        "status": status.value,
        "exit_code": end.exit_code,
        "backgrounded": False,
        "terminal_id": end.terminal_id,  # the editor keeps showing it in the call
    }
    return _result(params.command, outcome, output, timeout_s, notes, data)


def _final_cwd(path: Path) -> str | None:
    """The directory a terminal's shell wrote it ended in; None when it wrote nothing here."""
    try:
        return path.read_text(encoding="utf-8", errors="surrogateescape").removesuffix("\n")
    except OSError:
        return None


async def _terminal_output(end: CommandEnd, limit: int, ctx: ToolContext) -> str:
    """A terminal command's output for the model, bounded as a local command's is."""
    text = end.output
    if end.cut:
        text = f"[output truncated: only its last {human_size(TERMINAL_OUTPUT_BYTES)} kept]\n{text}"
    if len(text) <= limit:
        return text.rstrip("\n")
    runtime = ctx.runtime
    directory = results_dir(runtime.session_id, runtime.home)
    try:
        return await asyncio.to_thread(save_text, text, directory, ctx.tool_use_id)
    except OSError as exc:
        return (
            f"{text[:limit]}\n\n[Output too large and it could not be saved "
            f"({exc.strerror or exc}): cut at {limit:,} characters]"
        )


def _background_text(outcome: ShellOutcome, timeout_s: float, notes: list[str]) -> str:
    where = f"Output is being written to: {outcome.output_file}"
    if outcome.timed_out:
        text = (
            f"Command reached its {timeout_s:g}s timeout and goes on in the background with "
            f"ID: {outcome.task_id}. {where}. You will be notified when it finishes; read its "
            "output with TaskOutput or stop it with TaskStop."
        )
    else:
        text = (
            f"Command running in background with ID: {outcome.task_id}. {where}. "
            "You will be notified when it finishes."
        )
    return "\n".join([text, *notes])


def _result(
    command: str,
    outcome: ShellOutcome,
    output: str,
    timeout_s: float,
    notes: list[str],
    data: dict[str, Any],
) -> ToolResult:
    """A foreground command's result: its output, then what its end means, then notes."""
    from taskloom.tools._exit_meaning import exit_meaning  # read once a command ends

    if outcome.timed_out:
        tail = [f"Command timed out after {timeout_s:g}s", f"Exit code {outcome.exit_code}"]
        error = True
    elif outcome.status == TaskStatus.COMPLETED:
        tail, error = ([] if output else ["(no output)"]), False
    else:
        meaning = exit_meaning(command, outcome.exit_code, outcome.stderr_written)
        error = meaning is None
        tail = [meaning] if meaning else [f"Exit code {outcome.exit_code}"]
        if meaning is not None:
            data["returnCodeInterpretation"] = meaning
    text = "\n".join(part for part in [output, *tail, *notes] if part)
    response = responses.bash(
        output,
        interrupted=outcome.timed_out or outcome.status == TaskStatus.KILLED,
        return_code_interpretation=data.get("returnCodeInterpretation"),
    )
    return ToolResult(text, is_error=error, data=data, response=response)
