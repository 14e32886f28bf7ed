"""A session process for crash tests: it does some work, reports, then waits to be SIGKILLed.

Usage: python session_script.py MODE SESSION_ID
- ``orphans``: start ``sh -c 'sleep 300 & sleep 300 & setsid sleep 300 & wait'`` in the
  background; print a JSON line with the task id, the shell's pid and its descendants' pids.
- ``notify``: run four background ``echo``s; deliver and acknowledge the first notification,
  leave three undelivered; print a JSON line with the ids of the undelivered ones.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import psutil

from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import run_shell

ORPHAN_CMD = "sleep 300 & sleep 300 & setsid sleep 300 & wait"


async def orphans(rt: TaskRuntime) -> dict[str, object]:
    out = await run_shell(rt, ORPHAN_CMD, run_in_background=True)
    state = rt.get(out.task_id)
    assert state is not None
    pid = state.pid  # type: ignore[attr-defined]
    deadline = time.monotonic() + 10
    kids: list[psutil.Process] = []
    while time.monotonic() < deadline:
        kids = psutil.Process(pid).children(recursive=True)
        if len([k for k in kids if k.name() == "sleep"]) == 3:
            break
        await asyncio.sleep(0.01)
    rt.store.flush()
    return {"task_id": out.task_id, "pid": pid, "children": [k.pid for k in kids]}


async def notify(rt: TaskRuntime) -> dict[str, object]:
    first = await run_shell(rt, "echo one", run_in_background=True)
    await rt.wait(first.task_id, timeout=10)
    batch = rt.drain()
    rt.ack(batch)
    ids = []
    for word in ("two", "three", "four"):
        out = await run_shell(rt, f"echo {word}", run_in_background=True)
        ids.append(out.task_id)
    for task_id in ids:
        await rt.wait(task_id, timeout=10)
    rt.store.flush()
    return {"delivered": [n.task_id for n in batch], "undelivered": ids}


async def main(mode: str, session_id: str) -> None:
    rt = TaskRuntime(session_id=session_id)
    await rt.start()
    result = await (orphans(rt) if mode == "orphans" else notify(rt))
    print(json.dumps(result), flush=True)
    await asyncio.sleep(120)  # the test SIGKILLs us long before this


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
