"""Encoders shared by evaluation code (scorers, filters): loaded once per process.

A plain helper module (not a scorer), so scorers that need an encoder import it
instead of importing each other.
"""
from __future__ import annotations

from fpr.encoders.registry import Encoder, get_spec, load_encoder

_ENCODERS: dict[tuple, Encoder] = {}


def cached_encoder(encoder_id: str, device: str) -> Encoder:
    """Load an encoder once per process (filtering calls scorers chunk after chunk); keeps the last two.

    A missing-weights error is the registry's own one-line :class:`~fpr.errors.NotFoundError`.
    """
    spec = get_spec(encoder_id)
    key = (encoder_id, device, id(spec))
    if key not in _ENCODERS:
        if len(_ENCODERS) >= 2:
            _ENCODERS.pop(next(iter(_ENCODERS)))
        _ENCODERS[key] = load_encoder(encoder_id, device=device)
    return _ENCODERS[key]
