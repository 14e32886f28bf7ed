"""Two processes sharing a session's mailbox: rows through the store, a datagram to wake."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import TIME_FACTOR
from taskloom.settings import db_path
from taskloom.store import Store
from taskloom.tasks.mailbox import Mailbox
from taskloom.tasks.wakeup import WakeupListener, ping, unix_address, wakeup_path

SESSION = "s-ipc"

#: The other process: it serves "alice", answers each message to the lead, and stops on "stop".
ECHO = """
import asyncio, sys
from pathlib import Path
from taskloom.settings import db_path
from taskloom.store import Store
from taskloom.tasks.mailbox import Mailbox
from taskloom.tasks.wakeup import WakeupListener, ping, wakeup_path

home, session = Path(sys.argv[1]), sys.argv[2]

async def main():
    store = Store(db_path(home))
    box = Mailbox(store, session, serves=lambda r: r == "alice",
                  elsewhere=lambda r: ping(wakeup_path(home, session, r)))
    async with WakeupListener(wakeup_path(home, session, "alice"), box.replay):
        box.replay()
        print("ready", flush=True)
        while True:
            assert await box.wait(30, "alice"), "no message within 30 s"
            for letter in box.take("alice"):
                box.ack([letter.id])
                if letter.body == "stop":
                    store.close()
                    return
                box.post(recipient="lead", sender="alice", kind="message",
                         body="echo:" + letter.body, commit=True)

asyncio.run(main())
"""


def answers(box: Mailbox) -> list[str]:
    """The lead takes what came, and acknowledges it (it reached its transcript)."""
    letters = box.take("lead")
    box.ack(letter.id for letter in letters)
    return [letter.body for letter in letters]


def lead_box(store: Store, home: Path) -> Mailbox:
    return Mailbox(
        store,
        SESSION,
        serves=lambda r: r == "lead",
        elsewhere=lambda r: ping(wakeup_path(home, SESSION, r)),
    )


async def test_messages_go_both_ways_between_two_processes_once_each_and_in_order(
    home: Path,
) -> None:
    store = Store(db_path(home))
    box = lead_box(store, home)
    # Sent before the other process listens: waiting in the store, not lost.
    box.post(recipient="alice", sender="lead", kind="message", body="early", commit=True)
    child = subprocess.Popen(
        [sys.executable, "-c", ECHO, str(home), SESSION],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        async with WakeupListener(wakeup_path(home, SESSION, "lead"), box.replay):
            assert child.stdout is not None
            assert await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 20) == "ready\n"
            got: list[str] = []
            took: list[float] = []
            for n in range(30):
                sent = time.perf_counter()
                box.post(
                    recipient="alice", sender="lead", kind="message", body=f"m{n}", commit=True
                )
                # Woken by the other process's ping: no polling on this side either.
                assert await box.wait(10, "lead")
                took.append(time.perf_counter() - sent)
                got += answers(box)
            while len(got) < 31:  # the early one's answer may come with the first
                assert await box.wait(10, "lead")
                got += answers(box)
            assert got[0] == "echo:early"
            assert got[1:] == [f"echo:m{n}" for n in range(30)]
            box.post(recipient="alice", sender="lead", kind="message", body="stop", commit=True)
            assert await asyncio.to_thread(child.wait, 20) == 0
        assert sorted(took)[len(took) // 2] < 0.1 * TIME_FACTOR  # a round trip takes milliseconds
        # The lead's mailbox never held alice's rows; the store has every row delivered once.
        assert not box.has_pending("alice")
        assert store.undelivered_mail(SESSION) == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        store.close()


async def test_a_listener_replaces_a_dead_ones_file_but_not_a_live_one(home: Path) -> None:
    path = wakeup_path(home, SESSION, "bob")
    woken = asyncio.Event()
    async with WakeupListener(path, woken.set):
        with pytest.raises(OSError):
            async with WakeupListener(path, lambda: None):
                pass
        assert ping(path)
        await asyncio.wait_for(woken.wait(), 5)
    assert not path.exists()
    assert not ping(path)  # nobody listens: the row waits in the store
    # A file left by a process that died (no listener behind it) is taken over.
    import socket

    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    with unix_address(path) as address:
        stale.bind(address)
    stale.close()
    assert path.exists() and not ping(path)
    woken.clear()
    async with WakeupListener(path, woken.set):
        assert ping(path)
        await asyncio.wait_for(woken.wait(), 5)
    assert not path.exists()


async def test_a_path_longer_than_a_socket_address_still_works(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 150)
    a, b = wakeup_path(deep, "s", "alice@t"), wakeup_path(deep, "s", "bob@t")
    assert a != b and a.parent == b.parent == deep / "wake"
    assert wakeup_path(deep, "s2", "alice@t") != a
    assert len(os.fsencode(a)) > 108
    woken = asyncio.Event()
    async with WakeupListener(a, woken.set):
        assert ping(a)
        await asyncio.wait_for(woken.wait(), 5)
