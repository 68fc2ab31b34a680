"""``fpr demo``'s world options (issue #23 item 2): method profiles (``--profile``) and stress conditions
(``--siblings``, ``--home-background``, ``--occlusion``) as named, checked CLI choices that call the same
function as the Python API, and what each does to a run, measured on the run's own rows.

Golden values below were measured on seed 0 with the shipped specialist ``fpr-world-v3`` (quick sizes);
the full-world equivalents are pinned by tests/galleries/test_world_specialist.py."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import fpr.workflows.demo as demo
from fpr import api
from fpr.cli.main import cli
from fpr.defaults import WORLD_PROFILES
from fpr.errors import InputError
from fpr.galleries import world as W


def test_the_clis_profile_choices_are_the_worlds_profiles():
    """The CLI offers fpr.defaults.WORLD_PROFILES (no NumPy at start-up); it must be the world's list."""
    assert WORLD_PROFILES == tuple(W.PROFILES)


def _fake_result() -> demo.DemoResult:
    return demo.DemoResult("r", "g", "i", "e", "imgs", [], {}, {"total_s": 0.0}, {})


def test_cli_flags_reach_the_python_function_unchanged(monkeypatch, tmp_path):
    seen = {}

    def fake(**kw):
        seen.update(kw)
        return _fake_result()

    monkeypatch.setattr(demo, "run_demo", fake)
    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path), "demo", "--quick", "--profile", "emu2-like",
                                 "--profile", "dreambooth-like", "--home-background", "0.5", "--occlusion",
                                 "--siblings", "0.25", "--format", "json"], obj={})
    assert r.exit_code == 0, r.output
    assert (seen["profiles"], seen["home_background"], seen["occlusion"], seen["siblings"]) == \
        (("emu2-like", "dreambooth-like"), 0.5, True, 0.25)
    seen.clear()
    assert CliRunner().invoke(cli, ["--workspace", str(tmp_path), "demo", "--format", "json"], obj={}).exit_code == 0
    assert (seen["profiles"], seen["home_background"], seen["occlusion"], seen["siblings"]) == ((), 0.0, False, 0.0)
    assert seen["quick"] is True  # fpr demo is the quick demo; --full the full one, --quick still accepted
    for flag, quick in (("--full", False), ("--quick", True)):
        seen.clear()
        r = CliRunner().invoke(cli, ["--workspace", str(tmp_path), "demo", flag, "--format", "json"], obj={})
        assert r.exit_code == 0 and seen["quick"] is quick, r.output


@pytest.mark.parametrize("args, says", [
    (["--profile", "dalle-like"], "'dalle-like' is not one of " + ", ".join(f"'{p}'" for p in W.PROFILES)),
    (["--home-background", "1.5"], "'--home-background': 1.5 is not in the range 0.0<=x<=1.0"),
    (["--home-background", "much"], "'--home-background': 'much' is not a valid float"),
    (["--siblings", "1"], "'--siblings': 1.0 is not in the range 0.0<=x<1.0"),
])
def test_a_bad_world_option_is_one_line_and_exit_2(args, says, tmp_path):
    import subprocess
    import sys

    from tests.docs.conftest import ROOT

    r = subprocess.run([sys.executable, "-m", "fpr", "--workspace", str(tmp_path), "demo", *args],
                       capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("fpr: error: Invalid value for "), r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "demo").exists()  # refused before rendering anything


def test_the_python_function_refuses_an_unknown_profile_before_rendering(tmp_path):
    with pytest.raises(InputError, match="unknown world profile 'dalle-like'") as e:
        demo.run_demo(workspace=tmp_path / "ws", quick=True, profiles=("dalle-like",))
    assert ", ".join(W.PROFILES) in e.value.one_line()
    assert not (tmp_path / "ws").exists()


# A small world for the CLI's end-to-end run (the quick demo's sizes, one method beside the profiles)
TINY = dict(identities=5, gallery=3, references=2, queries=4, methods=("new-scene@0",))


@pytest.mark.slow
def test_profiles_in_a_demo_run_draw_the_declared_mix(monkeypatch, tmp_path):
    """``fpr demo --profile P``: each query of P in the stored run is the graded method its declared mixture
    draws for it; the printed mix (drawn share per method, declared share beside it, mean drift beside the
    expected one) equals a count over the stored rows; the agreement set 'generations' includes P."""
    monkeypatch.setattr(demo, "QUICK", TINY)
    ws = tmp_path / "ws"
    names = ("dreambooth-like", "ip-adapter-plus-like")
    r = CliRunner().invoke(cli, ["--workspace", str(ws), "demo", "--quick", "--no-copy-paste", "--general", "",
                                 *[a for p in names for a in ("--profile", p)]], obj={})
    assert r.exit_code == 0, r.output
    run_id = r.output.split()[1]
    pq = api.load_run(run_id, workspace=ws).per_query
    world = W.World(W.WorldConfig(seed=0, size=96, profiles=names, **TINY))
    lines = r.output.splitlines()
    for name in names:
        rows = pq[pq["method"] == name]
        assert len(rows) == 3 * TINY["identities"] * TINY["queries"]
        # every row is its declared draw: context and drift of World.query_spec for its (identity, k)
        for row in rows.itertuples():
            species, ident = W.parse_identity(row.identity)
            spec = world.query_spec(name, species, ident, int(row.query_id.rsplit("/", 1)[1]))
            assert (row.context, float(row.drift), row.profile) == (spec.context, spec.drift, name)
        drawn = (rows["context"] + "@" + rows["drift"].astype(float).map("{:g}".format)).value_counts()
        assert set(drawn.index) <= set(dict(W.PROFILES[name].mixture))  # nothing outside the declared mixture
        line = next(x for x in lines if x.startswith(f"profile {name} ({len(rows)} queries)"))
        for m, wt in W.PROFILES[name].mixture:
            assert f"{m} {drawn.get(m, 0) / len(rows):.2f} ({wt:.2f})" in line, (m, line)
        assert line.endswith(f"mean drift {rows['drift'].astype(float).mean():.3f} "
                             f"({W.PROFILES[name].drift:.3f})")
    table = next(i for i, x in enumerate(lines) if x.startswith("mAP [95% CI]"))
    drift_col = {x.split()[0]: x.split()[1] for x in lines[table + 3:table + 7]}
    assert drift_col["ip-adapter-plus-like"] == f"{W.PROFILES['ip-adapter-plus-like'].drift:.3f}".rstrip("0")
    # the profiles' queries sit in the 'generations' agreement set, as in the validity line's Spearman
    assert demo.agreement_methods(pq)["generations"] == ["new-scene@0", *names]


