"""The Ray cluster a session's remote agents run on: found, reached, or started here.

Which: ``RAY_ADDRESS``, else the setting ``remote.address`` (a ``host:port`` of a cluster's
head, or ``auto`` for the one running on this machine; a ``ray://`` client address is refused,
since Ray Client cannot stream). With neither, a local Ray is started on first use (as many
CPUs as the setting ``remote.localCpus``, else the machine's), and stopped with the session.

Reaching a cluster that is not there must not hang the session (Ray itself retries for a
minute or more): the address is probed first (a TCP connection, bounded), and the connection
itself is bounded too, in a daemon thread of its own (Ray's calls block; one that never
returns must not keep the process from exiting).

A local Ray is recorded before it starts and does not outlive the session, however the session
ends (:mod:`taskloom.remote.local`). What Ray says (its notices, its warnings) goes to the
session's ``ray.log``, not to our stderr; its handler of fatal signals, which would print a
stack dump there on a plain SIGTERM, is not installed in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from taskloom._dataclass import dataclass
from taskloom.errors import TaskloomError
from taskloom.process.registry import ProcessRecorder
from taskloom.remote.local import LocalRay
from taskloom.settings import ensure_private_dir

log = logging.getLogger(__name__)
#: What Ray's driver printed, under Ray's loggers: it goes where theirs go (see _RayLog).
_RAY_SAID = logging.getLogger("ray.driver_output")

#: Longest wait for a TCP connection to the cluster's address.
PROBE_TIMEOUT_S = 5.0
#: Longest wait for a local Ray to start.
CONNECT_TIMEOUT_S = 60.0
#: Longest wait for Ray to connect to a cluster once its address answers.
ADDRESS_TIMEOUT_S = 10.0
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
        tag: The tag a Ray started here is recorded by (its processes carry it).
        local_dir: The directory of a Ray started here (removed with it).
    """

    address: str
    started_locally: bool
    seconds: float
    cpus: int = 0
    tag: str | None = None
    local_dir: str | None = None


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

    def __init__(
        self,
        settings: Mapping[str, Any],
        env: Mapping[str, str] | None = None,
        *,
        recorder: ProcessRecorder | None = None,
        log_path: Path | None = None,
    ) -> None:
        """Use ``settings`` (``remote``) and ``env`` (``RAY_ADDRESS``; default: os.environ).

        ``recorder``: where a local Ray is recorded before it starts (None: unrecorded).
        ``log_path``: where what Ray says is written (None: dropped).
        """
        self.settings = settings
        self.env = os.environ if env is None else env
        self.recorder = recorder
        self.log_path = log_path
        self.connected: Connected | None = None
        self._local: LocalRay | None = None
        self._ray_log: _RayLog | None = None
        self._failed: ClusterError | None = None
        self._lock = asyncio.Lock()
        self._release = threading.Event()
        self._owner: threading.Thread | None = None

    async def connect(self) -> Connected:
        """Reach the cluster (once; later calls return the same connection, or error).

        Raises:
            ClusterError: It cannot be reached or started; the message names the address.
        """
        async with self._lock:
            if self._failed is not None:
                raise self._failed  # a Ray that was asked and hung is not asked again
            if self.connected is None:
                try:
                    self.connected = await self._connect()
                except ClusterError as exc:
                    # A local Ray that did not start: what it started, and its files, go now.
                    local, self._local = self._local, None
                    if local is not None:
                        await local.close()
                    if "did not answer within" in str(exc) and "Ray at" in str(exc):
                        self._failed = exc
                    raise
            return self.connected

    @property
    def address(self) -> str | None:
        """The cluster's address as configured (None: a local Ray, started on first use)."""
        return configured_address(self.settings, self.env)

    async def _connect(self) -> Connected:
        address = configured_address(self.settings, self.env)
        began = time.monotonic()
        if address is not None and address.startswith("ray://"):
            raise ClusterError(
                f"remote agents: {address}: Ray Client (ray://) cannot stream an agent's "
                "progress; run taskloom on a machine of the cluster and give the head's "
                "address (RAY_ADDRESS=HEAD:6379)"
            )
        if address is not None:
            where = endpoint(address)
            if where is not None:
                await probe(address, *where)
        remote = (self.settings.get("remote") or {}) if isinstance(self.settings, dict) else {}
        cpus = remote.get("localCpus") if isinstance(remote, dict) else None

        local_cpus = int(cpus) if cpus else os.cpu_count() or 1
        ray_log = self._ray_log = self._ray_log or _RayLog(self.log_path)
        local = None
        if address is None:
            local = self._local = LocalRay(self.recorder, ray_log.file)
            try:
                local.open()  # recorded, and guarded, before anything of it starts
            except OSError as exc:
                raise ClusterError(f"remote agents: cannot start a local Ray: {exc}") from None

        def init() -> None:
            _ray_init(address, local, local_cpus, ray_log)

        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        release = self._release

        def own_ray() -> None:
            outcome: BaseException | None = None
            try:
                init()
            except BaseException as exc:  # handed to the loop, which raises it
                outcome = exc
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits now
                loop.call_soon_threadsafe(_settle, done, outcome)
            if outcome is None:
                # Ray's processes die with the thread that started them (their parent-death
                # signal is the thread's): this thread lives until the session lets go.
                release.wait()

        # A thread of its own, a daemon: a ray.init that never returns (an address that
        # accepts connections but is no Ray) must not keep the process from exiting.
        self._owner = threading.Thread(target=own_ray, name="taskloom-ray", daemon=True)
        self._owner.start()
        bound = CONNECT_TIMEOUT_S if address is None else ADDRESS_TIMEOUT_S
        try:
            await asyncio.wait_for(asyncio.shield(done), bound)
        except TimeoutError:
            raise ClusterError(
                f"remote agents: Ray at {address or 'a new local cluster'} did not answer "
                f"within {bound:.0f} s" + (_auth_hint(self.env) if address else "")
            ) from None
        except ModuleNotFoundError as exc:
            raise ClusterError(f"remote agents need Ray ({exc}): install taskloom[ray]") from None
        except Exception as exc:  # Ray raises many kinds; each means the same here
            what = f"the Ray cluster at {address}" if address else "a local Ray"
            raise ClusterError(f"remote agents: could not reach {what}: {exc}") from None
        seconds = time.monotonic() - began
        if address is None:
            log.info("remote agents: started a local Ray in %.1f s", seconds)
        if local is None:
            return Connected(address or "local", False, seconds)
        return Connected("local", True, seconds, local_cpus, local.tag, str(local.dir))

    async def close(self) -> None:
        """Let go of the cluster (a Ray started here is stopped, and what it left removed)."""
        connected, self.connected = self.connected, None
        local, self._local = self._local, None
        if connected is not None:

            def shutdown() -> None:
                import ray

                ray.shutdown()

            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(None, shutdown)
        self._release.set()  # its owning thread may end now
        if local is not None:
            await local.close()
        ray_log, self._ray_log = self._ray_log, None
        if ray_log is not None:
            ray_log.close()


