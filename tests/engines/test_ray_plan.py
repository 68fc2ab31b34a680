"""How many Ray actors hold the encoder, and what share of a GPU each gets (fpr.engines.ray._actor_plan):
hand-computed cases on a stand-in for Ray's cluster resources (no Ray runtime needed)."""
from __future__ import annotations

import pytest

from fpr.engines.ray import _actor_plan
from fpr.engines.ray_runtime import RayOptions
from fpr.errors import InputError


class _Cluster:
    def __init__(self, gpus: int):
        self.gpus = gpus

    def cluster_resources(self) -> dict:
        return {"CPU": 64.0, **({"GPU": float(self.gpus)} if self.gpus else {})}


@pytest.mark.parametrize("gpus, actors, device, plan", [
    (0, None, "auto", (1, 0.0)),     # CPU cluster: one actor unless asked
    (0, 6, "auto", (6, 0.0)),
    (8, None, "auto", (8, 1.0)),     # one actor per GPU
    (8, 4, "auto", (4, 1.0)),        # fewer actors than GPUs: a whole GPU each
    (2, 16, "auto", (16, 0.125)),    # 8 actors per GPU
    (2, 3, "auto", (3, 0.5)),        # ceil(3 / 2) = 2 per GPU: halves, so each GPU holds whole actors
    (1, 12, "cuda", (12, 1 / 12)),
    (8, 16, "cpu", (16, 0.0)),       # --device cpu on a GPU cluster: no GPU asked
])
def test_actor_plan_shares_gpus_in_whole_fractions(gpus, actors, device, plan):
    assert _actor_plan(_Cluster(gpus), RayOptions(actors=actors), device) == plan


def test_cuda_on_a_cluster_without_gpus_is_an_input_error():
    with pytest.raises(InputError, match="--device cuda but the Ray cluster has no GPUs"):
        _actor_plan(_Cluster(0), RayOptions(), "cuda")
