"""Benchmark: the interactive REPL's start-up, its redraw, and its idle CPU with 50 tasks.

Three figures, each against its target:

- ``first_prompt``: from just before ``python -m taskloom --model scripted:FILE`` is spawned
  under a pseudo-terminal to the moment its live area (the input's ``>`` and the status line
  naming the model) has been drawn; then ``/exit`` is typed and it must exit 0. ``python -c
  pass`` and ``python -c "import prompt_toolkit"`` are spawned the same way in the same run
  (spawn to exit) as floors. The first round only warms caches and is left out.
- ``redraw``: in this process, the REPL's prompt_toolkit application
  (:func:`taskloom.repl.screen.build_application`) over a stand-in for the REPL holding a
  real task panel with 50 running tasks (shells with output files, whose last line each row
  shows, and agents), a real transcript view with a line being streamed and a real
  permission question, drawn to ``/dev/null`` at 80x160. One redraw is what the REPL does
  each second while tasks run: a second later, every row's elapsed time has changed. The
  same with no task is the floor; ``repaint`` is a redraw from scratch, as after lines were
  printed into the scrollback.
- ``idle_cpu``: the real REPL under a pseudo-terminal, whose scripted first turn starts 50
  background ``sleep 60`` commands and then answers; once the 50 rows are drawn, its CPU time
  (user + system) over 5 s of wall time. Then ``/exit``: it must exit 0 and leave no
  ``sleep`` behind (every child carries a mark in its environment, by which leftovers are
  found and killed).

The terminal is emulated only as far as the REPL needs: the pty has a size, and cursor
position requests are answered (prompt_toolkit asks on start, as every real terminal answers).

Bytecode: the children get a private ``PYTHONPYCACHEPREFIX`` (and ``PYTHONDONTWRITEBYTECODE``
removed), as an installed taskloom has its ``.pyc`` files; ``--no-bytecode-cache`` measures
with whatever the environment says instead.

Targets: first prompt <= 0.4 s, redraw with 50 tasks <= 5 ms, idle CPU with 50 tasks < 2 %.
Quick run: ``.venv/bin/python bench/repl.py --runs 3``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from _common import add_bytecode_flag, child_env

if TYPE_CHECKING:
    from prompt_toolkit.application import Application

    from taskloom.repl.asks import PermissionAsks
    from taskloom.repl.panel import TaskPanel
    from taskloom.repl.transcript import TranscriptView
    from taskloom.tasks.types import TaskState

FIRST_PROMPT_TARGET_S = 0.4
REDRAW_TARGET_MS = 5.0
IDLE_CPU_TARGET_PERCENT = 2.0
TASKS = 50
ROWS, COLUMNS = 80, 160  # a tall terminal: the panel may use a third of it (26 rows)
#: Every process a run starts inherits this variable (set to the run's own id): leftovers are
#: found by it, never by looking at the whole machine.
MARK = "TASKLOOM_BENCH_RUN"
FLOORS = {"python_floor": "pass", "prompt_toolkit_floor": "import prompt_toolkit"}
#: What the idle REPL's scripted model answers once its commands have started.
STARTED = f"All {TASKS} commands started."
#: Bound on any one wait for the child (start-up, the 50 rows, exit).
TIMEOUT_S = 30.0

_CSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>78]")
_CPR_REQUEST = b"\x1b[6n"
#: The live area once drawn: the input's prompt, then the status line with the model's name.
#: prompt_toolkit leaves out trailing blanks, so the ``> `` of the input shows as ``>``.
_READY = re.compile(r"^>[ \t]*\r*\n\s*scripted:", re.M)


class PtyChild:
    """A program run under a pseudo-terminal of its own, in a session (and group) of its own."""

    def __init__(self, cmd: list[str], env: dict[str, str], cwd: str) -> None:
        self.started = time.monotonic()
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=env,
                cwd=cwd,
                start_new_session=True,  # the pty becomes its controlling terminal
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        self.master: int | None = master
        self.output = bytearray()
        self._scanned = 0  # how far cursor position requests have been looked for

    def text(self, start: int = 0) -> str:
        """What it wrote from byte ``start`` on, escape sequences left out."""
        return _CSI.sub(b"", bytes(self.output[start:])).decode("utf-8", "replace")

    def pump(self, timeout: float) -> bool:
        """Read what it writes for up to ``timeout`` s (less once it has written); False at EOF."""
        if self.master is None:
            return False
        ready, _, _ = select.select([self.master], [], [], max(0.0, timeout))
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every holder of the slave side has closed it
            chunk = b""
        if not chunk:
            os.close(self.master)
            self.master = None
            return False
        self.output += chunk
        # Answer cursor position requests as a terminal would (a request may span two reads).
        while (at := self.output.find(_CPR_REQUEST, self._scanned)) >= 0:
            self._scanned = at + len(_CPR_REQUEST)
            self.send(b"\x1b[1;1R")
        self._scanned = max(self._scanned, len(self.output) - len(_CPR_REQUEST) + 1)
        return True

    def wait_for(self, done: re.Pattern[str] | str, start: int = 0) -> float:
        """Read until its output from ``start`` on matches ``done``; the time that took."""
        deadline = time.monotonic() + TIMEOUT_S
        while not _matches(done, self.text(start)):
            left = deadline - time.monotonic()
            if left <= 0 or not self.pump(left):
                tail = self.text()[-1500:]
                raise RuntimeError(
                    f"never saw {done!r} (exit {self.proc.poll()}); it wrote:\n{tail}"
                )
        return time.monotonic() - self.started

    def drain(self, seconds: float) -> None:
        """Read (and answer) what it writes for ``seconds``, so that it never blocks on the pty."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if not self.pump(left):
                return

    def send(self, data: bytes) -> None:
        if self.master is not None:
            os.write(self.master, data)

    def finish(self) -> int:
        """Read to its EOF and reap it; its exit code."""
        deadline = time.monotonic() + TIMEOUT_S
        while self.pump(deadline - time.monotonic()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.proc.args!r} did not exit")
        return self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))

    def kill(self) -> None:
        """Kill it and its process group if it still runs; close the pty."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        if self.master is not None:
            os.close(self.master)
            self.master = None


def _matches(done: re.Pattern[str] | str, text: str) -> bool:
    return done.search(text) is not None if isinstance(done, re.Pattern) else done in text


@dataclass(frozen=True)
class StartRun:
    """One measured start of the REPL (seconds)."""

    first_prompt: float
    exit_after_command: float


def _start_run(script: Path, env: dict[str, str], cwd: str) -> StartRun:
    child = PtyChild([sys.executable, "-m", "taskloom", "--model", f"scripted:{script}"], env, cwd)
    try:
        first = child.wait_for(_READY)
        typed = time.monotonic()
        child.send(b"/exit\r")
        code = child.finish()
        if code != 0:
            raise RuntimeError(f"the REPL exited {code} after /exit:\n{child.text()[-1500:]}")
        return StartRun(first, time.monotonic() - typed)
    finally:
        child.kill()


def _floor_run(code: str, env: dict[str, str], cwd: str) -> float:
    child = PtyChild([sys.executable, "-c", code], env, cwd)
    try:
        status = child.finish()
        if status != 0:
            raise RuntimeError(f"python -c {code!r} exited {status}")
        return time.monotonic() - child.started
    finally:
        child.kill()


# -- redraw ---------------------------------------------------------------------------------------


@dataclass
class _Source:
    """The REPL as the live area sees it (a :class:`taskloom.repl.screen.ScreenSource`)."""

    view: TranscriptView
    panel: TaskPanel
    asks: PermissionAsks
    todos: tuple[Any, ...] = ()  # no todo list: the redraw measured is the task panel's
    busy: bool = True
    turn_seconds: int = 12
    reasoning: bool = False

    def status_text(self, width: int) -> str:
        return " scripted:bench.json · default · /home/me/project · 12.3k tokens · $0.04"


class _FakeTime:
    """The panel's clocks: the wall clock moves a second per redraw (every row changes)."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = time.time()

    def monotonic(self) -> float:
        return self.mono

    def time(self) -> float:
        return self.wall


