"""A general-purpose stand-in with a declared identity share: ``fpr-general-v1``.

A network trained without identity labels (``fpr encoders train --labels species,background,facing``)
sees what CLIP or DINOv2 see in a world image -- the species, the scene, which way the animal faces --
and on the world that carries no identity at all: its oracle mAP stays at chance (0.13 on the
trainer's held-out identities, docs/world.md). Real general-purpose encoders do carry some identity
(CLIP's oracle mAP is 0.485 on the paper's Re-ID gallery, Table 1). The stand-in therefore adds a
*declared* share of a partner encoder's embedding::

    embedding = [sqrt(1 - w) * a, sqrt(w) * s]     cos = (1 - w) * cos_a + w * cos_s

with ``a`` the attribute network's and ``s`` the partner's (``fpr-world-v3``) L2-normalised
embeddings. ``w`` (the *identity share*) is calibrated by bisection on the trainer's validation
images (held-out identities, never an evaluation identity) so that the blend's oracle mAP meets a
target (``--blend-target``); the card records ``w``, the target, the value reached and the partner's
weights checksum. The identity in the blend is the partner's: the stand-in is a calibrated mixture,
not a model that learnt identity by itself, and the docs say so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from fpr.errors import InputError

SHARE_KEY = "blend.identity_share"  # the share is in the weights file: its checksum (the cache key) covers it
BISECTION_STEPS = 14


@dataclass(frozen=True)
class BlendSpec:
    partner: str  # encoder id whose embedding carries the identity share
    target: float  # oracle mAP on the validation images the share is calibrated to

    def check(self) -> None:
        if not 0.0 < self.target < 1.0:
            raise InputError(f"--blend-target must be within (0, 1), got {self.target}", hint="e.g. --blend-target 0.45")


class BlendNet(nn.Module):
    """``[sqrt(1 - w) * normalize(general(x)), sqrt(w) * normalize(partner(x))]``."""

    def __init__(self, general: nn.Module, partner: nn.Module, identity_share: float):
        super().__init__()
        self.general, self.partner = general, partner
        self.identity_share = float(identity_share)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = nn.functional.normalize(self.general(x).float(), dim=1)
        s = nn.functional.normalize(self.partner(x).float(), dim=1)
        return torch.cat([math.sqrt(1.0 - self.identity_share) * a, math.sqrt(self.identity_share) * s], dim=1)


def blend_vectors(a: np.ndarray, s: np.ndarray, w: float) -> np.ndarray:
    """The blend of two sets of L2-normalised vectors (unit rows again)."""
    return np.concatenate([math.sqrt(1.0 - w) * a, math.sqrt(w) * s], axis=1).astype(np.float32)


def calibrate_share(a: np.ndarray, s: np.ndarray, score: Callable[[np.ndarray], float], target: float
                    ) -> tuple[float, float, list[dict]]:
    """The identity share ``w`` in [0, 1] whose blend scores ``target`` (bisection; the oracle mAP grows with
    ``w`` from the general network's to the partner's). Returns (w, score reached, the steps)."""
    lo_score, hi_score = score(blend_vectors(a, s, 0.0)), score(blend_vectors(a, s, 1.0))
    steps = [{"share": 0.0, "val_map": lo_score}, {"share": 1.0, "val_map": hi_score}]
    if not lo_score <= target <= hi_score:
        raise InputError(f"the blend cannot reach oracle mAP {target}: it spans {lo_score:.3f} (general network "
                         f"alone) to {hi_score:.3f} (partner alone) on the validation images",
                         hint="pick a --blend-target inside that range")
    lo, hi = 0.0, 1.0
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        v = score(blend_vectors(a, s, mid))
        steps.append({"share": mid, "val_map": v})
        lo, hi = (mid, hi) if v < target else (lo, mid)
    w = (lo + hi) / 2
    reached = score(blend_vectors(a, s, w))
    steps.append({"share": w, "val_map": reached})
    return w, reached, steps


def share_state(general: nn.Module, w: float) -> dict[str, torch.Tensor]:
    """What the weights file holds: the general network's tensors and the share (never the partner's weights)."""
    state = {k: v.detach().cpu().contiguous() for k, v in general.state_dict().items()}
    state[SHARE_KEY] = torch.tensor([w], dtype=torch.float64)
    return state


def split_state(state: dict[str, torch.Tensor], where: str) -> tuple[dict[str, torch.Tensor], float]:
    if SHARE_KEY not in state:
        raise InputError(f"blend weights lack '{SHARE_KEY}'", where=where,
                         hint="the file is not a blend's: retrain with --blend")
    rest = {k: v for k, v in state.items() if k != SHARE_KEY}
    w = float(state[SHARE_KEY].reshape(-1)[0])
    if not 0.0 <= w <= 1.0:
        raise InputError(f"blend identity share {w} is outside [0, 1]", where=where)
    return rest, w


def partner_network(partner: str, device: str = "cpu") -> tuple[nn.Module, str, str]:
    """(network, preprocessing name, weights checksum) of the partner encoder."""
    from fpr.encoders.registry import load_encoder

    enc = load_encoder(partner, device=device)
    return enc.model, enc.preprocessing.name, enc.weights.checksum


def check_same_protocol(general_preprocessing: str, partner_preprocessing: str, partner: str) -> None:
    if general_preprocessing != partner_preprocessing:
        raise InputError(f"blend partner '{partner}' preprocesses with {partner_preprocessing}, the general network "
                         f"with {general_preprocessing}", hint="train the general network with the partner's --size")


def blend_card_fields(spec: BlendSpec, w: float, reached: float, steps: Sequence[dict], partner_checksum: str,
                      general_dim: int, partner_dim: int) -> dict:
    return {"partner": spec.partner, "partner_checksum": partner_checksum, "identity_share": w,
            "target_val_map": spec.target, "val_map": reached, "general_dim": general_dim,
            "partner_dim": partner_dim, "calibration": list(steps),
            "definition": "embedding = [sqrt(1-w) * general, sqrt(w) * partner], each L2-normalised; "
                          "w calibrated by bisection on the validation images' oracle mAP"}
