"""``fpr demo``'s gallery size and difficulty options and its verdicts on two worlds (issue #32 item 2): the
easy world and the paper-difficulty one, each with its label and config in the JSON (``claims_worlds``)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import fpr.workflows.demo as demo
from fpr.cli.main import cli
from fpr.errors import InputError
from fpr.galleries.world import WorldConfig
from fpr.workflows.meta import claims_frame, encoder_claims


def _claims(shift: float) -> dict:
    """Claims of a synthetic frame: 2 identities x 3 drift levels x 2 contexts, specialist Sim shifted."""
    rows = []
    for ident in ("a", "b"):
        for d in (0.0, 0.25, 1.0):
            for ctx in ("new-scene", "ref-pose"):
                rows.append({"query_id": f"{ident}{d}{ctx}", "method": f"{ctx}@{d:g}", "group": "g", "identity": ident,
                             "drift": d, "context": ctx, "seed": 0, "general_sim": 0.5 - 0.1 * d + shift,
                             "general_map": 0.5, "specialist_sim": 0.9 - 0.5 * d, "specialist_map": 1 - 0.6 * d})
    out = encoder_claims(pd.DataFrame(rows), n_boot=50).as_json()
    out["info"].update({"general": "fpr-general-v2", "specialist": "fpr-world-v3"})  # as the demo adds them
    return out


def _fake_result(worlds: list[dict]) -> demo.DemoResult:
    return demo.DemoResult("r", "g", "i", "fpr-world-v3", "imgs", [], {}, {"total_s": 0.0}, {"world": "easy"},
                           worlds[0]["claims"], worlds[0]["general_runs"], worlds)


def test_cli_prints_one_verdict_block_per_world_and_the_json_lists_them(monkeypatch, tmp_path, capsys):
    from fpr.cli.demo import _print_claims

    worlds = [{"world": "easy", "config": {"identities": 10, "gallery": 10, "lookalikes": 0.0, "family_size": 2},
               "claims": _claims(0.0), "general_runs": {0: ("s0", "g0")}},
              {"world": "paper", "config": {"identities": 10, "gallery": 10, "lookalikes": 0.9, "family_size": 2},
               "claims": _claims(0.05), "general_runs": {0: ("s1", "g1")}}]
    monkeypatch.setattr(demo, "run_demo", lambda **kw: _fake_result(worlds))
    for entry in worlds:  # what fpr demo prints last, once per world
        _print_claims(_fake_result(worlds), entry)
    r = type("R", (), {"output": capsys.readouterr().out})
    assert "\nworld easy (10 identities x 10 gallery images per species): general-purpose encoder" in r.output
    assert ("\nworld paper (10 identities x 10 gallery images per species, look-alike families of 2 sharing 0.9): "
            "general-purpose encoder") in r.output
    assert "fpr meta --run s1 --truth drift --general g1" in r.output
    # each world's verdict lines, in order: easy's two, then paper's two
    verdict_lines = [line for line in r.output.splitlines() if line.startswith("  claim ")]
    expected = [v for w in worlds for v in w["claims"]["verdicts"]]
    assert len(verdict_lines) == 4
    for line, v in zip(verdict_lines, expected):
        assert f"{v['diff']:+.3f} [{v['diff_lo']:+.3f}, {v['diff_hi']:+.3f}]" in line
    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path), "demo", "--format", "json"], obj={})
    out = json.loads(r.stdout)
    assert [(w["world"], w["config"]["lookalikes"]) for w in out["claims_worlds"]] == [("easy", 0.0), ("paper", 0.9)]
    assert out["claims"] == out["claims_worlds"][0]["claims"]


def test_cli_size_and_difficulty_options_reach_the_python_function(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(demo, "run_demo", lambda **kw: seen.update(kw) or _fake_result([
        {"world": "paper", "config": {}, "claims": _claims(0.0), "general_runs": {0: ("s", "g")}}]))
    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path), "demo", "--world", "paper", "--identities", "12",
                                 "--gallery-images", "8", "--lookalikes", "0.5", "--family-size", "3",
                                 "--format", "json"], obj={})
    assert r.exit_code == 0, r.output
    assert (seen["world"], seen["identities"], seen["gallery"], seen["lookalikes"], seen["family_size"]) == \
        ("paper", 12, 8, 0.5, 3)
    r = CliRunner().invoke(cli, ["--workspace", str(tmp_path), "demo", "--world", "hard"], obj={})
    assert r.exit_code == 2 and "'hard' is not one of 'easy', 'paper'" in r.output


def test_unknown_world_is_refused_before_rendering(tmp_path):
    with pytest.raises(InputError, match="unknown demo world 'hard'"):
        demo.run_demo(workspace=tmp_path / "ws", quick=True, world="hard")
    with pytest.raises(InputError, match="unknown demo world 'nope'"):
        demo.run_demo(workspace=tmp_path / "ws", quick=True, verdict_worlds=("easy", "nope"))


def test_named_world_options_override_in_order(monkeypatch, tmp_path):
    """The named world over the sizes, then the explicit options; the paper world's verdict config is its own."""
    from contextlib import contextmanager

    @contextmanager
    def no_background(*args, **kw):  # nothing is rendered or run: only the configs are looked at
        yield {}

    seen = []
    monkeypatch.setattr(demo, "_background_seeds", no_background)
    monkeypatch.setattr(demo, "_run_demo", lambda ws, config, **kw: seen.append((config, kw["extra"])))
    demo.run_demo(workspace=tmp_path / "ws", world="paper", lookalikes=0.5, quick=False)
    config, extra = seen[-1]
    assert (config.identities, config.gallery, config.lookalikes, config.family_size) == (10, 10, 0.5, 2)
    # its own seeds 1, 2 (the run is seed 0), then the easy world's 0, 1, 2, generations only
    assert [(label, c.seed, c.lookalikes) for label, c in extra] == \
        [("paper", 1, 0.5), ("paper", 2, 0.5), ("easy", 0, 0.0), ("easy", 1, 0.0), ("easy", 2, 0.0)]
    assert all("paste" not in c.methods for _, c in extra)
    demo.run_demo(workspace=tmp_path / "ws", quick=True)
    assert seen[-1][1] == []  # quick: one seed, the demo's world only
    demo.run_demo(workspace=tmp_path / "ws")  # the default: quick (fpr demo's; --full is quick=False)
    config, extra = seen[-1]
    assert (config.identities, config.gallery, config.references, config.queries, extra) == (5, 6, 2, 2, [])
    assert demo._stress_tag(WorldConfig(**{**demo.FULL, **demo.PAPER})) == "-look0.9x2"


