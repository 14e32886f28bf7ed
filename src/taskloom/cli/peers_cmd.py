"""``taskloom peers``: the sessions SendMessage can reach (``uds:`` and ``bridge:``)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from taskloom.agents.list_peers import Peer, find_peers


def list_peers(*, as_json: bool = False) -> int:
    """Print every listening session of this machine and of the configured Ray cluster.

    The cluster is the one the settings of the current directory name (``remote.address``,
    else ``RAY_ADDRESS``); with none, only this machine's sessions are listed.

    Returns:
        The exit status: 0, or 1 when the cluster could not be listed (what could is printed).
    """
    from taskloom.errors import UserError
    from taskloom.settings import load_settings

    try:
        settings = load_settings(Path.cwd())
    except UserError as exc:
        print(f"taskloom peers: {exc}", file=sys.stderr)
        return 1
    peers, note = asyncio.run(_collect(settings))
    if as_json:
        rows = [{"address": p.address, "session_id": p.session_id, "host": p.host, "cwd": p.cwd}
                for p in peers]  # fmt: skip
        print(json.dumps({"peers": rows, **({"error": note} if note else {})}, indent=2))
    else:
        print("\n".join(p.line() for p in peers) if peers else "No peers found.")
        if note is not None:
            print(f"taskloom peers: bridge: peers not listed: {note}", file=sys.stderr)
    return 1 if note is not None else 0


async def _collect(settings: dict[str, object]) -> tuple[list[Peer], str | None]:
    from taskloom.remote.cluster import Cluster, configured_address

    if configured_address(settings, os.environ) is None:
        return await find_peers(None, settings, os.environ, None)
    cluster = Cluster(settings)
    try:
        return await find_peers(None, settings, os.environ, lambda: cluster)
    finally:
        await cluster.close()
