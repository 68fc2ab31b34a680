"""Look-alike families in the world (issue #32 item 2): off is bit-identical to the world without them; on,
each gallery identity shares the declared share of its markings with its family, and only with it."""
from __future__ import annotations

import numpy as np
import pytest

from fpr.errors import InputError
from fpr.galleries import world as W
from fpr.galleries.world import patterns as P
from tests.galleries.test_world import GALLERY_GOLDEN, _digest


def _changed(w: W.World, sp: str, a: int, b: int) -> float:
    """Share of body pixels whose marking colour differs between identities a and b."""
    return float(P.changed_pixels(sp, w.markings(sp, a).labels(), w.markings(sp, b).labels()).sum()
                 / P.body_mask(sp).sum())


def test_lookalikes_off_is_bit_identical_to_the_golden_world():
    w = W.World(W.WorldConfig(seed=0, lookalikes=0.0, family_size=3))
    assert w.families == {}
    got = {(sp, role, k): _digest(w.real_image(sp, w.ids[sp][0], role, k)) for sp, role, k in GALLERY_GOLDEN}
    assert got == GALLERY_GOLDEN
    # the same identities, and markings equal to those of a world that has never heard of look-alikes
    plain = W.World(W.WorldConfig(seed=0))
    assert w.ids == plain.ids and all(w.markings(sp, i) == W.Markings(sp, i) for sp in W.SPECIES for i in w.ids[sp])


@pytest.mark.parametrize("share", [0.5, 0.85])
def test_a_family_shares_the_declared_share_of_its_markings(share):
    """Two unrelated identities differ on a share u of the body; family members only on about (1 - share) x u:
    the ratio within 0.06 of 1 - share (the region is calibrated per identity by its own changed pixels, so
    the two members' shared regions differ at their edges)."""
    w = W.World(W.WorldConfig(seed=3, identities=8, lookalikes=share))
    for sp in W.SPECIES:
        ids = w.ids[sp]
        assert sorted(len(w.family_members(sp, i)) for i in ids) == [2] * 8  # pairs, every identity in one
        fam = [(a, b) for a in ids for b in ids if a < b and b in w.family_members(sp, a)]
        other = [(a, b) for a in ids for b in ids if a < b and b not in w.family_members(sp, a)]
        assert len(fam) == 4
        unrelated = np.mean([_changed(w, sp, a, b) for a, b in other])
        within = np.mean([_changed(w, sp, a, b) for a, b in fam])
        assert abs(within / unrelated - (1 - share)) < 0.06, (sp, within, unrelated)
        # the family's shared part does not bring unrelated identities closer than plain ones
        plain = W.World(W.WorldConfig(seed=3, identities=8))
        assert abs(unrelated - np.mean([_changed(plain, sp, a, b) for a, b in other])) < 0.03


def test_families_of_three_and_generic_identities_outside_them():
    w = W.World(W.WorldConfig(seed=1, identities=7, lookalikes=0.6, family_size=3))
    sizes = sorted(len(w.family_members("zebra", i)) for i in w.ids["zebra"])
    assert sizes == [1] + [3] * 6  # 7 = 3 + 3 + 1
    g = w.generic_ids["zebra"][0]
    assert w.family("zebra", g) is None and w.markings("zebra", g) == W.Markings("zebra", g)


@pytest.mark.parametrize("kw, says", [(dict(lookalikes=1.0), "lookalikes must be within [0, 1)"),
                                      (dict(lookalikes=-0.1), "lookalikes must be within [0, 1)"),
                                      (dict(family_size=1), "family needs >= 2 identities")])
def test_bad_lookalike_options_are_one_line(kw, says):
    with pytest.raises(InputError) as exc:
        W.WorldConfig(**kw)
    assert says in exc.value.one_line()
