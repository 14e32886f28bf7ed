"""The Ray cluster a session's remote agents run on: found, reached, or started here.

Which: ``RAY_ADDRESS``, else the setting ``remote.address`` (a ``ray://host:port`` client
address, a ``host:port`` of a cluster's head, or ``auto`` for the one running on this
machine). With neither, a local Ray is started on first use (as many CPUs as the setting
``remote.localCpus``, else the machine's), and stopped with the session.

Reaching a cluster that is not there must not hang the session (Ray itself retries for a
minute or more): the address is probed first (a TCP connection, bounded), and the connection
itself is bounded too. Ray's calls block; they run in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taskloom.errors import TaskloomError

log = logging.getLogger(__name__)

#: Longest wait for a TCP connection to the cluster's address.
PROBE_TIMEOUT_S = 5.0
#: Longest wait for Ray to connect (or start) once the address answers.
CONNECT_TIMEOUT_S = 60.0
_CLIENT_PORT = 10001
_HEAD_PORT = 6379


class ClusterError(TaskloomError):
    """The cluster could not be reached or started (the message says which and why)."""


@dataclass(frozen=True)
class Connected:
    """How the session reached its cluster.

    Attributes:
        address: What it connected to (``local`` for a Ray started here).
        started_locally: Whether this session started it (and stops it).
        seconds: What connecting (or starting) took.
        cpus: The CPUs of a Ray started here (0 for a cluster's).
    """

    address: str
    started_locally: bool
    seconds: float
    cpus: int = 0


def configured_address(settings: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """``RAY_ADDRESS``, else the setting ``remote.address``; None: start one locally."""
    address = env.get("RAY_ADDRESS") or (settings.get("remote") or {}).get("address")
    return str(address).strip() or None if address else None


def endpoint(address: str) -> tuple[str, int] | None:
    """The host and port ``address`` names (None for ``auto``)."""
    if address == "auto":
        return None
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://").rstrip("/")
    host, _, port = rest.rpartition(":")
    if not host:
        host, port = rest, ""
    try:
        return host, int(port) if port else (_CLIENT_PORT if client else _HEAD_PORT)
    except ValueError:
        raise ClusterError(
            f"remote agents: Ray address {address!r}: the port is not a number"
        ) from None


class Cluster:
    """The session's connection to Ray (made on first use; see the module docstring)."""

    def __init__(self, settings: Mapping[str, Any], env: Mapping[str, str] | None = None) -> None:
        """Use ``settings`` (``remote``) and ``env`` (``RAY_ADDRESS``; default: os.environ)."""
        self.settings = settings
        self.env = os.environ if env is None else env
        self.connected: Connected | None = None
        self._lock = asyncio.Lock()

    async def connect(self) -> Connected:
        """Reach the cluster (once; later calls return the same connection).

        Raises:
            ClusterError: It cannot be reached or started; the message names the address.
        """
        async with self._lock:
            if self.connected is None:
                self.connected = await self._connect()
            return self.connected

    async def _connect(self) -> Connected:
        address = configured_address(self.settings, self.env)
        began = time.monotonic()
        if address is not None:
            where = endpoint(address)
            if where is not None:
                await probe(address, *where)
        remote = (self.settings.get("remote") or {}) if isinstance(self.settings, dict) else {}
        cpus = remote.get("localCpus") if isinstance(remote, dict) else None

        local_cpus = int(cpus) if cpus else os.cpu_count() or 1

        def init() -> None:
            import ray

            options: dict[str, Any] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "configure_logging": False,
            }
            if address is not None:
                options["address"] = address
            else:
                options["address"] = "local"
                options["num_cpus"] = local_cpus
            ray.init(**options)
            _keep_ray_off_stdout()

        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(None, init), CONNECT_TIMEOUT_S)
        except TimeoutError:
            raise ClusterError(
                f"remote agents: Ray at {address or 'a new local cluster'} did not answer "
                f"within {CONNECT_TIMEOUT_S:.0f} s"
            ) from None
        except Exception as exc:  # Ray raises many kinds; each means the same here
            what = f"the Ray cluster at {address}" if address else "a local Ray"
            raise ClusterError(f"remote agents: could not reach {what}: {exc}") from None
        seconds = time.monotonic() - began
        if address is None:
            log.info("remote agents: started a local Ray in %.1f s", seconds)
        return Connected(
            address or "local", address is None, seconds, local_cpus if address is None else 0
        )

    async def close(self) -> None:
        """Let go of the cluster (a Ray started here is stopped)."""
        connected, self.connected = self.connected, None
        if connected is None:
            return

        def shutdown() -> None:
            import ray

            # A Ray started here leaves its session's directory (logs, sockets) behind: it
            # is this session's to remove. Ray has no public way to name it.
            node = getattr(getattr(ray, "_private", None), "worker", None)
            node = getattr(node, "_global_node", None)
            session_dir = temp_dir = None
            if connected.started_locally and node is not None:
                with contextlib.suppress(Exception):
                    session_dir = Path(node.get_session_dir_path())
                    temp_dir = Path(node.get_temp_dir_path())
            ray.shutdown()
            if session_dir is not None and temp_dir is not None:
                _remove_session_dir(session_dir, temp_dir)

        with contextlib.suppress(Exception):
            await asyncio.get_running_loop().run_in_executor(None, shutdown)


def _keep_ray_off_stdout() -> None:
    """Route what Ray prints of its cluster's warnings to our log (stderr), not stdout.

    Ray's driver prints the raylet's warnings (too many workers started, a node's memory) to
    ``sys.stdout`` whatever ``log_to_driver`` says: in print and stream-json mode stdout is
    the protocol, which one stray line breaks. Ray has no setting for it; its printer is
    replaced, if it is where this version of Ray keeps it.
    """
    import ray

    module = getattr(getattr(ray, "_private", None), "worker", None)
    if module is None or not hasattr(module, "print_to_stdstream"):
        return

    def to_log(data: dict[str, Any], ignore_prefix: bool = False) -> None:
        lines = data.get("lines") or []
        for line in lines:
            log.warning("ray (%s): %s", data.get("pid", "?"), line)

    module.print_to_stdstream = to_log


def _remove_session_dir(session_dir: Path, temp_dir: Path) -> None:
    """Remove a local Ray's session directory; its temp directory too if nothing else is left."""
    import shutil

    shutil.rmtree(session_dir, ignore_errors=True)
    latest = temp_dir / "session_latest"
    if latest.is_symlink() and not latest.exists():
        latest.unlink(missing_ok=True)  # it named ours
    with contextlib.suppress(OSError):
        temp_dir.rmdir()  # only when empty: another Ray's sessions stay


async def probe(address: str, host: str, port: int) -> None:
    """A TCP connection to ``host:port``, bounded: a cluster that is not there says so now."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), PROBE_TIMEOUT_S)
    except TimeoutError:
        raise ClusterError(
            f"remote agents: the Ray cluster at {address} did not answer within "
            f"{PROBE_TIMEOUT_S:.0f} s ({host}:{port})"
        ) from None
    except (OSError, socket.gaierror) as exc:
        raise ClusterError(
            f"remote agents: cannot reach the Ray cluster at {address} ({host}:{port}: "
            f"{exc.strerror or exc})"
        ) from None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


__all__ = [
    "CONNECT_TIMEOUT_S",
    "Cluster",
    "ClusterError",
    "Connected",
    "configured_address",
    "endpoint",
    "probe",
]