def _ray_init(address: str | None, local: LocalRay | None, cpus: int, ray_log: _RayLog) -> None:
    """``ray.init``: the cluster at ``address``, or the ``local`` Ray with ``cpus`` CPUs."""
    import ray

    ray_log.attach()
    options: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "configure_logging": False,
    }
    if local is None:
        options["address"] = address
        # This taskloom, for the cluster's workers (uploaded once for the session: a
        # directory can only be given to Ray here, for the whole job).
        options["runtime_env"] = {"py_modules": [str(Path(__file__).resolve().parents[1])]}
        ray.init(**options)
    else:
        ray.init(**options, **local.options(), num_cpus=cpus)
    ray_log.attached()
    _keep_ray_off_stdout()


def _settle(future: asyncio.Future[None], exc: BaseException | None) -> None:
    if future.done():
        return  # given up on already
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)


class _RayLog:
    """Where what Ray says goes: the session's ``ray.log`` (see the module docstring).

    Ray's loggers are under ``ray``, which has a handler of Ray's writing to stderr from the
    moment Ray is imported, and none at all (stderr again, Python's last resort) from the
    moment ``ray.init`` begins. Ours is set on ``ray`` and, for what ``ray.init`` says
    meanwhile, on ``ray._private``, where its notices come from.
    """

    _LOGGERS = ("ray", "ray._private")

    def __init__(self, path: Path | None) -> None:
        self.file = None
        if path is not None:
            with contextlib.suppress(OSError):  # then it is dropped, not printed
                ensure_private_dir(path.parent)
                # Never through a link planted where the log goes (the session's state).
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(path, flags, 0o600)
                self.file = os.fdopen(fd, "a", encoding="utf-8", buffering=1)
        self._handler: logging.Handler | None = None
        self._theirs: dict[str, tuple[list[logging.Handler], bool]] = {}

    def attach(self) -> None:
        """Before ``ray.init``: Ray's records here, and no fatal-signal dump from it."""
        # Read when the driver's core worker starts (the environment variable of that name
        # is read when Ray is imported, which may have happened already). A private constant:
        # a Ray without it keeps its handler, and only prints more.
        with contextlib.suppress(ImportError):
            import ray._private.ray_constants as constants

            constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
        handler: logging.Handler = (
            logging.StreamHandler(self.file) if self.file is not None else logging.NullHandler()
        )
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self._handler = handler
        for name in self._LOGGERS:
            logger = logging.getLogger(name)
            self._theirs[name] = (list(logger.handlers), logger.propagate)
        self.attached()

    def attached(self) -> None:
        """Ours again, where ``ray.init`` has cleared them."""
        for name in self._LOGGERS:
            logger = logging.getLogger(name)
            if self._handler is not None and logger.handlers != [self._handler]:
                logger.handlers[:] = [self._handler]
            logger.propagate = False

    def close(self) -> None:
        if self._handler is not None:
            for name, (handlers, propagate) in self._theirs.items():
                logger = logging.getLogger(name)
                if logger.handlers == [self._handler]:
                    logger.handlers[:] = handlers
                    logger.propagate = propagate
            self._handler = None
        if self.file is not None:
            with contextlib.suppress(OSError):
                self.file.close()
            self.file = None


