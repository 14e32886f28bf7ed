"""Benchmark: start-up and exit of a one-request ``taskloom -p`` run, and its peak RSS.

A local fake Anthropic server (tests/fake_servers.py, speaking the real SSE wire format)
answers ``hello``. From the same run of ``taskloom -p hi --model sonnet`` it measures:

- ``first_request``: from just before the process is spawned to the moment the server
  receives the first ``/v1/messages`` request;
- ``exit_after_result``: from the result line appearing on the child's stdout (read as a
  pipe) to the process having exited;
- ``run_total``: from spawn to exit;
- peak RSS: the child's ``ru_maxrss`` over the whole run; and its CPU time (user + system),
  steadier than wall time on a loaded machine.

``python -c pass`` is measured the same way, in the same run, as a floor; so are the imports
no first request over httpx can do without (``dependency_floor``: asyncio, sqlite3, httpx and
the transport it loads on its first request; ``first_request_over_dependency_floor`` is what
taskloom adds to it) and those plus pydantic (``pydantic_floor``). httpx imports its command
line (click and rich) as a side effect unless a stand-in is registered first, as taskloom
does; the floors do the same, and ``httpx_cli_floor`` is the dependency floor with it.
The first run of each command only warms caches and is left out.

``request_floor``: bench/_request_floor.py, the least a program does to send the request (a
SQLite database opened, one streamed POST over an ``httpx.AsyncClient``), measured as
taskloom's first request is; unlike the import floors it includes what sending loads and
builds (the transport's async backend, the client's TLS context). Printed beside the target,
which stays against ``dependency_floor``.

Phases: in each round one more run is watched by ``tests/startup_probe`` (loaded at interpreter
start; it notes the first import of taskloom, httpx and pydantic, the store's opening and the
first request's first bytes on the socket, see there); ``phase_*`` are the medians of those
moments, from the spawn, and ``peak_rss_mib_at_first_request`` the peak RSS by then. It is a
run of its own, as watching costs a little.

Bytecode: the children get a private ``PYTHONPYCACHEPREFIX`` (and ``PYTHONDONTWRITEBYTECODE``
removed), as an installed taskloom has its ``.pyc`` files; ``--no-bytecode-cache`` measures
with whatever the environment says instead.

``--compare SRC`` also runs the package found in ``SRC`` (e.g. a copy of an older ``src``
directory), interleaved run by run with this tree, so both see the same machine load.

With ``--compare``, the top-level modules each version's plain run imports are counted, and
those one imports and the other does not are named.

``--mcp`` also measures, in the same rounds, a run with two stdio MCP servers from PyPI
configured (``mcp-server-time`` and ``mcp-server-git`` on a scratch repository, given with
``--mcp-config``): its first request must already offer both servers' tools (as Claude Code's
does), so it comes once both have started.

Targets: first request <= 0.20 s and <= 0.06 s over the dependency floor, peak RSS <= 50 MiB,
exit <= 0.05 s after the result; with ``--mcp``, first request <= 1.5 s.
Quick run: ``.venv/bin/python bench/startup.py --runs 3`` (``--mcp`` for the MCP run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import add_bytecode_flag, child_env, child_report

from fake_servers import FakeAnthropicServer

FIRST_REQUEST_TARGET_S = 0.20
MCP_FIRST_REQUEST_TARGET_S = 1.5
#: A tool of each MCP server the ``--mcp`` run configures; its first request must offer both.
MCP_TOOLS = ("mcp__time__get_current_time", "mcp__git__git_status")
RSS_TARGET_MIB = 50.0
EXIT_TARGET_S = 0.05
REPLY = "hello"
#: What a first request cannot avoid importing: the event loop, the store, and httpx with the
#: transport it loads when it first connects (httpcore, h11, anyio), as ``-X importtime``
#: lists them before the first connect of a run. anyio (4.x) imports its modules when first
#: used: its asyncio backend and streams, which httpcore's first connect loads, are named.
#: tests/test_first_request_imports.py checks that a first request loads nothing more.
DEPENDENCY_IMPORTS = (
    "import asyncio, json, sqlite3, ssl, httpx, httpcore, h11, anyio, sniffio, "
    "anyio._backends._asyncio, anyio.streams.memory, anyio.streams.stapled, anyio.streams.tls, "
    "anyio.to_thread"
)
#: What taskloom.models does before httpx is imported: httpx's command line (click, rich) is
#: left out, as no request needs it.
NO_HTTPX_CLI = (
    "import sys, types; cli = types.ModuleType('httpx._main'); cli.main = print; "
    "sys.modules['httpx._main'] = cli; "
)
FLOORS = {
    "python_floor": "pass",
    "dependency_floor": NO_HTTPX_CLI + DEPENDENCY_IMPORTS,
    "pydantic_floor": NO_HTTPX_CLI + DEPENDENCY_IMPORTS + "; from pydantic import BaseModel",
    "httpx_cli_floor": DEPENDENCY_IMPORTS,
}
#: The most the first request may take over the dependency floor.
OVER_FLOOR_TARGET_S = 0.06
PROBE = Path(__file__).resolve().parent.parent / "tests" / "startup_probe"
#: The request floor's program (see there): it sends the request itself.
REQUEST_FLOOR = Path(__file__).resolve().parent / "_request_floor.py"
#: The probe's events reported as phases, in the order a run should meet them.
PHASES = (
    "interpreter",
    "import:taskloom",
    "import:httpx",
    "import:pydantic",
    "store_opened",
    "first_request",
)


@dataclass(frozen=True)
class Run:
    """One measured child process (times in seconds from its spawn)."""

    first_request: float
    result: float
    exit: float
    rss_mib: float
    cpu: float  # user + system time of the whole run, steadier than wall time under load


#: Imported only on the path that needs them.
# acp: the Agent Client Protocol library, imported only by `taskloom acp`.
# markdownify and bs4: WebFetch's HTML to Markdown, imported only when a page is fetched.
# nbformat: Read and NotebookEdit of Jupyter notebooks, imported only when one is touched.
OPTIONAL_HEAVY = frozenset(
    {"ray", "opentelemetry", "libtmux", "markdownify", "bs4", "nbformat", "acp"}
)


def _spawn(cmd: list[str], env: dict[str, str], cwd: str, marker: str | None) -> Run:
    """Run ``cmd``; timestamp the stdout line ``marker`` and the exit; and its peak RSS."""
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: a dedicated helper process
    # per measurement spawns the command, so earlier children do not mask it.
    start = time.monotonic()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the helper
        os.close(read_fd)
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert proc.stdout is not None
        result = 0.0
        for line in proc.stdout:
            if not result and line.decode(errors="replace").strip() == marker:
                result = time.monotonic()
        proc.wait()
        ended = time.monotonic()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = usage.ru_utime + usage.ru_stime
        os.write(
            write_fd, f"{result} {ended} {usage.ru_maxrss / 1024} {cpu} {proc.returncode}".encode()
        )
        os._exit(0)
    os.close(write_fd)
    result_s, ended_s, rss_s, cpu_s, code = child_report(read_fd, pid)
    if marker is not None and not float(result_s):
        raise RuntimeError(f"{cmd[0]} printed no result line (exit code {code})")
    return Run(0.0, float(result_s) - start, float(ended_s) - start, float(rss_s), float(cpu_s))


def _taskloom_run(env: dict[str, str], workdir: str, extra: tuple[str, ...] = ()) -> Run:
    exe = str(Path(sys.executable).with_name("taskloom"))
    return _request_run([exe, "-p", "hi", "--model", "sonnet", *extra], env, workdir, bool(extra))


def _request_run(cmd: list[str], env: dict[str, str], workdir: str, mcp: bool) -> Run:
    """Run ``cmd`` against a fake Anthropic server; its first request is stamped on arrival."""
    with FakeAnthropicServer() as server:
        first = threading.Event()
        stamp: list[float] = []
        offered: list[str] = []

        def responder(body: dict[str, object]) -> dict[str, str]:
            if not first.is_set():
                stamp.append(time.monotonic())
                tools = body.get("tools") or []
                offered.extend(t["name"] for t in tools if isinstance(t, dict))  # type: ignore[union-attr]
                first.set()
            return {"text": REPLY}

        server.responder = responder  # type: ignore[assignment]
        env = {**env, "ANTHROPIC_BASE_URL": server.url}
        start = time.monotonic()
        run = _spawn(cmd, env, workdir, REPLY)
        if not stamp:
            raise RuntimeError(f"{cmd[0]} never reached the model")
        missing = [t for t in MCP_TOOLS if mcp and t not in offered]
        if missing:
            raise RuntimeError(f"the first request did not offer the MCP tools {missing}")
        return Run(stamp[0] - start, run.result, run.exit, run.rss_mib, run.cpu)


def _phases(env: dict[str, str], workdir: str, scratch: str) -> dict[str, float]:
    """One run watched by the probe: the moment of each of its events, from the spawn."""
    events = os.path.join(scratch, "probe.jsonl")
    with contextlib.suppress(FileNotFoundError):
        os.remove(events)
    path = os.pathsep.join(p for p in (str(PROBE), env.get("PYTHONPATH")) if p)
    start = time.monotonic()
    _taskloom_run({**env, "PYTHONPATH": path, "TASKLOOM_STARTUP_PROBE": events}, workdir)
    with open(events, encoding="utf-8") as lines:
        seen = [json.loads(line) for line in lines]
    moments = {e["event"]: e["t"] - start for e in seen}
    first = moments["first_request"]
    # Loaded only after the first request went out: not a phase of it.
    phases = {name: t for name, t in moments.items() if t <= first}
    phases["rss_mib"] = next(e["rss_mib"] for e in seen if e["event"] == "first_request")
    return phases


def _report_phases(label: str, phases: list[dict[str, float]]) -> None:
    """The phases in the order the runs met them; those most met after the request last."""
    met: dict[str, float] = {}
    for name in PHASES:
        times = [p[name] for p in phases if name in p]
        if len(times) * 2 > len(phases):
            met[name] = statistics.median(times)
    for name, t in sorted(met.items(), key=lambda item: item[1]):
        print(f"{label}phase_{name.replace('import:', 'import_')}_s_median: {t:.3f}")
    for name in PHASES:
        if name not in met:
            print(f"{label}phase_{name.replace('import:', 'import_')}: after the first request")
    rss = statistics.median(p["rss_mib"] for p in phases)
    print(f"{label}peak_rss_mib_at_first_request_median: {rss:.1f}")


def _imported(env: dict[str, str], workdir: str) -> set[str]:
    """The top-level modules a ``taskloom -p hi`` run imports (``PYTHONPROFILEIMPORTTIME``)."""
    with FakeAnthropicServer() as server:
        server.responder = lambda body: {"text": REPLY}  # type: ignore[assignment]
        exe = str(Path(sys.executable).with_name("taskloom"))
        proc = subprocess.run(
            [exe, "-p", "hi", "--model", "sonnet"],
            env={**env, "ANTHROPIC_BASE_URL": server.url, "PYTHONPROFILEIMPORTTIME": "1"},
            cwd=workdir, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def _child_env(home: str, pycache: str | None, src: str | None) -> dict[str, str]:
    env = child_env(pycache, ANTHROPIC_API_KEY="bench", TASKLOOM_HOME=home)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    return env


def _mcp_config(scratch: str) -> str:
    """Write the ``--mcp-config`` file of the ``--mcp`` run (and its git repository)."""
    repo = os.path.join(scratch, "repo")
    os.mkdir(repo)
    subprocess.run(["git", "init", "-q", repo], check=True)
    servers = {
        "time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]},
        "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", repo]},
    }
    path = os.path.join(scratch, "mcp.json")
    Path(path).write_text(json.dumps({"mcpServers": servers}))
    return path


def _report(label: str, runs: list[Run]) -> tuple[float, float, float]:
    first = statistics.median(r.first_request for r in runs)
    exit_after = statistics.median(r.exit - r.result for r in runs)
    total = statistics.median(r.exit for r in runs)
    rss = max(r.rss_mib for r in runs)
    print(f"{label}first_request_s_median: {first:.3f}")
    print(f"{label}first_request_s_max: {max(r.first_request for r in runs):.3f}")
    print(f"{label}exit_after_result_s_median: {exit_after:.3f}")
    print(f"{label}exit_after_result_s_max: {max(r.exit - r.result for r in runs):.3f}")
    print(f"{label}run_total_s_median: {total:.3f}")
    print(f"{label}run_cpu_s_median: {statistics.median(r.cpu for r in runs):.3f}")
    print(f"{label}peak_rss_mib_median: {statistics.median(r.rss_mib for r in runs):.1f}")
    print(f"{label}peak_rss_mib_max: {rss:.1f}")
    return first, exit_after, rss


def _verdict(ok: bool, text: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'}: {text}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--compare", metavar="SRC", help="Also run the taskloom found in SRC.")
    add_bytecode_flag(parser)
    parser.add_argument(
        "--mcp",
        action="store_true",
        help="Also measure a run with mcp-server-time and mcp-server-git configured.",
    )
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="taskloom-bench-")
    home = os.path.join(scratch, "home")
    workdir = os.path.join(scratch, "cwd")
    os.mkdir(workdir)
    pycache = None if args.no_bytecode_cache else os.path.join(scratch, "pycache")
    envs = {"": _child_env(home, pycache, None)}
    if args.compare:
        # A home of its own: an older version may not read the store a newer one migrated.
        base_home = os.path.join(scratch, "baseline-home")
        envs["baseline_"] = _child_env(base_home, pycache, str(Path(args.compare).resolve()))
    floor_env = _child_env(home, pycache, None)
    floors: dict[str, list[Run]] = {name: [] for name in FLOORS}
    request_floors: list[Run] = []
    runs: dict[str, list[Run]] = {label: [] for label in envs}
    mcp_args = ("--mcp-config", _mcp_config(scratch)) if args.mcp else ()
    mcp_runs: list[Run] = []
    phases: dict[str, list[dict[str, float]]] = {label: [] for label in envs}
    try:
        for i in range(args.runs + 1):  # the first round only warms caches
            floor_runs = {
                name: _spawn([sys.executable, "-c", code], floor_env, workdir, None)
                for name, code in FLOORS.items()
            }
            request_floor = _request_run(
                [sys.executable, str(REQUEST_FLOOR)], floor_env, workdir, False
            )
            round_runs = {label: _taskloom_run(env, workdir) for label, env in envs.items()}
            mcp_run = _taskloom_run(envs[""], workdir, mcp_args) if args.mcp else None
            round_phases = {label: _phases(env, workdir, scratch) for label, env in envs.items()}
            if i:
                for label, moments in round_phases.items():
                    phases[label].append(moments)
                if mcp_run is not None:
                    mcp_runs.append(mcp_run)
                for name, run in floor_runs.items():
                    floors[name].append(run)
                request_floors.append(request_floor)
                for label, run in round_runs.items():
                    runs[label].append(run)
        imported = _imported(envs[""], workdir)
        base_imported = _imported(envs["baseline_"], workdir) if args.compare else None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"runs: {args.runs}")
    print(f"bytecode_cache: {'off' if pycache is None else 'on'}")
    for name, measured in floors.items():
        print(f"{name}_s_median: {statistics.median(r.exit for r in measured):.3f}")
        print(f"{name}_cpu_s_median: {statistics.median(r.cpu for r in measured):.3f}")
        print(f"{name}_rss_mib: {statistics.median(r.rss_mib for r in measured):.1f}")
    if args.compare:
        _report("baseline_", runs["baseline_"])
        _report_phases("baseline_", phases["baseline_"])
    first, exit_after, rss = _report("", runs[""])
    _report_phases("", phases[""])
    if args.mcp:
        mcp_first, _, _ = _report("mcp_", mcp_runs)
        print(f"mcp_first_request_over_no_mcp_s: {mcp_first - first:.3f}")
    dependency = statistics.median(r.exit for r in floors["dependency_floor"])
    request_floor = statistics.median(r.first_request for r in request_floors)
    print(f"request_floor_first_request_s_median: {request_floor:.3f}")
    print(f"request_floor_cpu_s_median: {statistics.median(r.cpu for r in request_floors):.3f}")
    print(f"first_request_over_request_floor_s: {first - request_floor:.3f}")
    print(f"first_request_over_dependency_floor_s: {first - dependency:.3f}")
    _verdict(
        first - dependency <= OVER_FLOOR_TARGET_S,
        f"first request {first - dependency:.3f} s over the dependency floor "
        f"(target <= {OVER_FLOOR_TARGET_S} s)",
    )
    _verdict(
        first <= FIRST_REQUEST_TARGET_S,
        f"first request {first:.3f} s (target <= {FIRST_REQUEST_TARGET_S} s)",
    )
    _verdict(
        exit_after <= EXIT_TARGET_S,
        f"exit {exit_after:.3f} s after the result (target <= {EXIT_TARGET_S} s)",
    )
    _verdict(rss <= RSS_TARGET_MIB, f"peak RSS {rss:.1f} MiB (target <= {RSS_TARGET_MIB:.0f} MiB)")
    # Remote agents' Ray, only on their path (installed or not, a run without them pays nothing).
    heavy = sorted(imported & OPTIONAL_HEAVY)
    print(f"optional_heavy_imported: {', '.join(heavy) or 'none'} (of {len(imported)} modules)")
    if base_imported is not None:
        print(f"modules_imported: {len(imported)} (baseline {len(base_imported)})")
        new, gone = sorted(imported - base_imported), sorted(base_imported - imported)
        print(f"modules_new_over_baseline: {', '.join(new) or 'none'}")
        print(f"modules_gone_from_baseline: {', '.join(gone) or 'none'}")
    _verdict(not heavy, f"a plain run imports none of {sorted(OPTIONAL_HEAVY)}")
    if args.mcp:
        _verdict(
            mcp_first <= MCP_FIRST_REQUEST_TARGET_S,
            f"first request with two MCP servers {mcp_first:.3f} s "
            f"(target <= {MCP_FIRST_REQUEST_TARGET_S} s)",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
