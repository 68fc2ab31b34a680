"""The shared benchmark timing helper (benchmarks/_timing.py): hand-computed spreads and ratios, the
rotation of the interleaved order, and the physical-limit probes' arithmetic."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import _timing as T  # noqa: E402


def test_spread_is_median_min_max():
    s = T.spread([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.lo, s.hi, s.n) == (2.5, 1.0, 10.0, 4)
    assert s.fmt(".1f") == "2.5 [1.0 - 10.0]"
    assert s.fmt(".0f", scale=1000) == "2500 [1000 - 10000]"


def test_ratios_are_taken_round_by_round():
    # medians 2 and 2 would give 1.0; the paired ratios are 0.5, 1, 4 -> median 1, range 0.5 - 4
    s = T.ratios([1.0, 2.0, 4.0], [2.0, 2.0, 1.0])
    assert (s.median, s.lo, s.hi) == (1.0, 0.5, 4.0)
    with pytest.raises(ValueError):
        T.ratios([1.0], [1.0, 2.0])


def test_interleaved_rotates_who_goes_first_and_checks_every_result():
    calls: list[str] = []
    seen: list[tuple[str, object]] = []
    fns = {k: (lambda k=k: calls.append(k) or k) for k in "abc"}
    times = T.interleaved(fns, rounds=4, check=lambda name, out: seen.append((name, out)))
    assert calls == list("abc" "bca" "cab" "abc")
    assert seen == [(c, c) for c in calls]
    assert {k: len(v) for k, v in times.items()} == {"a": 4, "b": 4, "c": 4}


def test_physical_limit_probes_report_positive_rates():
    g = T.sgemm_gflops(n=128, rounds=2)
    b = T.copy_gbps(mib=4, rounds=2)
    assert g.n == 2 and 0 < g.lo <= g.median <= g.hi
    assert b.n == 2 and 0 < b.lo <= b.median <= b.hi
    with pytest.raises(ValueError):
        T.sgemm_gflops(n=8, backend="cupy")


def test_physical_limit_arithmetic_on_a_fixed_clock(monkeypatch):
    # with every timed call taking exactly 0.5 s: a 100^3 matmul is 2e6 flops -> 0.004 GFLOP/s; a 1 MiB copy
    # moves 2 MiB (read + write) -> 2 * 2**20 / 0.5 / 1e9 GB/s
    monkeypatch.setattr(T, "timed", lambda fn: (0.5, fn()))
    assert T.sgemm_gflops(n=100, rounds=2).median == pytest.approx(2 * 100 ** 3 / 0.5 / 1e9)
    assert T.copy_gbps(mib=1, rounds=2).median == pytest.approx(2 * 2 ** 20 / 0.5 / 1e9)


def test_model_gflop_counts_two_flops_per_multiply_add():
    import torch

    # Linear(4 -> 3) on a batch of 2: 2 x 4 x 3 multiply-adds = 24 -> 48 flops; the bias adds are not counted
    assert T.model_gflop(torch.nn.Linear(4, 3), torch.zeros(2, 4)) == pytest.approx(48 / 1e9)
    # Conv2d 3 -> 8, 3x3 kernel, 10x10 output (padding 1): 8 x 3 x 9 x 100 multiply-adds, 2 flops each
    conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    assert T.model_gflop(conv, torch.zeros(1, 3, 10, 10)) == pytest.approx(2 * 8 * 3 * 9 * 100 / 1e9)
