"""copy-paste on the built-in world: each copy transform is caught, re-renderings are not; a held-out seed's
flag rates and AUROC."""
from __future__ import annotations

import pandas as pd
import pytest
from PIL import Image

from fpr.galleries.world import World, WorldConfig
from fpr.scorers import QueryBatch, run_scorers
from fpr.scorers.copy_paste.patches import DEFAULTS

COPY_LIKE = ("paste", "paste-mirror", "paste-rescale", "edit")


def _wide(batch: QueryBatch) -> pd.DataFrame:
    got = run_scorers(["copy-paste"], batch)
    return got.pivot(index="query_id", columns="metric", values="value")


@pytest.fixture(scope="module")
def one_identity(tmp_path_factory):
    """Three references of a leopard (small spots: the hardest species), its re-renderings, and hand-made copies."""
    folder = tmp_path_factory.mktemp("cp")
    w = World(WorldConfig(seed=7, identities=2, references=3, queries=2, species=("leopard",)))
    ident = w.ids["leopard"][0]
    refs = []
    for k in range(3):
        refs.append(str(folder / f"ref{k}.png"))
        w.real_image("leopard", ident, "reference", k).save(refs[-1])
    ref = Image.open(refs[1]).convert("RGB")
    grey = (128, 128, 128)
    small = ref.resize((77, 77), Image.BILINEAR)
    rescaled = Image.new("RGB", (96, 96), (90, 140, 200))
    rescaled.paste(small, (12, 8))
    cases = {
        "mirrored": ref.transpose(Image.FLIP_LEFT_RIGHT),
        "rescaled-0.8-moved": rescaled,
        "enlarged-1.25-cropped": ref.resize((120, 120), Image.BILINEAR).crop((12, 12, 108, 108)),
        "cropped": ref.crop((10, 6, 96, 90)),
        "rotated-5deg": ref.rotate(5, resample=Image.BILINEAR, fillcolor=grey),
        "jpeg-q50": ref,
    }
    paths = {}
    for name, im in cases.items():
        paths[name] = str(folder / (f"{name}.jpg" if "jpeg" in name else f"{name}.png"))
        im.save(paths[name], quality=50) if "jpeg" in name else im.save(paths[name])
    for m in ("faithful", "drift-0.25", "generic"):
        for k in range(2):
            paths[f"{m}-{k}"] = str(folder / f"{m}-{k}.png")
            w.query_image(m, "leopard", ident, k)[0].save(paths[f"{m}-{k}"])
    names = list(paths)
    batch = QueryBatch(names, [paths[n] for n in names], ["x"] * len(names), ["leopard"] * len(names),
                       [None] * len(names), [refs] * len(names), device="cpu")
    return _wide(batch)


@pytest.mark.parametrize("case", ["mirrored", "rescaled-0.8-moved", "enlarged-1.25-cropped", "cropped",
                                  "rotated-5deg", "jpeg-q50"])
def test_each_copy_transform_is_flagged(one_identity, case):
    row = one_identity.loc[case]
    assert row["flag"] == 1 and row["score"] >= DEFAULTS["threshold"], row.to_dict()
    assert row["score"] == row["pixel"] and 0 <= row["score"] <= 1
    assert row["mirrored"] == (1.0 if case == "mirrored" else 0.0)


def test_re_renderings_are_not_flagged(one_identity):
    renders = one_identity.loc[[n for n in one_identity.index if n[-2:] in ("-0", "-1")]]
    assert len(renders) == 6 and (renders["flag"] == 0).all(), renders.to_dict()
    copies = one_identity.drop(renders.index)
    assert copies["score"].min() >= 2 * renders["score"].max()


