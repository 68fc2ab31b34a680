"""What a sealed benchmark hides: the per-run check without a workspace when nothing is sealed."""
from __future__ import annotations

from fpr.serve.sealing import _sealed_run


def test_nothing_sealed_hides_no_run_without_listing_the_runs():
    """Every non-admin ``GET /v1/runs/{run}`` asked this; it listed every stored run even with no sealed index
    (about 25 ms idle per poll, hundreds under 16 polling clients). ``ctx=None``: the listing is not reached."""
    assert _sealed_run(None, "r1", None, set()) is False
    assert _sealed_run(None, "r1", {"run": "r1", "index": "world-fpr-world-v1"}, set()) is False
    # a benchmark's own run stays sealed whatever the sealed set says
    assert _sealed_run(None, "r1", {"run": "r1", "benchmark": "b1"}, set()) is True
    assert _sealed_run(None, "r1", {"run": "r1", "index": "sealed-ix"}, {"sealed-ix"}) is True
