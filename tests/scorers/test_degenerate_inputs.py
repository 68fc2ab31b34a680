"""Issue #33: every registered scorer, over queries and references made of degenerate images (uniform, black,
1x1, 8x8 upsampled, 4000x20, alpha only, CMYK, 16-bit, palette, animated, EXIF-rotated), completes and gives
every query a finite value or NaN with a non-empty reason -- never an exception, never a silent NaN.

The scorers run on this offline machine with the stand-ins their own tests use (tiny random-initialised models
in the real layouts, the pixels-16 encoder, the loopback judge server); the list is the registry's, so a new
scorer without an offline stand-in here fails :func:`test_every_registered_scorer_has_an_offline_setup`."""
from __future__ import annotations

import math
import re
import shutil

import pandas as pd
import pytest

from fpr.metrics.reasons import reason_phrase
from fpr.scorers import QueryBatch, all_scorers, get_scorer, run_scorers
from tests.degenerate_images import DEGENERATE, write_degenerate_images
from tests.scorers.judges.conftest import judge_env, server, tiny_owlv2  # noqa: F401 - the fixtures
from tests.scorers.refvnli.test_scorer import tiny_checkpoint  # noqa: F401 - the fixture
from tests.scorers.test_scorers import tiny_clip  # noqa: F401 - the fixture

JUDGED = ("dreambench-concept", "dreambench-prompt", "viescore", "cigeval", "hwpq")
# What each scorer reads beside the image (the VISTAR scorers' expected values, as fpr vistar run fills them).
EXTRAS = {"vistar-tr": {"expected_text": "OPEN"}, "vistar-li": {"light_direction": "left"},
          "vistar-cse": {"panels": "2x2", "sub_prompts": "a dog; a cat"},
          "vistar-cpa": {"expected_count": "1", "expected_posture": "standing", "expected_expression": "happy"},
          "hwpq": {"aspect": "MA"}}


OFFLINE = {"clip-t", "copy-paste", "vistar-tr", "vistar-li", "vistar-cse", "vistar-gc", "vistar-psc", "vistar-cpa",
           "refvnli", *JUDGED}  # the scorers _offline_options knows


def _offline_options(name: str, request, tmp_path, monkeypatch) -> dict:
    """The options (and fixtures) that let scorer ``name`` run here without a download."""
    if name in JUDGED:
        request.getfixturevalue("judge_env")
    if name == "clip-t":
        request.getfixturevalue("tiny_clip")
        return {"clip-t.encoder": "tiny-clip-test"}
    if name == "copy-paste":
        return {"copy-paste.encoder": "pixels-16"}
    if name == "vistar-cse":
        request.getfixturevalue("tiny_clip")
        return {"vistar-cse.clip_encoder": "tiny-clip-test", "vistar-cse.dino_encoder": "pixels-16",
                "vistar-cse.grounding": str(request.getfixturevalue("tiny_owlv2")), "vistar-cse.subject": "dog",
                "vistar-cse.box_threshold": "0"}
    if name == "vistar-gc":
        from tests.scorers.tiny_models import write_psc_models

        depth = write_psc_models(tmp_path / "gc") / "depth"  # a tiny DPT: the depth cues are computed too
        return {"vistar-gc.padim_encoder": "pixels-16", "vistar-gc.depth_model": str(depth)}
    if name == "vistar-psc":
        from tests.scorers.tiny_models import write_psc_models

        root = write_psc_models(tmp_path / "psc")
        return {"vistar-psc.segmenter": str(root / "seg"), "vistar-psc.depth_model": str(root / "depth")}
    if name == "vistar-cpa":
        from tests.scorers.tiny_models import write_cpa_models

        root = write_cpa_models(tmp_path / "cpa")
        return {"vistar-cpa.detector": str(root / "det"), "vistar-cpa.pose_model": str(root / "pose"),
                "vistar-cpa.expression_model": str(root / "expr"), "vistar-cpa.min_confidence": "0"}
    if name == "refvnli":
        return {"refvnli.model": str(request.getfixturevalue("tiny_checkpoint"))}
    if name == "cigeval":
        from fpr.scorers.judges.tools import OWLV2_ID

        monkeypatch.setenv("FPR_WEIGHTS_DIR", str(tmp_path / "weights"))
        shutil.copytree(request.getfixturevalue("tiny_owlv2"), tmp_path / "weights" / OWLV2_ID)
        return {"cigeval.detector_model": "owlv2", "cigeval.detector_threshold": "0", "cigeval.concurrency": "2"}
    if name in ("hwpq", "dreambench-concept", "dreambench-prompt", "viescore"):
        return {f"{name}.concurrency": "2"}
    if name in ("vistar-tr", "vistar-li"):
        return {}
    raise KeyError(name)


def _batch(tmp_path, name: str, options: dict) -> QueryBatch:
    """One query per degenerate image; its references: the next two degenerate images (so every image is also
    a reference)."""
    paths = [str(p) for p in write_degenerate_images(tmp_path / "images").values()]
    names = list(DEGENERATE)
    n = len(paths)
    refs = [[paths[(i + 1) % n], paths[(i + 2) % n]] for i in range(n)]
    return QueryBatch(query_ids=names, paths=paths, identities=[f"id-{k % 3}" for k in range(n)], groups=["g"] * n,
                      prompts=["a dog standing on a beach"] * n, reference_paths=refs, device="cpu", options=options,
                      workspace=tmp_path / "ws", extras=[dict(EXTRAS.get(name, {})) for _ in range(n)])


