"""The Landlock sandbox behind the read-only text judge: what the judge lets through cannot write.

Real shells under a real ruleset; only the model is scripted. Skipped where the kernel has no
Landlock (the commands then run under the text judge alone).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import taskloom
from helpers import TIME_FACTOR
from taskloom.messages import ToolResultBlock
from taskloom.process import landlock
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import run_shell
from taskloom.testing import ScriptedModel, ToolCall, Turn

needs_landlock = pytest.mark.skipif(
    landlock.abi_version() == 0, reason="this kernel has no Landlock (ENOSYS or EOPNOTSUPP)"
)


def _repo(path: Path) -> None:
    """A git repository with one commit, and the files the commands below read."""
    (path / "victim").write_text("keep me\n")
    (path / "a").write_text("line one\n")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    for argv in (["git", "init", "-q"], ["git", "add", "a"], ["git", "commit", "-qm", "first"]):
        subprocess.run(argv, cwd=path, env=env, check=True, capture_output=True)


def _results(requests: list[Any], first: int = 1) -> list[ToolResultBlock]:
    return [
        block
        for r in requests[first:]
        for block in r.messages[-1].content
        if isinstance(block, ToolResultBlock)
    ]


async def _run_verifier(tmp_path: Path, commands: list[str]) -> list[ToolResultBlock]:
    """Run ``commands`` as the verification agent's Bash calls; their results, in order."""
    spawn = {"description": "Verify", "prompt": "Try", "subagent_type": "verification"}
    calls = [Turn(tool_calls=[ToolCall("Bash", {"command": c})]) for c in commands]
    model = ScriptedModel(
        [Turn(tool_calls=[ToolCall("Agent", spawn)]), "Started.", "Got its verdict."],
        subagents={"verification": [*calls, "VERDICT: FAIL"]},
    )
    async with taskloom.Harness(model=model, cwd=tmp_path, skip_permissions=True) as h:
        [e async for e in h.run("verify")]
        await h.end()
    results = _results(model.agent_requests)
    assert len(results) == len(commands)
    return results


@needs_landlock
async def test_what_the_text_judge_lets_through_still_cannot_write(tmp_path: Path) -> None:
    _repo(tmp_path)
    results = await _run_verifier(
        tmp_path,
        [
            """awk 'BEGIN{system("rm victim")}'""",
            "sed -n 'w out' a",
            # Under /tmp, so the text judge counts it as scratch; the sandbox does not.
            f"echo changed > {tmp_path / 'victim'}",
            "cat victim && ls && git log --oneline",
        ],
    )
    assert (tmp_path / "victim").read_text() == "keep me\n"
    assert not (tmp_path / "out").exists()
    texts = [str(r.content) for r in results]
    assert "Permission denied" in texts[0] and "rm" in texts[0]
    assert results[1].is_error and "out" in texts[1]
    assert results[2].is_error and "Permission denied" in texts[2]
    assert not results[3].is_error
    assert "keep me" in texts[3] and "victim" in texts[3] and "first" in texts[3]


@needs_landlock
async def test_the_scratch_tmpdir_is_writable_kept_between_calls_and_removed_at_the_end(
    tmp_path: Path,
) -> None:
    _repo(tmp_path)
    results = await _run_verifier(tmp_path, ["mktemp", 'echo "dir=$TMPDIR" && ls "$TMPDIR"'])
    made = Path(str(results[0].content).strip())
    assert not results[0].is_error and made.name.startswith("tmp")
    scratch = made.parent
    assert scratch.name.startswith("taskloom-scratch-")
    # The next command of the same agent has the same TMPDIR, with the file still in it.
    assert f"dir={scratch}" in str(results[1].content) and made.name in str(results[1].content)
    assert not scratch.exists()  # removed when the agent ended


@needs_landlock
async def test_the_main_threads_bash_is_not_sandboxed(tmp_path: Path) -> None:
    _repo(tmp_path)
    model = ScriptedModel(
        [Turn(tool_calls=[ToolCall("Bash", {"command": "sed -n 'w out' a && cat out"})]), "ok"]
    )
    async with taskloom.Harness(model=model, cwd=tmp_path, skip_permissions=True) as h:
        [e async for e in h.run("write")]
        await h.end()
    [result] = _results(model.requests)
    assert not result.is_error and "line one" in str(result.content)
    assert (tmp_path / "out").read_text() == "line one\n"