def test_held_out_world_seed_flag_rates_and_auroc(tmp_path):
    """Seed 4242 is neither a calibration (101, 102) nor a validation seed (201, 202) of the benchmark."""
    from sklearn.metrics import roc_auc_score

    build = World(WorldConfig(seed=4242, identities=2, gallery=1, references=3, queries=2,
                              methods=("faithful",) + COPY_LIKE)).write(tmp_path / "w")
    q = pd.DataFrame(build.queries)
    batch = QueryBatch(list(q["query_id"]), list(q["path"]), list(q["identity"]), list(q["group"]),
                       [None] * len(q), [r.split(";") for r in q["reference_paths"]], device="cpu")
    wide = _wide(batch).join(q.set_index("query_id")["method"])
    rates = wide.groupby("method")["flag"].mean()
    assert rates["faithful"] == 0.0, rates.to_dict()
    assert all(rates[m] >= 11 / 12 for m in COPY_LIKE), rates.to_dict()  # 12 queries each: at most one miss
    y = wide["method"] != "faithful"
    assert roc_auc_score(y, wide["score"]) >= 0.97
    assert (wide["score"] == wide["pixel"]).all() and wide["score"].between(0, 1).all()


def test_default_threshold_is_the_calibrated_one():
    """The default is a claim backed by benchmarks/calibrate_copy_paste.py: its table states the calibrated value."""
    import re
    from pathlib import Path

    table = (Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "copy_paste_calibration.md").read_text()
    m = re.search(r"\*\*Calibrated threshold: ([0-9.]+)\*\*", table)
    assert m, "calibration table without its threshold line"
    assert DEFAULTS["threshold"] == pytest.approx(float(m.group(1)), abs=5e-4)
    assert "## Validation seeds 201, 202" in table and "## Calibration seeds 101, 102" in table


def test_scores_do_not_depend_on_worker_processes(tmp_path, monkeypatch):
    """Large batches are matched in forked processes; every value must equal the in-process run's, bit for bit,
    in the input order."""
    from fpr.scorers.copy_paste import scorer as copy_paste

    build = World(WorldConfig(seed=31, identities=2, gallery=1, references=3, queries=2,
                              species=("zebra", "leopard"), methods=("faithful", "paste", "edit"))).write(tmp_path / "w")
    q = pd.DataFrame(build.queries)
    batch = QueryBatch(list(q["query_id"]), list(q["path"]), list(q["identity"]), list(q["group"]),
                       [None] * len(q), [r.split(";") for r in q["reference_paths"]], device="cpu")
    monkeypatch.setattr(copy_paste, "CHUNK", 5)  # several tasks per worker, chunks cut across identities
    monkeypatch.setenv("FPR_SCORE_CACHE", "0")  # both runs match: the second must not come from the score cache
    runs, used = [], []
    for processes in (1, 2):
        monkeypatch.setattr(copy_paste, "_match_processes", lambda n, p=processes: used.append(p) or p)
        runs.append(run_scorers(["copy-paste"], batch))
    assert used == [1, 2]
    pd.testing.assert_frame_equal(runs[0], runs[1], check_exact=True)
    assert list(runs[0]["query_id"].unique()) == list(q["query_id"])
    assert len(runs[0]) == 8 * len(q) and runs[0].loc[runs[0]["metric"] == "flag", "value"].sum() >= 4


def test_worker_processes_only_for_large_batches_from_the_main_thread(monkeypatch):
    import threading

    from fpr.scorers.copy_paste import scorer as copy_paste

    monkeypatch.setattr(copy_paste.os, "cpu_count", lambda: 4)
    monkeypatch.delitem(copy_paste.sys.modules, "ray", raising=False)
    assert copy_paste._match_processes(2 * copy_paste.CHUNK - 1) == 1
    assert copy_paste._match_processes(2 * copy_paste.CHUNK) == 2
    assert copy_paste._match_processes(100 * copy_paste.CHUNK) == 4
    seen = []
    t = threading.Thread(target=lambda: seen.append(copy_paste._match_processes(100 * copy_paste.CHUNK)))
    t.start()
    t.join()
    assert seen == [1]  # e.g. the HTTP service's worker threads
    monkeypatch.setitem(copy_paste.sys.modules, "ray", object())
    assert copy_paste._match_processes(100 * copy_paste.CHUNK) == 1


def _noise(path, seed: int):
    import numpy as np

    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (48, 48, 3), dtype=np.uint8), "RGB").save(path)
    return str(path)


