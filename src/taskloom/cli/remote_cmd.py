"""``taskloom remote``: the cluster and the remote agents; and the process of one remote agent.

``taskloom remote status [--json]`` says which Ray cluster remote agents use (and whether it
answers) and lists the remote agents recorded in the store. ``taskloom remote worker --spec
FILE`` is what a remote agent's actor starts on the worker: a session of its own (the same
Harness, engine and tools as a local agent) that runs the agent in the foreground and prints
what happens, one JSON object a line: ``progress`` (lines for the output file, usage so far),
then ``result`` or ``error``. It stops when the actor that started it dies. ``taskloom remote
zygote --fd N`` is a pooled actor's fork server of such workers (:mod:`taskloom.remote.zygote`).

argparse, as every command: it is started once per remote agent.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: The worker's exit code when its actor died under it.
_ORPHANED = 3


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="taskloom remote", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="The cluster and the remote agents.")
    status.add_argument("--json", action="store_true", help="As one JSON object.")
    worker = sub.add_parser("worker", help="(internal) Run one remote agent on a worker.")
    worker.add_argument("--spec", required=True, type=Path, help="The spec its actor wrote.")
    zygote = sub.add_parser("zygote", help="(internal) Fork remote agents' workers, warm.")
    zygote.add_argument("--fd", required=True, type=int, help="The socket its actor passed.")
    return parser


def main_remote(args: list[str]) -> int:
    """Run ``taskloom remote ...``; the exit code (2: a bad command line)."""
    ns = _parser().parse_args(args)
    if ns.command == "status":
        return _status(ns.json)
    if ns.command == "zygote":
        return _zygote(ns.fd)
    return _worker(ns.spec)


def _status(as_json: bool) -> int:
    import asyncio
    import os

    from taskloom.remote.cluster import Cluster, ClusterError, endpoint, probe
    from taskloom.settings import db_path, load_settings
    from taskloom.store import Store
    from taskloom.tasks.types import TaskType

    settings = load_settings(Path.cwd())
    address = Cluster(settings).env.get("RAY_ADDRESS") or (settings.get("remote") or {}).get(
        "address"
    )
    reachable: str
    if not address:
        reachable = "none configured: a local Ray is started on first use, for that session"
    else:
        try:
            where = endpoint(str(address))
            if where is not None:
                asyncio.run(probe(str(address), *where))
            reachable = "answers"
        except ClusterError as exc:
            reachable = str(exc)
    agents: list[dict[str, Any]] = []
    if db_path().exists():
        store = Store(db_path(), reserve_bytes=0)
        try:
            agents = store.list_tasks(types=[TaskType.REMOTE_AGENT])
        finally:
            store.close()
    if as_json:
        print(json.dumps({"cluster": {"address": address, "status": reachable}, "agents": agents}))
        return 0
    print(f"cluster: {address or 'local'} ({reachable})")
    if os.environ.get("RAY_ADDRESS"):
        print("  (from RAY_ADDRESS)")
    for t in agents:
        branch = f"  branch {t['branch']}" if t.get("branch") else ""
        if t.get("exit_policy") == "detach" and t["status"] == "running":
            branch += f"  detached: taskloom --resume {t.get('session_id')} follows it"
        print(
            f"{t['id']}  {t['status']:<9} {t.get('cluster') or '?':<10} {t['description']}{branch}"
        )
    if not agents:
        print("no remote agents recorded")
    return 0


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _zygote(fd: int) -> int:
    from taskloom.cli import _run, remote_view  # noqa: F401 (imported once, before any fork)
    from taskloom.remote.zygote import serve

    return serve(fd, _worker)


def _worker(spec_path: Path) -> int:
    import os
    import shutil

    from taskloom.cli._run import run_main

    spec = json.loads(spec_path.read_text())
    # In the foreground to its end: the actor streams it; nothing to hand back to.
    os.environ["TASKLOOM_AUTO_BACKGROUND_MS"] = "0"
    code = run_main(lambda: _run_agent(spec))
    if code == _ORPHANED and spec.get("scratch"):
        # Its actor died (killed, its node lost): nobody else will remove its directory.
        os.chdir("/")
        shutil.rmtree(spec["scratch"], ignore_errors=True)
    return code


async def _run_agent(spec: dict[str, Any]) -> int:
    import asyncio
    import contextlib

    from taskloom.agents.spawn_request import SpawnRequest
    from taskloom.cli.remote_view import ProgressOut
    from taskloom.errors import ToolError
    from taskloom.harness import Harness, Options
    from taskloom.process.watch import wait_exit
    from taskloom.tasks.usage import report_fields
    from taskloom.tools.base import ToolContext

    out = ProgressOut(_emit)
    options = Options(
        model=spec.get("model"),
        cwd=Path.cwd(),
        permission_mode=spec.get("mode"),
        skip_permissions=bool(spec.get("skip_permissions")),
        settings=spec.get("settings") or None,
        agents=spec.get("agents"),
        persist_session=False,
        observer=out,
    )
    async with Harness(options) as harness:
        out.runtime = harness.runtime
        _emit({"type": "ready"})  # its session started: the next agent may start
        ctx = ToolContext(runtime=harness.runtime, owner=harness.session_id, cwd=Path.cwd())
        request = SpawnRequest(
            description=str(spec.get("description") or ""),
            prompt=str(spec.get("prompt") or ""),
            subagent_type=spec.get("agent_type") or None,
            model=spec.get("model"),
            mode=spec.get("mode"),
        )
        spawn = asyncio.ensure_future(harness.agents.spawn(request, ctx))
        parent = spec.get("parent_pid")
        lost = asyncio.ensure_future(wait_exit(int(parent))) if parent else None
        waits = [spawn, *([lost] if lost else [])]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if not spawn.done():  # its actor is gone: nobody reads on
            spawn.cancel()
            with contextlib.suppress(BaseException):
                await spawn
            return _ORPHANED
        if lost is not None:
            lost.cancel()
        try:
            result = spawn.result()
        except ToolError as exc:
            _emit({"type": "error", "error": str(exc)})
            return 1
        out.flush()
        _emit(
            {
                "type": "result",
                "content": result.content,
                "total_tokens": result.total_tokens,
                "tool_uses": result.total_tool_uses,
                "duration_ms": result.duration_ms,
                **report_fields(harness.runtime.usage.report_of()),
            }
        )
        return 0


__all__ = ["main_remote"]
