"""The ontology and the relevance mask file."""
import pytest

from fpr.errors import InputError
from fpr.scorers.vistar.roles import ASPECTS, ROLES, aspect, read_mask


def test_seven_roles_nine_aspects_and_the_packaged_mask():
    assert len(ROLES) == 7 and len({r.code for r in ROLES}) == 7
    assert [a.code for a in ASPECTS] == ["TR", "LI", "CSE", "CPA", "PSC", "GC", "SF", "CUL", "MA"]
    assert [r.name for r in ROLES if r.source == "paper"] == ["Graphic Designer", "Storyboard Artist",
                                                             "Marketing Specialist"]
    m = read_mask()
    assert len(m) == 7 * 9 and int(m["relevant"].sum()) == 28  # the paper's 28 pairs (which ones: fpr's)
    assert sorted(m["role"].unique()) == sorted(r.code for r in ROLES)
    from_paper = m[m["source"].str.startswith("paper")]
    assert set(zip(from_paper["role"], from_paper["aspect"])) == {("GD", "TR"), ("SA", "CSE"), ("SA", "CPA")}
    assert (from_paper["relevant"] == 1).all()
    assert set(m.loc[m["relevant"] == 1, "aspect"]) == {a.code for a in ASPECTS}  # every aspect used


def test_aspect_codes_and_alias():
    assert aspect("tr").scorer == "vistar-tr"
    assert aspect("CC").code == "CUL"
    with pytest.raises(InputError, match="unknown aspect 'XX'.*valid aspects: TR, LI"):
        aspect("XX")


def _write(tmp_path, text):
    p = tmp_path / "mask.csv"
    p.write_text(text)
    return p


def full_role(role, relevant=("TR",), aspects=("TR", "LI", "CSE", "CPA", "PSC", "GC", "SF", "CUL", "MA")):
    return "".join(f"{role},{a},{int(a in relevant)}\n" for a in aspects)


def test_a_users_mask_with_own_roles(tmp_path):
    m = read_mask(_write(tmp_path, "role,aspect,relevant\n" + full_role("qa", ("LI", "GC")) + full_role("Ed")))
    assert set(m["role"]) == {"QA", "ED"}
    assert set(m.loc[(m["role"] == "QA") & (m["relevant"] == 1), "aspect"]) == {"LI", "GC"}


@pytest.mark.parametrize("text,message", [
    ("role,aspect\nX,TR\n", "lacks column(s) relevant"),
    ("role,aspect,relevant\n" + full_role("X").replace("X,LI,0", "X,LI,yes"), "relevant must be 0 or 1, not 'yes' in row 3"),
    ("role,aspect,relevant\n" + full_role("X") + "X,TR,0\n", "pair (X, TR) is listed twice"),
    ("role,aspect,relevant\n" + full_role("X").replace("X,MA,0\n", ""), "role 'X' has no row for aspect(s) MA"),
    ("role,aspect,relevant\n" + full_role("X").replace("X,LI", "X,LX"), "unknown aspect 'LX' in row 3"),
    ("role,aspect,relevant\n" + full_role("X", ()), "role 'X' has no relevant aspect"),
])
def test_bad_masks_are_one_line(tmp_path, text, message):
    p = _write(tmp_path, text)
    with pytest.raises(InputError) as e:
        read_mask(p)
    assert message in str(e.value) and str(p) in str(e.value) and "\n" not in str(e.value)