def assert_value_or_reason(out: pd.DataFrame, scorer: str, query_ids: list[str]) -> None:
    """Every query has its scorer's primary metric; every row is finite or NaN with a non-empty note whose reason
    phrase (what run summaries count) is short and stable: no digits (no sizes, ids or values), at most 8 words."""
    primary = get_scorer(scorer).primary_metric
    got = out[out["metric"] == primary]
    assert sorted(got["query_id"]) == sorted(query_ids), (scorer, set(query_ids) - set(got["query_id"]))
    for r in out.itertuples():
        if math.isnan(r.value):
            assert isinstance(r.note, str) and r.note.strip(), f"{scorer} {r.query_id} {r.metric}: NaN, no reason"
            phrase = reason_phrase(r.note)
            assert not re.search(r"\d", phrase) and len(phrase.split()) <= 8, (scorer, r.query_id, r.metric, phrase)
        else:
            assert math.isfinite(r.value), (scorer, r.query_id, r.metric, r.value)


def test_every_registered_scorer_has_an_offline_setup():
    """A scorer added to the registry needs its offline stand-in in :func:`_offline_options` (else this fails)."""
    assert set(all_scorers()) <= OFFLINE, sorted(set(all_scorers()) - OFFLINE)


# the judge scorers' questionnaires and agent loops over every image take 3-10 s each: the slow run
HEAVY = {"hwpq", "cigeval"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY else n
                                  for n in sorted(all_scorers())])
def test_every_scorer_gives_every_degenerate_image_a_value_or_a_reason(name, request, tmp_path, monkeypatch):
    options = _offline_options(name, request, tmp_path, monkeypatch)
    batch = _batch(tmp_path, name, options)
    out = run_scorers([name], batch)
    assert_value_or_reason(out, name, batch.query_ids)


ASPECT_PROMPTS = {  # aspect -> a prompt of a relevant [role|aspect] pair, with the expected values it routes
    "TR": '[GD|TR] a shop sign {text="OPEN"}', "LI": '[SA|LI] a box on a table {light="left"}',
    "CSE": '[SA|CSE] a fox in four panels {panels="2x2", sub_prompts="a fox; a den"}',
    "CPA": '[SA|CPA] a man {count="1", posture="standing", expression="happy"}',
    "PSC": "[SA|PSC] a cat on a sofa", "GC": "[GD|GC] a chair in a hall", "SF": "[GD|SF] a cat in ukiyo-e style"}


@pytest.mark.slow  # every VISTAR scorer over the images again, through a stored run: 92 s at load 18 on 2 cores
def test_vistar_run_over_degenerate_images_stores_a_value_or_a_reason_for_each(request, tmp_path, monkeypatch):
    """``fpr vistar run`` with every image of :data:`DEGENERATE` under every aspect (GC with two of the other
    images as its references): the run completes and is stored, each image of each aspect has its aspect's
    metric, finite or NaN with a reason, and the report counts the NaNs by reason."""
    from fpr import api

    options = {}
    for scorer in ("vistar-cse", "vistar-gc", "vistar-psc", "vistar-cpa", "hwpq"):
        options.update(_offline_options(scorer, request, tmp_path, monkeypatch))
    images = write_degenerate_images(tmp_path / "images")
    names = list(images)
    (tmp_path / "gen" / "m").mkdir(parents=True)
    rows = []
    for aspect, prompt in ASPECT_PROMPTS.items():
        for k, (name, path) in enumerate(images.items()):
            pid = f"{aspect.lower()}-{name}"
            shutil.copyfile(path, tmp_path / "gen" / "m" / f"{pid}{path.suffix}")
            refs = ";".join(f"images/{names[(k + j) % len(names)]}{images[names[(k + j) % len(names)]].suffix}"
                            for j in (1, 2)) if aspect == "GC" else ""
            rows.append((pid, prompt, refs))
    pd.DataFrame(rows, columns=["prompt_id", "prompt", "reference_paths"]).to_csv(tmp_path / "prompts.csv",
                                                                                   index=False)
    rep = api.vistar_run(tmp_path / "gen", tmp_path / "prompts.csv", "degenerate", workspace=tmp_path / "ws",
                         options=options, device="cpu")
    tensor = api.sql("SELECT query_id, aspect, score, note FROM vistar_tensor WHERE run_id = 'degenerate'",
                     workspace=tmp_path / "ws")
    assert len(tensor) == len(rows)
    for r in tensor.itertuples():
        if math.isnan(r.score):
            assert isinstance(r.note, str) and r.note.strip(), (r.query_id, r.aspect)
        else:
            assert math.isfinite(r.score), (r.query_id, r.aspect, r.score)
    counted = {c.scorer: c for c in rep.nan_reasons}
    nan = tensor["score"].isna()
    assert sum(c.n_nan for c in counted.values()) == int(nan.sum())
    assert "no reason given" not in {p for c in counted.values() for p, _ in c.reasons}
