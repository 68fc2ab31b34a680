"""A general-purpose stand-in with declared shares: ``fpr-general-v1`` and ``fpr-general-v2``.

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

A real CLIP or DINOv2 also sees the scene *instance* and the layout: a generation that keeps the
reference's background and pose scores a high Sim whatever the animal (the paper's appendix C on
IP-Adapter-Plus). The attribute network knows only the background *family*, so ``fpr-general-v2`` adds
a third declared, label-free component, a *layout share* ``l`` of the ``pixels-16`` embedding (the
16x16 mean-centred colour thumbnail of the same 64-px image: scene instance, pose, framing)::

    embedding = [sqrt(1 - l - w) * a, sqrt(l) * p, sqrt(w) * s]
    cos = (1 - l - w) * cos_a + l * cos_p + w * cos_s

``l`` is fixed by the trainer's command (``--blend-layout``); ``w`` is then calibrated as above with
``l`` in place. ``l = 0`` is exactly the two-part blend of ``fpr-general-v1``.
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
LAYOUT_KEY = "blend.layout_share"  # written only when the layout share is above 0 (fpr-general-v1's file has none)
BISECTION_STEPS = 14
LAYOUT_ENCODER = "pixels-16"  # the layout component: fpr.encoders.baselines' thumbnail, on its own normalisation
LAYOUT_SIDE = 16
LAYOUT_DIM = LAYOUT_SIDE * LAYOUT_SIDE * 3


@dataclass(frozen=True)
class BlendSpec:
    partner: str  # encoder id whose embedding carries the identity share
    target: float  # oracle mAP on the validation images the share is calibrated to
    layout_share: float = 0.0  # declared share of the pixels-16 layout embedding (0: none, fpr-general-v1)

    def check(self) -> None:
        if not 0.0 < self.target < 1.0:
            raise InputError(f"--blend-target must be within (0, 1), got {self.target}", hint="e.g. --blend-target 0.45")
        if not 0.0 <= self.layout_share < 1.0:
            raise InputError(f"--blend-layout must be within [0, 1), got {self.layout_share}",
                             hint="e.g. --blend-layout 0.2")


class Layout(nn.Module):
    """``pixels-16``'s embedding computed from the blend's own input: the input is un-normalised with the
    general network's ``mean``/``std`` and re-normalised the way pixels-16 preprocesses ((x - 0.5) / 0.5), so
    the vector equals pixels-16's of the same image up to float rounding (tests/encoders/test_general_standin.py)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        super().__init__()
        self.register_buffer("mean", torch.tensor(list(mean), dtype=torch.float32).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(list(std), dtype=torch.float32).view(1, 3, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        unit = (x.float() * self.std + self.mean - 0.5) / 0.5
        t = nn.functional.adaptive_avg_pool2d(unit, LAYOUT_SIDE).flatten(1)
        return t - t.mean(dim=1, keepdim=True)


class BlendNet(nn.Module):
    """``[sqrt(1 - l - w) * normalize(general(x)), sqrt(l) * normalize(layout(x)), sqrt(w) * normalize(partner(x))]``;
    without a layout share (``l = 0``) the layout part is left out (fpr-general-v1's vectors)."""

    def __init__(self, general: nn.Module, partner: nn.Module, identity_share: float, layout_share: float = 0.0,
                 layout: nn.Module | None = None):
        super().__init__()
        if layout_share > 0 and layout is None:
            raise ValueError("a layout share needs the layout module")
        self.general, self.partner = general, partner
        self.layout = layout if layout_share > 0 else None
        self.identity_share, self.layout_share = float(identity_share), float(layout_share)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = nn.functional.normalize(self.general(x).float(), dim=1)
        s = nn.functional.normalize(self.partner(x).float(), dim=1)
        parts = [math.sqrt(1.0 - self.layout_share - self.identity_share) * a]
        if self.layout is not None:
            parts.append(math.sqrt(self.layout_share) * nn.functional.normalize(self.layout(x), dim=1))
        return torch.cat(parts + [math.sqrt(self.identity_share) * s], dim=1)


def blend_vectors(a: np.ndarray, s: np.ndarray, w: float, p: np.ndarray | None = None,
                  layout_share: float = 0.0) -> np.ndarray:
    """The blend of sets of L2-normalised vectors (unit rows again): general ``a``, layout ``p`` (only when
    ``layout_share`` > 0) and partner ``s`` with identity share ``w``."""
    parts = [math.sqrt(max(0.0, 1.0 - layout_share - w)) * a]
    if layout_share > 0:
        if p is None:
            raise ValueError("a layout share needs the layout vectors")
        parts.append(math.sqrt(layout_share) * p)
    return np.concatenate(parts + [math.sqrt(w) * s], axis=1).astype(np.float32)


def calibrate_share(a: np.ndarray, s: np.ndarray, score: Callable[[np.ndarray], float], target: float,
                    p: np.ndarray | None = None, layout_share: float = 0.0) -> tuple[float, float, list[dict]]:
    """The identity share ``w`` in [0, 1 - layout_share] whose blend scores ``target`` (bisection; the oracle
    mAP grows with ``w`` from the general network's (with the fixed layout share) to the partner's).
    Returns (w, score reached, the steps)."""
    top = 1.0 - layout_share

    def at(w: float) -> float:
        return score(blend_vectors(a, s, w, p, layout_share))

    lo_score, hi_score = at(0.0), at(top)
    steps = [{"share": 0.0, "val_map": lo_score}, {"share": top, "val_map": hi_score}]
    if not lo_score <= target <= hi_score:
        raise InputError(f"the blend cannot reach oracle mAP {target}: it spans {lo_score:.3f} (no identity "
                         f"share) to {hi_score:.3f} (the largest) on the validation images",
                         hint="pick a --blend-target inside that range")
    lo, hi = 0.0, top
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2
        v = at(mid)
        steps.append({"share": mid, "val_map": v})
        lo, hi = (mid, hi) if v < target else (lo, mid)
    w = (lo + hi) / 2
    reached = at(w)
    steps.append({"share": w, "val_map": reached})
    return w, reached, steps


def share_state(general: nn.Module, w: float, layout_share: float = 0.0) -> dict[str, torch.Tensor]:
    """What the weights file holds: the general network's tensors and the shares (never the partner's weights)."""
    state = {k: v.detach().cpu().contiguous() for k, v in general.state_dict().items()}
    state[SHARE_KEY] = torch.tensor([w], dtype=torch.float64)
    if layout_share > 0:
        state[LAYOUT_KEY] = torch.tensor([layout_share], dtype=torch.float64)
    return state


def split_state(state: dict[str, torch.Tensor], where: str) -> tuple[dict[str, torch.Tensor], float, float]:
    """(the general network's tensors, identity share, layout share) of a blend's weights file."""
    if SHARE_KEY not in state:
        raise InputError(f"blend weights lack '{SHARE_KEY}'", where=where,
                         hint="the file is not a blend's: retrain with --blend")
    rest = {k: v for k, v in state.items() if k not in (SHARE_KEY, LAYOUT_KEY)}
    w = float(state[SHARE_KEY].reshape(-1)[0])
    lay = float(state[LAYOUT_KEY].reshape(-1)[0]) if LAYOUT_KEY in state else 0.0
    if not (0.0 <= w <= 1.0 and 0.0 <= lay and w + lay <= 1.0):
        raise InputError(f"blend shares (identity {w}, layout {lay}) are outside [0, 1] or sum above 1", where=where,
                         hint="the weights file is damaged: retrain with --blend")
    return rest, w, lay


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
    fields = {"partner": spec.partner, "partner_checksum": partner_checksum, "identity_share": w,
              "target_val_map": spec.target, "val_map": reached, "general_dim": general_dim,
              "partner_dim": partner_dim, "calibration": list(steps),
              "definition": "embedding = [sqrt(1-w) * general, sqrt(w) * partner], each L2-normalised; "
                            "w calibrated by bisection on the validation images' oracle mAP"}
    if spec.layout_share > 0:
        fields.update({"layout": LAYOUT_ENCODER, "layout_share": spec.layout_share, "layout_dim": LAYOUT_DIM,
                       "definition": "embedding = [sqrt(1-l-w) * general, sqrt(l) * layout, sqrt(w) * partner], each "
                                     "L2-normalised, layout = pixels-16's embedding of the same image; l declared "
                                     "(--blend-layout), w calibrated by bisection on the validation images' oracle mAP"})
    return fields
