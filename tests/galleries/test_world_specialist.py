"""The built-in world with the shipped specialist (fpr-world-v3), on held-out seeds 0, 1, 2: drift levels
separate in every context, look-alike siblings raise a generic generation's Sim, a gallery with home
backgrounds (camera sites) moves a background-sensitive embedding's mAP but not the specialist's, and drift
hidden by an occluder is invisible to it.

Golden values were measured with ``benchmarks/world_contexts.py`` (``benchmarks/results/world_contexts.md``)."""
from __future__ import annotations

import numpy as np
import pytest

from fpr.galleries import world as W
from tests.galleries.world_probe import auroc, embedder, probe, thumbnail


@pytest.fixture(scope="module")
def specialist():
    import torch

    torch.set_num_threads(1)  # the shared machine: one thread is faster than oversubscribed ones
    return embedder()


def _by(rows, method, field="sim") -> np.ndarray:
    return np.array([getattr(r, field) for r in rows if r.method == method])


# Seed 0 in the default run, seeds 1 and 2 with -m slow (.ci/run runs both): a world and its embeddings per seed.
SEEDS = [0, *(pytest.param(s, marks=pytest.mark.slow) for s in (1, 2))]


# Sim AUROC of new-scene@0.25 over new-scene@0.5, per seed (3 species x 10 identities x 3 queries each)
AUROC_025_OVER_05 = {0: 0.7652, 1: 0.7480, 2: 0.7441}


@pytest.mark.parametrize("seed", SEEDS)
def test_specialist_separates_drift_quarter_from_half(specialist, seed):
    w = W.World(W.WorldConfig(seed=seed))
    rows = probe(w, ["new-scene@0.25", "new-scene@0.5"], specialist, with_ap=False)
    a = auroc(_by(rows, "new-scene@0.25"), _by(rows, "new-scene@0.5"))
    assert a >= 0.7, a
    assert a == pytest.approx(AUROC_025_OVER_05[seed], abs=0.002)


# mean specialist Sim of new-scene@1 (a generic individual), siblings 0 -> 0.5
GENERIC_SIM = {0: (0.0100, 0.1377), 1: (0.0181, 0.1345), 2: (0.0423, 0.1526)}


@pytest.mark.parametrize("seed", SEEDS)
def test_siblings_raise_a_generic_generations_specialist_sim(specialist, seed):
    """Look-alike siblings share half their markings (the generic individual too: it is of the same
    population), so a generator that ignores the subject gets a higher Sim: Sim alone cannot tell."""
    plain, sib = (_by(probe(W.World(W.WorldConfig(seed=seed, siblings=s)), ["new-scene@1"], specialist,
                            with_ap=False), "new-scene@1").mean() for s in (0.0, 0.5))
    assert sib > plain + 0.08, (plain, sib)
    assert (plain, sib) == pytest.approx(GENERIC_SIM[seed], abs=0.002)


# mAP of ref-scene@1 (5 gallery images per identity), home background off -> on: (thumbnail, specialist)
HOME_MAP = {0: ((0.1622, 0.5460), (0.1734, 0.1859)), 1: ((0.1693, 0.5180), (0.1927, 0.1864)),
            2: ((0.1569, 0.4793), (0.2073, 0.2100))}


@pytest.mark.parametrize("seed", SEEDS)
def test_home_background_biases_a_context_sensitive_embedding_not_the_specialist(specialist, seed):
    """With every real image at its identity's home, a generic animal in the reference's whole scene
    (ref-scene@1) ranks the true identity's gallery first by background alone under a thumbnail embedding;
    the specialist's mAP does not move (the paper's 5.2: specialists are robust to backgrounds)."""
    maps = {}
    for home in (0.0, 1.0):
        w = W.World(W.WorldConfig(seed=seed, home_background=home, identities=10, gallery=5))
        maps[("thumb", home)] = _by(probe(w, ["ref-scene@1"], thumbnail), "ref-scene@1", "ap").mean()
        maps[("spec", home)] = _by(probe(w, ["ref-scene@1"], specialist), "ref-scene@1", "ap").mean()
    assert maps[("thumb", 1.0)] > maps[("thumb", 0.0)] + 0.3, maps
    assert abs(maps[("spec", 1.0)] - maps[("spec", 0.0)]) < 0.03, maps
    thumb, spec = HOME_MAP[seed]
    assert (maps[("thumb", 0.0)], maps[("thumb", 1.0)]) == pytest.approx(thumb, abs=0.002)
    assert (maps[("spec", 0.0)], maps[("spec", 1.0)]) == pytest.approx(spec, abs=0.002)