def test_profile_draws_converge_on_the_declared_weights():
    """Over 3,000 queries per profile (no rendering: the draw is a function of the query), every drawn share is
    within 4 standard errors of its declared weight and the mean drift within 4 of the expected drift."""
    n_ids, k = 500, 2
    for name, p in W.PROFILES.items():
        world = W.World(W.WorldConfig(seed=3, identities=n_ids, queries=k, size=64, profiles=(name,)))
        draws = [world.query_spec(name, sp, i, q) for sp in W.SPECIES for i in world.ids[sp] for q in range(k)]
        n = len(draws)
        for m, wt in p.mixture:
            share = np.mean([d.rendered == m for d in draws])
            assert abs(share - wt) < 4 * np.sqrt(wt * (1 - wt) / n), (name, m, share, wt)
        drifts = np.array([d.drift for d in draws])
        assert abs(drifts.mean() - p.drift) < 4 * drifts.std() / np.sqrt(n), (name, drifts.mean(), p.drift)


def _run_rows(ws, **kw) -> tuple[demo.DemoResult, pd.DataFrame]:
    res = demo.run_demo(workspace=ws, quick=True, general=None, copy_paste=False, **kw)
    return res, api.load_run(res.run_id, workspace=ws).per_query


# pixels-16's oracle mAP on the quick gallery (references vs gallery, 5 identities per species), home 0 -> 1
HOME_PIXELS_ORACLE = (0.3022, 0.6832)


@pytest.mark.slow
def test_home_background_makes_gallery_backgrounds_identity_correlated(tmp_path):
    """``home_background=1``: every real image of an identity is taken at its home background. A 16x16-pixel
    embedding (``pixels-16``: background and colour, no markings) then retrieves the identity from the gallery
    by background: its oracle mAP (the references as queries) more than doubles. The specialist's stays put."""
    ws = tmp_path / "ws"
    got, spec = [], []
    for home in (0.0, 1.0):
        res, rows = _run_rows(ws, home_background=home, config=dict(methods=("ref-scene@1",)))
        assert res.world["home_background"] == home and res.gallery.endswith("-home1" if home else "-quick")
        spec.append(rows.loc[rows["method"] == "oracle", "ap"].mean())
        idx = api.build_index(res.gallery, "pixels-16", workspace=ws, overwrite=True)
        px = api.run_query(idx.name, res.images_dir + "/queries.csv", workspace=ws, oracle=True, scorers=[])
        got.append(px.per_query.loc[px.per_query["method"] == "oracle", "ap"].mean())
    assert got[1] > 2 * got[0], got
    assert tuple(got) == pytest.approx(HOME_PIXELS_ORACLE, abs=0.002)
    assert abs(spec[1] - spec[0]) < 0.01, spec


# the specialist's Sim AUROC of new-scene@0 over new-scene@0.25 (90 queries each), occlusion off -> on
OCCLUSION_AUROC = (0.7281, 0.5253)


@pytest.mark.slow
def test_occlusion_hides_drift_from_the_specialist_in_a_demo_run(tmp_path):
    """``occlusion=True`` covers the region a query's drift redraws: the specialist's Sim AUROC of drift 0 over
    drift 0.25 (scikit-learn's, over the run's stored rows) falls to near chance."""
    from sklearn.metrics import roc_auc_score

    got = []
    for occ in (False, True):
        res, rows = _run_rows(tmp_path / "ws", occlusion=occ, config=dict(
            methods=("new-scene@0", "new-scene@0.25"), identities=10, queries=3, gallery=3))
        assert res.world["occlusion"] is occ
        a, b = (rows.loc[rows["method"] == m, "sim"].to_numpy(float) for m in ("new-scene@0", "new-scene@0.25"))
        assert len(a) == len(b) == 90
        got.append(roc_auc_score(np.r_[np.ones(len(a)), np.zeros(len(b))], np.r_[a, b]))
    assert got[0] - got[1] > 0.15 and got[1] < 0.6, got
    assert tuple(got) == pytest.approx(OCCLUSION_AUROC, abs=0.002)
