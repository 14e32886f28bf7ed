"""The shielded turn driver: a turn as a task of its own, ended by an interrupt or a stop."""

from __future__ import annotations

import asyncio

import pytest

from helpers import TIME_FACTOR
from taskloom.conversation.turn_driver import TurnDriver, TurnEnd

BOUND_S = 5 * TIME_FACTOR


class Turn:
    """A turn that waits until it is cut short, and reports how, as a front end's turn does."""

    def __init__(self, driver: TurnDriver[str]) -> None:
        self.driver = driver
        self.running = asyncio.Event()
        #: Set by the test to let the turn's cleanup finish.
        self.cleaned = asyncio.Event()
        self.cleaning = asyncio.Event()

    async def __call__(self, cleanup: bool = False) -> str:
        self.running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if not self.driver.interrupted():
                raise
            if cleanup:  # recording that it was cut short takes a while
                self.cleaning.set()
                await self.cleaned.wait()
            return "interrupted"
        return "unreachable"


async def test_a_turn_that_ends_gives_its_result() -> None:
    driver: TurnDriver[str] = TurnDriver()
    ends: list[TurnEnd[str]] = []

    async def answer() -> str:
        return "done"

    await driver.run(answer(), ends.append)
    assert ends == [TurnEnd(result="done")]
    assert not driver.busy


async def test_an_interrupt_during_a_turn_ends_it_cleanly_and_the_worker_goes_on() -> None:
    driver: TurnDriver[str] = TurnDriver()
    turn = Turn(driver)
    ends: list[TurnEnd[str]] = []
    worker = asyncio.ensure_future(driver.run(turn(), ends.append))
    await asyncio.wait_for(turn.running.wait(), BOUND_S)
    assert driver.busy
    assert driver.interrupt()
    await asyncio.wait_for(worker, BOUND_S)  # the worker itself was not cancelled
    assert ends == [TurnEnd(result="interrupted")]
    assert not driver.busy and not driver.interrupt()  # nothing left to interrupt


async def test_a_second_interrupt_does_not_cut_the_first_ones_cleanup_short() -> None:
    driver: TurnDriver[str] = TurnDriver()
    turn = Turn(driver)
    ends: list[TurnEnd[str]] = []
    worker = asyncio.ensure_future(driver.run(turn(cleanup=True), ends.append))
    await asyncio.wait_for(turn.running.wait(), BOUND_S)
    assert driver.interrupt()
    await asyncio.wait_for(turn.cleaning.wait(), BOUND_S)
    assert not driver.interrupt()  # refused: the turn is still busy recording the first
    turn.cleaned.set()
    await asyncio.wait_for(worker, BOUND_S)
    assert ends == [TurnEnd(result="interrupted")]


async def test_an_interrupt_before_the_turn_began_ends_it_cancelled() -> None:
    driver: TurnDriver[str] = TurnDriver()
    ends: list[TurnEnd[str]] = []
    started: list[bool] = []

    async def never_runs() -> str:
        started.append(True)
        return "sent"

    worker = asyncio.ensure_future(driver.run(never_runs(), ends.append))
    while driver.turn is None:  # the worker has created the turn, which has not run yet
        await asyncio.sleep(0)
    assert driver.interrupt()
    await asyncio.wait_for(worker, BOUND_S)
    assert ends == [TurnEnd(cancelled=True)] and started == []


async def test_a_stopped_worker_stops_its_turn_and_is_told_how_it_ended() -> None:
    driver: TurnDriver[str] = TurnDriver()
    turn = Turn(driver)
    ends: list[TurnEnd[str]] = []
    worker = asyncio.ensure_future(driver.run(turn(), ends.append))
    await asyncio.wait_for(turn.running.wait(), BOUND_S)
    worker.cancel()  # the session closes: not an interrupt, so the turn does not go on
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(worker, BOUND_S)
    assert ends == [TurnEnd(cancelled=True, stopped=True)]
    assert driver.turn is not None and driver.turn.cancelled()


async def test_a_turn_that_reports_its_own_stop_gives_that_result() -> None:
    """As print mode's turn does: a stop becomes an "interrupted" result, then the worker goes."""
    driver: TurnDriver[str] = TurnDriver()
    running = asyncio.Event()

    async def reporting() -> str:
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()
            return "stopped: interrupted"
        return "unreachable"

    ends: list[TurnEnd[str]] = []
    worker = asyncio.ensure_future(driver.run(reporting(), ends.append))
    await asyncio.wait_for(running.wait(), BOUND_S)
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(worker, BOUND_S)
    assert ends == [TurnEnd(result="stopped: interrupted", stopped=True)]


async def test_a_turn_that_raises_gives_its_error() -> None:
    driver: TurnDriver[str] = TurnDriver()
    ends: list[TurnEnd[str]] = []
    boom = RuntimeError("boom")

    async def failing() -> str:
        raise boom

    await driver.run(failing(), ends.append)
    assert ends == [TurnEnd(error=boom)]


async def test_stop_cancels_the_running_turn_and_waits_for_it() -> None:
    driver: TurnDriver[str] = TurnDriver()
    turn = Turn(driver)
    worker = asyncio.ensure_future(driver.run(turn(), lambda end: None))
    await asyncio.wait_for(turn.running.wait(), BOUND_S)
    await asyncio.wait_for(driver.stop(), BOUND_S)
    assert driver.turn is not None and driver.turn.cancelled()
    await asyncio.wait_for(worker, BOUND_S)  # the turn's end was its own, not the worker's