@needs_landlock
async def test_a_sandboxed_shell_keeps_its_cd_and_writes_nothing_but_its_scratch(
    tmp_path: Path,
) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    async with TaskRuntime() as rt:
        out = await run_shell(
            rt,
            'cd sub && touch here; echo x > /dev/null && echo ok > "$TMPDIR/s" && cat "$TMPDIR/s"',
            owner="agent-1",
            cwd=tmp_path,
            track_cwd=True,
            sandboxed=True,
        )
        text = Path(out.output_file).read_text()
        assert out.cwd == str(sub.resolve())  # the trap could write its directory file
        assert "Permission denied" in text and text.rstrip().endswith("ok")
        assert not (sub / "here").exists()
        scratch = rt.scratch.of("agent-1")
        assert (scratch / "s").read_text() == "ok\n"
        await rt.close_owner("agent-1")
        assert not scratch.exists()
        # Killed before its trap ran: no directory is reported, not a vanished one.
        out = await run_shell(
            rt, "sleep 30", owner="agent-2", cwd=tmp_path, track_cwd=True, sandboxed=True,
            timeout=0.2,
        )  # fmt: skip
        assert out.timed_out and out.cwd is None


@needs_landlock
def test_the_handled_rights_follow_the_kernels_abi(tmp_path: Path) -> None:
    target = tmp_path / "t"
    # truncate(2) on a path: no open for writing, only the TRUNCATE right (ABI 3) applies.
    argv = [sys.executable, "-c", "import os, sys; os.truncate(sys.argv[1], 0)", str(target)]

    def truncated(abi: int) -> bool:
        target.write_text("data")

        def start() -> subprocess.Popen[bytes]:
            return subprocess.Popen(argv, stderr=subprocess.DEVNULL)

        landlock.spawn_sandboxed(landlock.Sandbox(), start, abi=abi).wait()
        return target.stat().st_size == 0

    # ABI 2 knows no TRUNCATE right: truncate(2) is not handled, so it is allowed.
    assert truncated(2)
    if landlock.abi_version() >= 3:
        assert not truncated(landlock.abi_version())


@needs_landlock
def test_a_sandboxed_command_signals_nothing_outside_and_writes_no_terminal(
    tmp_path: Path,
) -> None:
    if landlock.abi_version() < 6:
        pytest.skip("signals are scoped from Landlock ABI 6")
    outside = subprocess.Popen(["sleep", "4319"])
    try:
        script = f"kill -0 {outside.pid}; echo kill=$?; : > /dev/ptmx; echo ptmx=$?"

        def start() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                ["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )

        proc = landlock.spawn_sandboxed(landlock.Sandbox(), start)
        said, _ = proc.communicate(timeout=30 * TIME_FACTOR)
        assert said.decode().split() == ["kill=1", "ptmx=1"]
        assert outside.poll() is None  # and what is not sandboxed can still signal it
    finally:
        outside.kill()
        outside.wait()


def test_the_judge_refuses_programs_that_have_another_process_act() -> None:
    from taskloom.permissions.read_only import _line_writes

    for line in [
        "tmux run-shell 'rm victim'",
        "tmux -S /tmp/s send-keys -t x 'rm victim' Enter",
        "kill -9 1",
        "pkill -f taskloom",
        "ssh localhost touch x",
        "setfattr -n user.x -v 1 a",
        "timeout 5 docker run x",
    ]:
        why = _line_writes(line, ("/tmp",))
        assert why is not None and "another process act" in why, line
    assert _line_writes("tmux -V", ("/tmp",)) is None


def test_an_unavailable_sandbox_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    landlock.warn_unavailable.cache_clear()
    with caplog.at_level(logging.WARNING, logger="taskloom.process.landlock"):
        landlock.warn_unavailable()
        landlock.warn_unavailable()
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "not sandboxed" in caplog.records[0].getMessage()


def test_scratch_directories_of_a_killed_process_are_swept(tmp_path: Path) -> None:
    from taskloom.tasks.scratch import sweep_orphans

    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names no process now
    orphan = tmp_path / f"taskloom-scratch-{gone.pid}-agent-x1"
    (orphan / "sub").mkdir(parents=True)
    (orphan / "sub" / "f").write_text("left")
    mine = tmp_path / f"taskloom-scratch-{os.getpid()}-agent-x2"
    mine.mkdir()
    other = tmp_path / "taskloom-scratch-notapid"
    other.mkdir()
    assert sweep_orphans(tmp_path) == [orphan]
    assert not orphan.exists() and mine.is_dir() and other.is_dir()
