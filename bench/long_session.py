"""Benchmark: what prompt caching saves on a long session, cached and uncached in one run.

The session of tests/cache_session.py (30 main-thread requests with tool calls, two
background agents of 12 requests each, a background shell, a fork) runs twice through
``taskloom -p`` against a local fake Anthropic server that applies the API's caching rules
(tests/fake_cache.py): once as shipped (cache breakpoints, five-minute TTL) and once with
``DISABLE_PROMPT_CACHING=1``. Each request's usage, as the server reported it, is priced at
the price table's rates for the model used (cache reads 0.1x input, five-minute writes
1.25x, one-hour writes 2x); the session's own ``total_cost_usd`` is printed beside it.

Target: the cached session costs at most 25 % of the uncached one.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import add_bytecode_flag, child_env

from cache_session import MODEL, Run, read_share, run_session
from taskloom.messages import Usage
from taskloom.models.pricing import list_price

TARGET = 0.25


def priced(run: Run) -> tuple[float, dict[str, int]]:
    """What the run's requests cost at list prices, and their summed token counts."""
    price = list_price(MODEL)
    assert price is not None, MODEL
    cost = 0.0
    totals: dict[str, int] = {}
    for _, usage in run.served:
        cost += price.cost(Usage.from_dict(usage))
        for key, value in usage.items():
            if isinstance(value, int):
                totals[key] = totals.get(key, 0) + value
    return cost, totals


def report(name: str, run: Run) -> float:
    """Print one run's figures; return its cost."""
    if run.proc.returncode != 0:
        raise SystemExit(f"{name} run failed ({run.proc.returncode}):\n{run.proc.stderr[-3000:]}")
    cost, totals = priced(run)
    later: dict[str, list[dict[str, Any]]] = {}
    for who, requests in run.by_who().items():
        later[who] = [usage for _, usage in requests[2:]]
    print(f"{name}:")
    print(f"  requests: {len(run.served)}")
    for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        print(f"  {key}: {totals.get(key, 0)}")
    print(f"  output_tokens: {totals.get('output_tokens', 0)}")
    for who, usages in sorted(later.items()):
        if usages:
            low = min(read_share(u) for u in usages)
            print(f"  min_read_share_from_3rd_request[{who}]: {low:.3f}")
    print(f"  cost_usd_at_list_prices: {cost:.4f}")
    print(f"  session_total_cost_usd: {run.result.get('total_cost_usd', float('nan')):.4f}")
    return cost


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_bytecode_flag(parser)
    args = parser.parse_args()
    pycache = None if args.no_bytecode_cache else tempfile.mkdtemp(prefix="taskloom-pyc-")
    roots = [tempfile.mkdtemp(prefix="taskloom-bench-") for _ in range(2)]
    try:
        print(f"model: {MODEL}")
        cached = report("cached", run_session(Path(roots[0]), lambda url: child_env(pycache)))
        plain = run_session(Path(roots[1]), lambda url: child_env(pycache), cached=False)
        uncached = report("uncached (DISABLE_PROMPT_CACHING=1)", plain)
        ratio = cached / uncached if uncached else float("nan")
        print(f"cost_ratio_cached_over_uncached: {ratio:.3f}")
        verdict = "PASS" if ratio <= TARGET else "FAIL"
        print(f"{verdict}: cached cost {ratio:.1%} of uncached (target <= {TARGET:.0%})")
    finally:
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)
        if pycache is not None:
            shutil.rmtree(pycache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