@pytest.mark.slow  # a quick demo plus one paper-world seed with both encoders: ~1.5 min on 2 cores
def test_demo_verdicts_on_both_worlds_equal_the_stored_runs(tmp_path):
    from fpr import api

    ws = tmp_path / "ws"
    res = demo.run_demo(workspace=ws, quick=True, copy_paste=False, verdict_worlds=("easy", "paper"))
    assert [w["world"] for w in res.claims_worlds] == ["easy", "paper"]
    paper = res.claims_worlds[1]
    assert paper["config"]["lookalikes"] == 0.9 and paper["config"]["identities"] == 10
    spec_run, gen_run = paper["general_runs"][0]
    again = encoder_claims(claims_frame(api.load_run(spec_run, workspace=ws).per_query,
                                        api.load_run(gen_run, workspace=ws).per_query, seed=0), seed=0)
    assert [v["diff"] for v in again.as_json()["verdicts"]] == [v["diff"] for v in paper["claims"]["verdicts"]]
    # the paper world's oracle is in the paper's range, the easy world's is not
    oracle = {w["world"]: next(r for r in w["claims"]["table"] if r["method"] == "oracle") for w in res.claims_worlds}
    assert oracle["easy"]["specialist_map"] > 0.95 and 0.7 < oracle["paper"]["specialist_map"] < 0.85
    assert np.isfinite(res.claims_worlds[1]["claims"]["verdicts"][0]["diff"])
