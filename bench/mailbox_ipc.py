"""Benchmark: a message to another process and its answer, through the shared mailbox.

The lead (this process) posts a row for "alice" and pings her wake-up socket; the other
process, woken, takes the row from the store, acknowledges it and answers the lead the same
way. This is the path a teammate in its own pane uses. Measured per round trip over
``--messages`` messages, with, from the same run, the floor: the same ping-pong of bare
datagrams between the two processes, no store.

Targets: round trip p50 <= 20 ms, p99 <= 100 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from taskloom.settings import db_path
from taskloom.store import Store
from taskloom.tasks.mailbox import Mailbox
from taskloom.tasks.wakeup import WakeupListener, ping, wakeup_path

SESSION = "bench-ipc"

CHILD = """
import asyncio, sys
from pathlib import Path
from taskloom.settings import db_path
from taskloom.store import Store
from taskloom.tasks.mailbox import Mailbox
from taskloom.tasks.wakeup import WakeupListener, ping, wakeup_path

home, session, bare = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "bare"

async def main():
    store = Store(db_path(home))
    box = Mailbox(store, session, serves=lambda r: r == "alice",
                  elsewhere=lambda r: ping(wakeup_path(home, session, r)))
    woken = asyncio.Event()
    lead = wakeup_path(home, session, "lead")
    async with WakeupListener(wakeup_path(home, session, "alice"),
                              woken.set if bare else box.replay):
        print("ready", flush=True)
        while True:
            if bare:
                await woken.wait()
                woken.clear()
                ping(lead)
                continue
            await box.wait(60, "alice")
            for letter in box.take("alice"):
                box.ack([letter.id])
                if letter.body == "stop":
                    return
                box.post(recipient="lead", sender="alice", kind="message",
                         body=letter.body, commit=True)

asyncio.run(main())
"""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _rounds(home: Path, count: int, bare: bool) -> list[float]:
    store = Store(db_path(home))
    box = Mailbox(
        store,
        SESSION,
        serves=lambda r: r == "lead",
        elsewhere=lambda r: ping(wakeup_path(home, SESSION, r)),
    )
    woken = asyncio.Event()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(home), SESSION, "bare" if bare else "mailbox"],
        stdout=subprocess.PIPE,
        text=True,
    )
    alice = wakeup_path(home, SESSION, "alice")
    times = []
    try:
        listener = WakeupListener(
            wakeup_path(home, SESSION, "lead"), woken.set if bare else box.replay
        )
        async with listener:
            assert child.stdout is not None
            await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 30)
            for n in range(count):
                started = time.perf_counter()
                if bare:
                    woken.clear()
                    ping(alice)
                    await asyncio.wait_for(woken.wait(), 10)
                else:
                    box.post(
                        recipient="alice", sender="lead", kind="message", body=str(n), commit=True
                    )
                    await box.wait(10, "lead")
                    box.ack(letter.id for letter in box.take("lead"))
                times.append((time.perf_counter() - started) * 1000)
            if not bare:
                box.post(recipient="alice", sender="lead", kind="message", body="stop", commit=True)
                await asyncio.to_thread(child.wait, 30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        store.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        floor = asyncio.run(_rounds(home / "bare", args.messages, bare=True))
        mailbox = asyncio.run(_rounds(home / "mailbox", args.messages, bare=False))
    p50, p99 = statistics.median(mailbox), _percentile(mailbox, 0.99)
    print(f"messages: {args.messages}")
    print(f"datagram_floor_ms_p50: {statistics.median(floor):.2f}")
    print(f"datagram_floor_ms_p99: {_percentile(floor, 0.99):.2f}")
    print(f"round_trip_ms_p50: {p50:.2f}")
    print(f"round_trip_ms_p99: {p99:.2f}")
    print(f"round_trip_ms_max: {max(mailbox):.2f}")
    print(f"{'PASS' if p50 <= 20 else 'FAIL'}: round trip p50 {p50:.2f} ms (target <= 20 ms)")
    print(f"{'PASS' if p99 <= 100 else 'FAIL'}: round trip p99 {p99:.2f} ms (target <= 100 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
