"""The fork server's launches when things go wrong (taskloom.remote.zygote; no Ray).

Its socket's queue fills; it dies before or after it forks; a launch is cancelled; a worker
is stopped as soon as it is launched; a worker outlives its server. Workers are given a spec
file that is a FIFO where a test needs one to wait: a worker that runs blocks there until the
test writes it (one that never ran never opens it).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from helpers import TIME_FACTOR, clean_env, needs, wait_until
from taskloom.remote.zygote import Forked, Zygote, ZygoteError

pytestmark = [pytest.mark.e2e]

#: Requests sent while the server reads none: more than a socket's queue holds (10 messages
#: by default, and about 200 KiB: each carries :data:`PAD` bytes of environment).
MORE = 12
PAD = "x" * 40_000


@contextlib.asynccontextmanager
async def _zygote() -> AsyncIterator[Zygote]:
    zygote = Zygote()
    await asyncio.wait_for(zygote.start(clean_env()), 60 * TIME_FACTOR)
    try:
        yield zygote
    finally:
        assert zygote._proc is not None
        with contextlib.suppress(ProcessLookupError):  # a test may have stopped it
            os.kill(zygote._proc.pid, signal.SIGCONT)
        await zygote.close()


def _server(zygote: Zygote) -> psutil.Process:
    assert zygote._proc is not None
    return psutil.Process(zygote._proc.pid)


def _live_children(server: psutil.Process) -> list[psutil.Process]:
    try:
        children = server.children()
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if _alive(c)]


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _feed(fifo: Path, text: bytes) -> None:
    """Write ``text`` to ``fifo`` once a worker has it open to read (bounded)."""
    fd = -1

    def opened() -> bool:
        nonlocal fd
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: nobody reads it yet
            assert exc.errno == errno.ENXIO, exc
            return False
        return True

    await wait_until(opened, 30, "a worker reading the spec")
    try:
        os.write(fd, text)
    finally:
        os.close(fd)


async def _launch_unanswered(
    zygote: Zygote, spec: Path
) -> tuple[psutil.Process, asyncio.Future[Forked]]:
    """A launch whose request is sent to a stopped server: queued, not answered yet."""
    server = _server(zygote)
    os.kill(server.pid, signal.SIGSTOP)  # the fixture lets it go on (SIGCONT) at the end
    launching = asyncio.ensure_future(zygote.launch(spec, spec.parent, clean_env()))
    await wait_until(lambda: bool(zygote._asked), 10, "the request sent")
    return server, launching


async def _ended(forked: Forked) -> tuple[int, str]:
    errors = await asyncio.wait_for(forked.stderr.read(), 30 * TIME_FACTOR)
    return await asyncio.wait_for(forked.wait(), 30 * TIME_FACTOR), errors.decode()


async def test_launches_wait_for_room_on_a_full_socket_rather_than_fail(tmp_path: Path) -> None:
    """20 agents starting at once on a busy server overflow its socket's queue (EAGAIN)."""
    async with _zygote() as zygote:
        server = _server(zygote)
        os.kill(server.pid, signal.SIGSTOP)  # it reads no request for now
        launches = [
            asyncio.ensure_future(
                zygote.launch(tmp_path / "missing.json", tmp_path, clean_env(PAD=PAD))
            )
            for _ in range(MORE)
        ]
        await wait_until(lambda: len(zygote._asked) == MORE, 10, "every request under way")
        assert not [t for t in launches if t.done()]  # none failed (EAGAIN): they wait
        assert zygote._room is not None  # for room on the socket
        os.kill(server.pid, signal.SIGCONT)
        forked = await asyncio.wait_for(asyncio.gather(*launches), 60 * TIME_FACTOR)
        ended = [await _ended(f) for f in forked]
    assert len({f.pid for f in forked}) == MORE
    assert all(code == 1 and "missing.json" in errors for code, errors in ended), ended