def _tasks(scratch: Path, session: str, now: float, count: int) -> list[TaskState]:
    from taskloom.tasks.types import AgentTaskState, ShellTaskState, TaskStatus

    states: list[TaskState] = []
    for i in range(count):
        out = scratch / f"task{i}.out"
        common: dict[str, Any] = {
            "status": TaskStatus.RUNNING,
            "owner": session,
            "session_id": session,
            "start_time": now - 7 * i,
            "output_file": str(out),
        }
        if i % 2:
            states.append(
                AgentTaskState(
                    id=f"a{i:07d}",
                    description=f"review part {i} of the change",
                    tool_uses=i,
                    total_tokens=1000 * i,
                    activities=("Reading src/app.py", f"Running pytest tests/test_{i}.py"),
                    **common,
                )
            )
        else:
            # A few KiB of output: the row reads the tail for its last line.
            out.write_text("".join(f"step {n} of build {i}\n" for n in range(200)))
            states.append(ShellTaskState(id=f"b{i:07d}", command=f"make -j8 target{i}", **common))
    return states


@dataclass(frozen=True)
class Redraws:
    """Milliseconds each redraw took: wall and CPU time of a redraw, wall time of a repaint."""

    ticks: list[float]
    tick_cpu: list[float]
    repaints: list[float]