# Sim AUROC of new-scene@0 over new-scene@0.25, occlusion stress off -> on
OCCLUDED_AUROC = {0: (0.7309, 0.5217), 1: (0.7567, 0.5156), 2: (0.8172, 0.5623)}


@pytest.mark.parametrize("seed", SEEDS)
def test_occlusion_hides_drift_from_the_specialist(specialist, seed):
    """An occluder over the drifted region (the same place at every drift level of a query) leaves the
    specialist nothing to see: drift 0 and drift 0.25 become nearly indistinguishable by Sim."""
    got = []
    for occ in (False, True):
        rows = probe(W.World(W.WorldConfig(seed=seed, occlusion=occ)), ["new-scene@0", "new-scene@0.25"], specialist,
                     with_ap=False)
        got.append(auroc(_by(rows, "new-scene@0"), _by(rows, "new-scene@0.25")))
    assert got[1] < 0.6 < got[0], got
    assert tuple(got) == pytest.approx(OCCLUDED_AUROC[seed], abs=0.002)


@pytest.fixture(scope="module")
def generals():
    import torch

    torch.set_num_threads(1)
    return {eid: embedder(eid) for eid in ("fpr-general-v1", "fpr-general-v2")}


# Issue #23's done-when line: the general stand-in's Sim AUROC of "new scene, drift 0" over "reference layout,
# drift 1" should be <= 0.1, i.e. a general-purpose Sim prefers the copied layout to the kept identity. "Reference
# layout" is read as ref-scene@1 (the reference's whole scene, markings lost: the IP-Adapter-Plus behaviour of the
# paper's appendix C, "a nearly identical background" and "a similar layout"); ref-pose@1 (the pose alone on a new
# background) is reported beside it. fpr-general-v1 (attribute network + 20% specialist) does NOT meet it (0.14/0.15/
# 0.11): it knows background families, not the scene instance. fpr-general-v2 adds a declared 25% share of the
# pixels-16 layout embedding, calibrated on world seeds 5, 6, 7, 13, 14 (benchmarks/general_standin_layout.py);
# these are its values on the check seeds, pinned as measured (docs/world.md, stand-in section).
GENERAL_AUROC = {  # encoder -> seed -> (over ref-pose@1, over ref-scene@1)
    "fpr-general-v1": {0: (0.5542, 0.1437), 1: (0.5353, 0.1504), 2: (0.5152, 0.1095)},
    "fpr-general-v2": {0: (0.5712, 0.0649), 1: (0.5551, 0.0785), 2: (0.5460, 0.0365)},
}


@pytest.mark.parametrize("seed", SEEDS)
def test_general_sim_of_new_scene_0_over_the_reference_layout_at_drift_1_as_measured(generals, seed):
    got = {}
    for eid, embed in generals.items():
        rows = probe(W.World(W.WorldConfig(seed=seed)), ["new-scene@0", "ref-pose@1", "ref-scene@1"], embed,
                     with_ap=False)
        got[eid] = (auroc(_by(rows, "new-scene@0"), _by(rows, "ref-pose@1")),
                    auroc(_by(rows, "new-scene@0"), _by(rows, "ref-scene@1")))
    for eid, (pose, scene) in got.items():
        assert (pose, scene) == pytest.approx(GENERAL_AUROC[eid][seed], abs=0.002), eid
        assert scene < pose  # the reference's whole scene flatters a general-purpose Sim, its pose alone does not
    assert got["fpr-general-v1"][1] > 0.1  # the first stand-in misses the line
    assert got["fpr-general-v2"][1] <= 0.1  # the layout share meets it on the check seeds
