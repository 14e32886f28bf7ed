"""Exactly-once notification under racing completion, failure, kill and cleanup."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import run_shell
from taskloom.tasks.types import ShellTaskState, TaskState, TaskStatus, TaskType

OPS = ("complete", "fail", "kill", "cleanup", "kill_owned")


class SlowHandle:
    """A handle whose kill takes a few loop iterations, like a real one."""

    def __init__(self, rt: TaskRuntime, task_id: str, delay: int) -> None:
        self.rt, self.task_id, self.delay = rt, task_id, delay

    async def kill(self) -> None:
        for _ in range(self.delay):
            await asyncio.sleep(0)
        self.rt.update(self.task_id, _end(TaskStatus.KILLED))

    async def detach(self) -> None:  # pragma: no cover - not used here
        pass


def _end(status: TaskStatus):  # type: ignore[no-untyped-def]
    def fn(s: TaskState) -> TaskState:
        return s if s.terminal else s.replace(status=status)

    return fn


async def _race(plan: list[tuple[int, str, int]], n_tasks: int, seed: int) -> None:
    async with TaskRuntime() as rt:
        ids = []
        for i in range(n_tasks):
            owner = f"a{i % 3:08d}"
            state = rt.register(
                ShellTaskState(
                    id=rt.new_id(TaskType.LOCAL_BASH), owner=owner, status=TaskStatus.RUNNING
                )
            )
            rt.attach_handle(state.id, SlowHandle(rt, state.id, delay=seed % 4))
            ids.append(state.id)

        async def op(task_index: int, name: str, yields: int) -> None:
            for _ in range(yields):
                await asyncio.sleep(0)
            task_id = ids[task_index % n_tasks]
            if name == "complete":
                rt.update(task_id, _end(TaskStatus.COMPLETED))
            elif name == "fail":
                rt.update(task_id, _end(TaskStatus.FAILED))
            elif name == "kill":
                await rt.kill(task_id)
            elif name == "cleanup":
                await rt.kill_shells_for_agent(rt.get(task_id).owner)  # type: ignore[union-attr]
            else:
                await rt.kill_owned(rt.get(task_id).owner)  # type: ignore[union-attr]

        await asyncio.gather(*(op(*step) for step in plan))
        notes = rt.drain()
        counts = Counter(n.task_id for n in notes)
        for task_id in ids:
            ended = rt.get(task_id).terminal  # type: ignore[union-attr]
            assert counts[task_id] == (1 if ended else 0), (task_id, ended, counts[task_id])
        assert len(notes) == sum(counts.values())


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    n_tasks=st.integers(1, 12),
    plan=st.lists(
        st.tuples(st.integers(0, 50), st.sampled_from(OPS), st.integers(0, 6)), max_size=40
    ),
    seed=st.integers(0, 1000),
)
def test_exactly_one_notification_per_ended_task(
    n_tasks: int, plan: list[tuple[int, str, int]], seed: int
) -> None:
    asyncio.run(_race(plan, n_tasks, seed))


async def test_real_shells_racing_exit_against_kill() -> None:
    rng = random.Random(7)
    async with TaskRuntime(kill_grace=0.5) as rt:
        outs = [
            await run_shell(rt, f"sleep {rng.uniform(0, 0.05):.3f}", run_in_background=True)
            for _ in range(20)
        ]

        async def stop_later(task_id: str) -> None:
            await asyncio.sleep(rng.uniform(0, 0.05))
            await rt.kill(task_id)

        await asyncio.gather(*(stop_later(o.task_id) for o in outs))
        states = [await rt.wait(o.task_id, timeout=10) for o in outs]
        assert all(s.terminal for s in states)
        counts = Counter(n.task_id for n in rt.drain())
        assert counts == Counter({o.task_id: 1 for o in outs})