def _redraw(app: Application[int]) -> None:
    """What a running application does on each redraw (its ``_redraw``, without the loop)."""
    # The controls cache their text by the render counter: without a new count they would
    # draw the first text again and again, never asking the panel for its rows.
    app.render_counter += 1
    app.renderer.render(app, app.layout)


async def _redraws(scratch: Path, count: int, rounds: int) -> Redraws:
    """Times of ``rounds`` redraws a second apart, and of as many repaints from scratch."""
    from prompt_toolkit.application.current import create_app_session, set_app
    from prompt_toolkit.buffer import Buffer
    from prompt_toolkit.data_structures import Size
    from prompt_toolkit.input import DummyInput
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.output.vt100 import Vt100_Output

    import taskloom.tasks.agent
    import taskloom.tasks.shell_kind  # noqa: F401  (their kinds give the rows' progress)
    from taskloom.permissions import Decision, PermissionRequest, PromptError
    from taskloom.repl.asks import PermissionAsks
    from taskloom.repl.panel import TaskPanel
    from taskloom.repl.screen import ScreenSource, build_application
    from taskloom.repl.transcript import TranscriptView

    clock = _FakeTime()
    session = "bench-session"
    panel = TaskPanel(session, clock=clock.monotonic, wall=clock.time)
    for state in _tasks(scratch, session, clock.wall, count):
        panel.update(state)
    view = TranscriptView(lambda lines: None)
    view.delta("Looking at the failures one by one; the first is in")
    shown = asyncio.Event()
    asks = PermissionAsks(shown.set, lambda agent: "")
    request = PermissionRequest(
        "Bash", "execute", "rm -rf build", scratch, {"command": "rm -rf build"}
    )
    decision = Decision("ask", "Bash needs approval in default mode", suggestion="Bash(rm:*)")
    asking = asyncio.create_task(asks.ask(request, decision, tool_use_id="t1", agent_id=None))
    await shown.wait()
    source: ScreenSource = _Source(view, panel, asks)
    ticks: list[float] = []
    tick_cpu: list[float] = []  # CPU time: steadier than wall time on a loaded machine
    repaints: list[float] = []
    with open(os.devnull, "w") as sink:
        output = Vt100_Output(sink, lambda: Size(rows=ROWS, columns=COLUMNS), term="xterm-256color")
        with create_app_session(input=DummyInput(), output=output):
            app = build_application(source, Buffer(), KeyBindings())
            with set_app(app):
                _redraw(app)  # the first draw sets up the terminal
                for _ in range(rounds):
                    clock.wall += 1.0
                    clock.mono += 1.0
                    start, cpu = time.perf_counter(), time.thread_time()
                    _redraw(app)
                    output.flush()
                    ticks.append((time.perf_counter() - start) * 1000)
                    tick_cpu.append((time.thread_time() - cpu) * 1000)
                for _ in range(rounds):
                    app.renderer.reset(leave_alternate_screen=False)
                    start = time.perf_counter()
                    _redraw(app)
                    output.flush()
                    repaints.append((time.perf_counter() - start) * 1000)
    asks.close("the benchmark is over")
    with contextlib.suppress(PromptError):
        await asking
    return Redraws(ticks, tick_cpu, repaints)


