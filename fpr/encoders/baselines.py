"""Non-learned baselines: fixed functions, no weights, instant on any machine.

``pixels-16`` is the floor every learned encoder must beat: a 16x16 colour
thumbnail with its mean removed, so cosine similarity is the Pearson correlation
of two thumbnails. It is also what fast tests use.
"""
from __future__ import annotations

import torch

from fpr.encoders.preprocess import Preprocessing
from fpr.encoders.registry import EncoderSpec, register
from fpr.encoders.weights import ResolvedWeights, WeightsSource


class Thumbnail(torch.nn.Module):
    def __init__(self, side: int):
        super().__init__()
        self.side = side

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.nn.functional.adaptive_avg_pool2d(x, self.side).flatten(1)
        return t - t.mean(dim=1, keepdim=True)


def _build_thumbnail(_: ResolvedWeights) -> torch.nn.Module:
    return Thumbnail(16)


register(EncoderSpec(
    id="pixels-16",
    family="baseline",
    dim=16 * 16 * 3,
    preprocessing=Preprocessing(name="squash64-unit", size=64, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
    weights=WeightsSource(kind="none"),
    build=_build_thumbnail,
    description="16x16 mean-centred colour thumbnail; a non-learned floor",
    tags=("baseline", "builtin"),
))