def _keep_ray_off_stdout() -> None:
    """Route what Ray prints of its cluster's warnings to the session's ``ray.log``.

    Ray's driver prints the raylet's warnings (too many workers started, a node's memory, a
    worker that died) to ``sys.stdout`` whatever ``log_to_driver`` says: in print and
    stream-json mode stdout is the protocol, which one stray line breaks. Ray has no setting
    for it; its printer is replaced, if it is where this version of Ray keeps it. (What it
    means to a remote agent, its task says.)
    """
    import ray

    module = getattr(getattr(ray, "_private", None), "worker", None)
    if module is None or not hasattr(module, "print_to_stdstream"):
        return

    def to_log(data: dict[str, Any], ignore_prefix: bool = False) -> None:
        lines = data.get("lines") or []
        for line in lines:
            _RAY_SAID.warning("ray (%s): %s", data.get("pid", "?"), line)

    module.print_to_stdstream = to_log


def _auth_hint(env: Mapping[str, str]) -> str:
    """Why a cluster may not answer: it wants a token Ray does not send unless told to."""
    if env.get("RAY_AUTH_MODE", "").lower() == "token":
        return ""
    # Ray sends its token to an address it is given only in token mode (its own rule).
    return (
        "; a Ray cluster with token authentication (Ray's default) does not answer a driver"
        " without its token: for one, set RAY_AUTH_MODE=token (the token in ~/.ray/auth_token,"
        " RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN)"
    )


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
    "ADDRESS_TIMEOUT_S",
    "CONNECT_TIMEOUT_S",
    "Cluster",
    "ClusterError",
    "Connected",
    "configured_address",
    "endpoint",
    "probe",
]