def test_queries_without_reference_paths_are_said_to_be_checked_only_against_references(tmp_path, capsys):
    """#27: copy-paste compares a query with its references; when the queries file gives none, the identity's
    reference set stands in, and its gallery images go unchecked: one warning line with the share, and the
    run's provenance records it. Queries with their own reference_paths give no warning."""
    from fpr.scorers.copy_paste.scorer import reference_coverage

    refs = [_noise(tmp_path / f"r{k}.png", k) for k in range(2)]
    gallery = [_noise(tmp_path / f"g{k}.png", 10 + k) for k in range(6)]
    q = [_noise(tmp_path / f"q{k}.png", 20 + k) for k in range(3)]
    batch = QueryBatch(["q0", "q1", "q2"], q, ["a", "a", "a"], ["g", "g", "g"], [None] * 3, [refs, refs, refs[:1]],
                       device="cpu", options={"copy-paste.encoder": "pixels-16"},
                       gallery_paths=gallery, gallery_identities=["a"] * 4 + ["b"] * 2, gallery_groups=["g"] * 6,
                       explicit_references=[False, False, True])
    cov = reference_coverage(batch)
    # two implicit queries, each with 2 references and 4 gallery images of identity a: 8 of 12 images unchecked
    assert cov == {"reference_paths": 1, "identity_references": 2, "unchecked_share": 8 / 12}
    out = run_scorers(["copy-paste"], batch)
    err = capsys.readouterr().err
    assert err.count("fpr: warning: copy-paste compared 2 of 3 queries only with their identity's reference images") == 1
    assert "67% of those identities' images" in err and "\n" not in err.strip()
    assert out.attrs["provenance"]["copy-paste"] == {"references": cov}
    explicit = QueryBatch(["q0"], q[:1], ["a"], ["g"], [None], [refs], device="cpu",
                          options={"copy-paste.encoder": "pixels-16"}, explicit_references=[True])
    run_scorers(["copy-paste"], explicit)
    assert "warning" not in capsys.readouterr().err


def test_a_query_or_reference_without_texture_is_nan_with_its_reason_and_the_batch_goes_on(tmp_path, monkeypatch):
    """#33: a uniform grey, black or blurred query (no textured patch) ended the whole run with "cannot reshape
    array of size 0"; now it is NaN with the reason in the note, its batch-mates are scored, and the rows are kept
    in the score cache under the image's content (a pure function of it: the rerun returns them bit for bit)."""
    import numpy as np
    from PIL import ImageFilter

    from fpr.scorers.copy_paste.scorer import CopyPaste

    refs = [_noise(tmp_path / f"r{k}.png", k) for k in range(2)]
    flat = {"grey": Image.new("RGB", (64, 64), (128, 128, 128)), "black": Image.new("RGB", (96, 80), (0, 0, 0)),
            "blurred": Image.open(refs[0]).filter(ImageFilter.GaussianBlur(12))}
    paths = []
    for name, im in flat.items():
        paths.append(str(tmp_path / f"{name}.png"))
        im.save(paths[-1])
    names = [*flat, "copy"]
    paths.append(refs[0])  # an exact copy of reference 0, in the same batch
    batch = QueryBatch(names, paths, ["a"] * 4, ["g"] * 4, [None] * 4, [refs] * 4, device="cpu")
    first = run_scorers(["copy-paste"], batch)
    wide = first.pivot(index="query_id", columns="metric", values="value")
    for name in flat:
        row = wide.loc[name]
        assert row.drop("appearance").isna().all() and row["appearance"] < 0.98, row.to_dict()
        notes = first[(first["query_id"] == name) & (first["metric"] != "appearance")]["note"]
        assert len(notes) == 7 and notes.str.startswith("textureless image: the query has no textured patch (uniform, blank").all()
    assert wide.loc["copy", "flag"] == 1.0 and wide.loc["copy", "score"] == 0.84375  # noise, exact copy
    monkeypatch.setattr(CopyPaste, "score", lambda self, batch: pytest.fail(f"scored again: {batch.query_ids}"))
    pd.testing.assert_frame_equal(run_scorers(["copy-paste"], batch), first)
    monkeypatch.undo()
    # every reference flat (a flat cartoon): the documented fallback, the appearance alone decides
    flat_refs = QueryBatch(["grey", "copy"], [paths[0], refs[0]], ["a"] * 2, ["g"] * 2, [None] * 2,
                           [[paths[0], paths[1]]] * 2, device="cpu")
    out = run_scorers(["copy-paste"], flat_refs)
    w = out.pivot(index="query_id", columns="metric", values="value")
    assert (w["score"] == w["appearance"].clip(0, 1)).all() and (w["flag"] == 0.0).all(), w.to_dict()
    assert w["pixel"].isna().all()
    notes = out[out["metric"] == "score"].set_index("query_id")["note"]
    assert notes["copy"] == "no reference has a textured patch: score = appearance"
    assert notes["grey"].startswith("no reference has a textured patch: score = appearance; outside copy-paste's")


