from __future__ import annotations

import pytest

from fpr.encoders.registry import all_specs, describe, get_spec, load_encoder
from fpr.errors import NotFoundError


def test_unknown_encoder_lists_valid_ids():
    with pytest.raises(NotFoundError) as exc:
        get_spec("no-such-encoder")
    msg = exc.value.one_line()
    assert "no-such-encoder" in msg and "pixels-16" in msg


def test_describe_is_honest_and_never_raises():
    for spec in all_specs().values():
        row = describe(spec)
        assert {"id", "dim", "status", "found_in"} <= set(row)
        assert row["status"] in ("available", "missing")
    assert describe(get_spec("pixels-16"))["status"] == "available"


def test_baseline_loads_without_weights():
    enc = load_encoder("pixels-16", device="cpu")
    assert enc.weights.checksum == "none" and enc.spec.dim == 768
