"""The watchdog on a fake clock: stall episodes, kill after a stall, deadlines, prompts."""

from __future__ import annotations

import pytest

from taskloom.tasks.watchdog import Watch, Watchdog, looks_like_prompt
from taskloom.testing import FakeClock


async def run_for(clock: FakeClock, seconds: int) -> None:
    for _ in range(seconds):
        await clock.advance(1.0)


async def test_stall_is_reported_once_per_episode_and_progress_starts_a_new_one() -> None:
    clock = FakeClock()
    dog = Watchdog(clock, tick=1.0)
    progress = [0]
    stalls: list[float] = []
    stop = dog.watch(
        Watch(
            task_id="b1",
            probe=lambda: progress[0],
            stall_after=10,
            check_every=2,
            on_stall=lambda: stalls.append(clock.monotonic()),
        )
    )
    await clock.wait_for_sleepers()
    await run_for(clock, 30)
    assert len(stalls) == 1 and 10 <= stalls[0] <= 14
    progress[0] = 5  # output grew: a new episode may be reported later
    await run_for(clock, 8)
    assert len(stalls) == 1
    await run_for(clock, 10)
    assert len(stalls) == 2
    stop()
    await dog.close()


async def test_kill_follows_an_unanswered_stall_and_deadline_fires_once() -> None:
    clock = FakeClock()
    dog = Watchdog(clock, tick=1.0)
    events: list[str] = []

    async def kill() -> None:
        events.append(f"kill@{clock.monotonic():.0f}")

    dog.watch(
        Watch(
            task_id="a1",
            probe=lambda: 0,
            stall_after=5,
            check_every=1,
            on_stall=lambda: events.append(f"stall@{clock.monotonic():.0f}"),
            kill_after_stall=5,
            kill=kill,
        )
    )
    dog.watch(
        Watch(
            task_id="a2",
            probe=None,
            deadline=clock.monotonic() + 7,
            on_deadline=lambda: events.append(f"deadline@{clock.monotonic():.0f}"),
        )
    )
    await clock.wait_for_sleepers()
    await run_for(clock, 40)
    assert events == ["stall@6", "deadline@7", "kill@11"]
    assert sorted(dog.watching) == ["a1", "a2"]
    await dog.close()
    assert dog.watching == []


async def test_a_broken_probe_does_not_stop_the_other_watches(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    dog = Watchdog(clock, tick=1.0)
    ticks: list[int] = []

    def broken() -> int:
        raise OSError("gone")

    dog.watch(Watch(task_id="b1", probe=broken, stall_after=1, check_every=1))
    dog.watch(Watch(task_id="b2", probe=None, on_tick=lambda: ticks.append(1)))
    await clock.wait_for_sleepers()
    await run_for(clock, 5)
    assert len(ticks) == 5
    assert "watchdog check failed for task b1" in caplog.text
    await dog.close()


@pytest.mark.parametrize(
    ("tail", "expected"),
    [
        ("Continue? (y/n) ", True),
        ("Overwrite existing file? [y/N]", True),
        ("Proceed (yes/no)?", True),
        ("Press Enter to continue", True),
        ("press any key", True),
        ("Are you sure you want to delete it? ", True),
        ("Do you want to install these packages?\n", True),
        ("Continue?", True),
        ("Overwrite?", True),
        ("building...\n100%\n", False),
        ("", False),
        ("Do you know? it works\nmore output\nand more\nand more\n", False),
    ],
)
def test_prompt_detection(tail: str, expected: bool) -> None:
    assert looks_like_prompt(tail) is expected
