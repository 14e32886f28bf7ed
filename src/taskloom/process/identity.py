"""Telling whether a pid is still the process we recorded.

A pid alone can be reused. We record the process's start time as the kernel counts it — clock
ticks since boot, from ``/proc/<pid>/stat`` — plus the boot's id. Unlike a wall-clock start
time (what ``psutil.create_time`` derives), neither moves when the system clock is stepped
(NTP, a VM resume, ``date -s``), and a record from before a reboot never matches anything.
"""

from __future__ import annotations

import functools
import os

_TOLERANCE_S = 0.005


@functools.cache
def boot_id() -> str:
    """An id of the current boot (random per boot on Linux)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        import psutil  # only where /proc has no boot id

        return f"boot-{psutil.boot_time():.0f}"


@functools.cache
def _ticks_per_second() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return 100


def process_start_time(pid: int) -> float | None:
    """Seconds from boot to the start of ``pid``, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return _psutil_start(pid)
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[19]) / _ticks_per_second()  # field 22, starttime


def zombie_status(pid: int, start: float | None) -> int | None:
    """The wait status of ``pid`` if it has ended and is not reaped yet (a zombie); else None.

    ``start``: its start (seconds after boot), to tell it from a later process of that pid.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 50 or fields[0] != b"Z":
        return None
    if start is not None and abs(int(fields[19]) / _ticks_per_second() - start) > _TOLERANCE_S:
        return None  # field 22, starttime: another process
    return int(fields[49])  # field 52, exit_code


def _psutil_start(pid: int) -> float | None:
    import psutil  # only where /proc cannot be read

    try:
        return psutil.Process(pid).create_time() - psutil.boot_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


def is_same_process(pid: int, start: float, boot: str) -> bool:
    """Tell whether ``pid`` is alive and is the process recorded as (``start``, ``boot``).

    A zombie (ended, not reaped yet by its parent) is not alive: what it owned is orphaned.
    """
    if boot != boot_id():
        return False
    actual = process_start_time(pid)
    if actual is None or abs(actual - start) >= _TOLERANCE_S:
        return False
    return zombie_status(pid, None) is None