# -- idle CPU -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdleRun:
    """The idle REPL with its tasks running."""

    cpu_percent: float
    output_bytes_per_s: float
    sleeps_before_exit: int
    exit_code: int
    sleeps_after_exit: int


def _marked(mark: str, name: str | None = None) -> list[psutil.Process]:
    """Live processes (not zombies) of this run, other than us; only ``name`` ones if given."""
    found = []
    for proc in psutil.process_iter(["pid", "environ", "status", "name"]):
        if proc.pid == os.getpid() or proc.info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        if (proc.info.get("environ") or {}).get(MARK) != mark:
            continue
        if name is None or proc.info.get("name") == name:
            found.append(proc)
    return found


def _idle_run(script: Path, env: dict[str, str], cwd: str, window_s: float) -> IdleRun:
    cmd = [
        sys.executable,
        "-m",
        "taskloom",
        "--model",
        f"scripted:{script}",
        "--dangerously-skip-permissions",
        "start the commands",
    ]
    child = PtyChild(cmd, env, cwd)
    try:
        child.wait_for(STARTED)
        # Once the answer is printed the live area is drawn anew: as many rows as a third of
        # the screen holds, and a line counting the others.
        answered = child.output.find(STARTED.encode())
        summary = re.compile(r"… (\d+) more \((\d+) running")
        deadline = time.monotonic() + TIMEOUT_S

        def all_up() -> bool:
            found = summary.search(child.text(answered))
            shown = sum(f"bench-task-{i:02d}" in child.text(answered) for i in range(TASKS))
            return found is not None and shown + int(found.group(1)) >= TASKS

        while not all_up():
            if time.monotonic() > deadline or not child.pump(deadline - time.monotonic()):
                raise RuntimeError("the panel never showed the 50 tasks (rows and a count)")
        process = psutil.Process(child.proc.pid)
        before, seen = process.cpu_times(), len(child.output)
        start = time.monotonic()
        child.drain(window_s)
        after, wall = process.cpu_times(), time.monotonic() - start
        written = len(child.output) - seen
        sleeps = len(_marked(env[MARK], "sleep"))
        child.send(b"/exit\r")
        code = child.finish()
    finally:
        child.kill()
    used = (after.user + after.system) - (before.user + before.system)
    left = _marked(env[MARK], "sleep")
    return IdleRun(100 * used / wall, written / wall, sleeps, code, len(left))


# -- the run --------------------------------------------------------------------------------------


def _child_env(scratch: str, pycache: str | None, mark: str) -> dict[str, str]:
    env = child_env(
        pycache,
        TASKLOOM_HOME=os.path.join(scratch, "taskloom-home"),
        HOME=os.path.join(scratch, "home"),
        TERM="xterm-256color",
        LANG="C.UTF-8",
        LC_ALL="C.UTF-8",
        **{MARK: mark},
    )
    env.pop("TMUX", None)
    return env


def _scripts(scratch: Path) -> tuple[Path, Path]:
    """The scripted models: one never asked (start-up), and the idle run's."""
    start = scratch / "start.json"
    start.write_text(json.dumps({"turns": ["unused"]}))
    calls = [
        {
            "name": "Bash",
            "input": {
                "command": "sleep 60",
                "description": f"bench-task-{i:02d}",
                "run_in_background": True,
            },
        }
        for i in range(TASKS)
    ]
    idle = scratch / "idle.json"
    idle.write_text(
        json.dumps({"turns": [{"text": "Starting them.", "tool_calls": calls}, STARTED]})
    )
    return start, idle