def test_queries_outside_the_calibrated_domain_get_a_note_and_one_warning(tmp_path, capsys):
    """#33: on upsampled low-texture images (8x8 digits shown at 64 px) copy-paste flagged non-copies (scores up to
    0.96 at a 0.38 cut) without a word. Tiny, low-texture and upsampled queries now carry the reason in their note
    and the run one warning line with their count; in-domain queries (noise, the world) get neither."""
    import numpy as np

    from fpr.scorers.copy_paste.patches import Domain

    rng = np.random.default_rng(3)
    refs = [_noise(tmp_path / f"r{k}.png", k) for k in range(2)]
    blocky = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).resize((64, 64), Image.BILINEAR)
    tiny = Image.fromarray(rng.integers(0, 256, (30, 30, 3), dtype=np.uint8))
    cases = {"upsampled": blocky, "tiny": tiny, "noise": Image.open(refs[1])}
    paths = []
    for name, im in cases.items():
        paths.append(str(tmp_path / f"{name}.png"))
        im.save(paths[-1])
    d = {name: Domain.of(im) for name, im in cases.items()}
    assert d["upsampled"].side == 64 and d["upsampled"].detail < 0.005 and d["upsampled"].textured < 0.10
    assert d["tiny"].side == 30 and d["tiny"].reasons()[0] == "tiny (30 px < 48)"
    assert d["noise"].reasons() == [] and d["noise"].textured > 0.99 and d["noise"].detail > 0.15
    batch = QueryBatch(list(cases), paths, ["a"] * 3, ["g"] * 3, [None] * 3, [refs] * 3, device="cpu")
    out = run_scorers(["copy-paste"], batch)
    err = capsys.readouterr().err
    assert err.count("fpr: warning: copy-paste: 2 of 3 queries are outside its calibrated domain") == 1
    notes = out[out["metric"] == "score"].set_index("query_id")["note"]
    assert notes["noise"] == ""
    assert notes["upsampled"].startswith("outside copy-paste's calibrated domain (the built-in world's 96 px textured "
                                         "renders): query low texture (") and "upsampled or blurred (detail" in notes[
        "upsampled"] and "tiny" not in notes["upsampled"]
    assert notes["tiny"].startswith("outside copy-paste's calibrated domain") and "tiny (30 px < 48)" in notes["tiny"]
    assert out[out["metric"] == "score"].set_index("query_id")["value"]["noise"] == 0.8854166666666666  # scored as usual (an exact copy of r1)


def test_a_thin_strip_is_outside_the_domain_and_a_landscape_photo_is_not():
    """#33: a 4000x20 strip keeps one row of 8-px patches at the working size; past 4:1 a query is 'thin'."""
    import numpy as np

    from fpr.scorers.copy_paste.patches import Domain

    rng = np.random.default_rng(7)
    strip = Domain.of(Image.fromarray(rng.integers(0, 256, (40, 400, 3), dtype=np.uint8)))
    wide = Domain.of(Image.fromarray(rng.integers(0, 256, (100, 200, 3), dtype=np.uint8)))
    assert strip.aspect == 10.0 and strip.reasons() == ["thin (sides 10:1 > 4:1)"]
    assert wide.aspect == 2.0 and wide.reasons() == []