@needs("ray")
async def test_a_launch_whose_zygote_died_starts_its_worker_cold_and_runs_it_once(
    tmp_path: Path,
) -> None:
    """Killed before it read the request, or after it forked (the worker, held, never runs)."""
    from taskloom.remote.actor import _RemoteAgent

    # Before it read the request: stopped, then killed.
    async with _zygote() as zygote:
        server = _server(zygote)
        os.kill(server.pid, signal.SIGSTOP)
        agent = _RemoteAgent(zygote=zygote)
        launching = asyncio.ensure_future(
            agent._launch(tmp_path / "missing.json", tmp_path, clean_env())
        )
        await wait_until(lambda: bool(zygote._asked), 10, "the request sent")
        os.kill(server.pid, signal.SIGKILL)
        proc = await asyncio.wait_for(launching, 60 * TIME_FACTOR)
        assert not isinstance(proc, Forked)
        errors = (await asyncio.wait_for(proc.stderr.read(), 30 * TIME_FACTOR)).decode()
        assert await asyncio.wait_for(proc.wait(), 30 * TIME_FACTOR) != 0
        assert "missing.json" in errors, errors

    # After it forked, before its answer was read: both wait on the socket, as the loop is
    # held from the request on (not a wait for an event: the loop is held on purpose, bounded).
    fifo = tmp_path / "spec.json"
    os.mkfifo(fifo)
    async with _zygote() as zygote:
        server = _server(zygote)
        os.kill(server.pid, signal.SIGSTOP)
        agent = _RemoteAgent(zygote=zygote)
        launching = asyncio.ensure_future(agent._launch(fifo, tmp_path, clean_env()))
        await wait_until(lambda: bool(zygote._asked), 10, "the request sent")
        os.kill(server.pid, signal.SIGCONT)
        deadline = time.monotonic() + 30 * TIME_FACTOR
        while not (forked := _live_children(server)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert forked, "the server forked no worker"
        server.kill()
        while _alive(server) and time.monotonic() < deadline:  # not reaped: asyncio's child
            time.sleep(0.01)
        proc = await asyncio.wait_for(launching, 60 * TIME_FACTOR)
        assert not isinstance(proc, Forked)
        # The forked one ends without opening the spec; the cold one is still reading it.
        await wait_until(lambda: not _alive(forked[0]), 30, "the held worker's end")
        await _feed(fifo, b"not json")
        errors = (await asyncio.wait_for(proc.stderr.read(), 30 * TIME_FACTOR)).decode()
        assert await asyncio.wait_for(proc.wait(), 30 * TIME_FACTOR) != 0
        assert "JSONDecodeError" in errors, errors


async def test_a_worker_whose_zygote_died_says_its_own_exit_code(tmp_path: Path) -> None:
    fifo = tmp_path / "spec.json"
    os.mkfifo(fifo)
    async with _zygote() as zygote:
        forked = await asyncio.wait_for(zygote.launch(fifo, tmp_path, clean_env()), 60)
        _server(zygote).kill()
        await wait_until(lambda: not zygote.alive, 30, "the server's loss seen")
        await _feed(fifo, b"not json")  # the worker fails: exit code 1
        code, errors = await _ended(forked)
    assert code == 1 and "JSONDecodeError" in errors, (code, errors)


async def test_a_launched_worker_is_in_its_own_session_and_a_stop_at_once_reaches_it(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "spec.json"
    os.mkfifo(fifo)
    async with _zygote() as zygote:
        for _ in range(3):
            forked = await asyncio.wait_for(zygote.launch(fifo, tmp_path, clean_env()), 60)
            assert os.getpgid(forked.pid) == forked.pid
            os.killpg(forked.pid, signal.SIGTERM)  # as its actor's stop does
            code, _ = await _ended(forked)
            assert code == -signal.SIGTERM


async def test_a_cancelled_launch_runs_nothing_and_keeps_nothing(tmp_path: Path) -> None:
    """Its worker, forked after the cancel, ends held; nothing of it stays in the zygote's
    books (where a pid used again would have found an old exit code)."""
    fifo = tmp_path / "spec.json"
    os.mkfifo(fifo)
    async with _zygote() as zygote:
        server, launching = await _launch_unanswered(zygote, fifo)
        launching.cancel()
        with pytest.raises(asyncio.CancelledError):
            await launching
        os.kill(server.pid, signal.SIGCONT)
        # The next one runs, and waits on the FIFO; the first, forked before it, is reaped
        # (had it run, it would wait there too, for ever).
        second = await asyncio.wait_for(zygote.launch(fifo, tmp_path, clean_env()), 60)
        await wait_until(lambda: [c.pid for c in server.children()] == [second.pid], 30)
        # The first's end was said before this answer (the server reaped it before it read
        # this request).
        after = await zygote.launch(tmp_path / "missing.json", tmp_path, clean_env())
        assert (await _ended(after))[0] == 1
        assert zygote._exited == {} and list(zygote._running.values()) == [second]
        os.killpg(second.pid, signal.SIGTERM)
        assert (await _ended(second))[0] == -signal.SIGTERM


async def test_a_launch_under_way_when_the_zygote_is_closed_fails_rather_than_waits(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "spec.json"
    os.mkfifo(fifo)
    async with _zygote() as zygote:
        server, launching = await _launch_unanswered(zygote, fifo)
        closing = asyncio.ensure_future(zygote.close())
        with pytest.raises(ZygoteError, match="let go"):
            await asyncio.wait_for(launching, 10 * TIME_FACTOR)
        os.kill(server.pid, signal.SIGCONT)
        await asyncio.wait_for(closing, 30 * TIME_FACTOR)