def _verdict(ok: bool, text: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'}: {text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="Measured starts (plus one warm-up).")
    parser.add_argument("--redraws", type=int, default=300, help="Redraws timed of each kind.")
    parser.add_argument("--idle-seconds", type=float, default=5.0, help="The CPU window.")
    add_bytecode_flag(parser)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="taskloom-bench-"))
    mark = uuid.uuid4().hex
    try:
        workdir = scratch / "cwd"
        workdir.mkdir()
        (scratch / "home").mkdir()
        pycache = None if args.no_bytecode_cache else str(scratch / "pycache")
        env = _child_env(str(scratch), pycache, mark)
        start_script, idle_script = _scripts(scratch)
        floors: dict[str, list[float]] = {name: [] for name in FLOORS}
        starts: list[StartRun] = []
        for i in range(args.runs + 1):  # the first round only warms caches
            round_floors = {n: _floor_run(c, env, str(workdir)) for n, c in FLOORS.items()}
            started = _start_run(start_script, env, str(workdir))
            if i:
                starts.append(started)
                for name, seconds in round_floors.items():
                    floors[name].append(seconds)
        redraw_dir = scratch / "redraw"
        redraw_dir.mkdir()
        empty = asyncio.run(_redraws(redraw_dir, 0, args.redraws))
        full = asyncio.run(_redraws(redraw_dir, TASKS, args.redraws))
        idle = _idle_run(idle_script, env, str(workdir), args.idle_seconds)
    finally:
        leftovers = _marked(mark)
        for proc in leftovers:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(leftovers, timeout=10)
        shutil.rmtree(scratch, ignore_errors=True)
    first = statistics.median(r.first_prompt for r in starts)
    redraw = statistics.median(full.ticks)
    print(f"runs: {args.runs}")
    print(f"bytecode_cache: {'off' if pycache is None else 'on'}")
    for name, measured in floors.items():
        print(f"{name}_s_median: {statistics.median(measured):.3f}")
    print(f"first_prompt_s_median: {first:.3f}")
    print(f"first_prompt_s_max: {max(r.first_prompt for r in starts):.3f}")
    floor = statistics.median(floors["prompt_toolkit_floor"])
    print(f"first_prompt_over_prompt_toolkit_floor_s: {first - floor:.3f}")
    exit_after = statistics.median(r.exit_after_command for r in starts)
    print(f"exit_after_command_s_median: {exit_after:.3f}")
    print(f"redraws: {args.redraws}")
    print(f"redraw_no_tasks_ms_median: {statistics.median(empty.ticks):.2f}")
    print(f"redraw_ms_median: {redraw:.2f}")
    print(f"redraw_ms_p95: {statistics.quantiles(full.ticks, n=20)[-1]:.2f}")
    print(f"redraw_cpu_ms_median: {statistics.median(full.tick_cpu):.2f}")
    print(f"repaint_ms_median: {statistics.median(full.repaints):.2f}")
    print(f"idle_window_s: {args.idle_seconds:.1f}")
    print(f"idle_cpu_percent: {idle.cpu_percent:.2f}")
    print(f"idle_output_bytes_per_s: {idle.output_bytes_per_s:.0f}")
    print(f"idle_sleeps_running: {idle.sleeps_before_exit}")
    print(f"idle_exit_code: {idle.exit_code}")
    print(f"idle_sleeps_left_after_exit: {idle.sleeps_after_exit}")
    print(f"processes_left_at_end: {len(leftovers)}")
    _verdict(
        first <= FIRST_PROMPT_TARGET_S,
        f"first prompt {first:.3f} s (target <= {FIRST_PROMPT_TARGET_S} s)",
    )
    _verdict(
        redraw <= REDRAW_TARGET_MS,
        f"redraw with {TASKS} tasks {redraw:.2f} ms (target <= {REDRAW_TARGET_MS} ms)",
    )
    _verdict(
        idle.cpu_percent < IDLE_CPU_TARGET_PERCENT,
        f"idle CPU with {TASKS} tasks {idle.cpu_percent:.2f} % "
        f"(target < {IDLE_CPU_TARGET_PERCENT} %)",
    )
    _verdict(
        idle.sleeps_before_exit == TASKS
        and idle.exit_code == 0
        and idle.sleeps_after_exit == 0
        and not leftovers,
        f"{TASKS} commands ran, /exit exited {idle.exit_code} and left "
        f"{idle.sleeps_after_exit} sleep(s) (target: 0, exit 0)",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
