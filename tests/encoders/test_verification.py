"""Weights verification (published SHA-256 vs the file) and the warnings of a run that measured nothing."""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import save_file

from fpr import api, progress
from fpr.encoders.preprocess import Preprocessing
from fpr.encoders.registry import EncoderSpec, describe, get_spec, register, unregister
from fpr.encoders.weights import WeightsSource, resolve_weights, verify_weights
from fpr.eval import sanity
from fpr.galleries.world import build_world


# --------------------------------------------------------------------------- sanity statistics

def _brute_chance_ap(r: int, n: int) -> float:
    """Mean AP over every placement of r relevant items among n ranks (all equally likely)."""
    aps = []
    for ranks in itertools.combinations(range(1, n + 1), r):
        aps.append(np.mean([(i + 1) / rank for i, rank in enumerate(ranks)]))
    return float(np.mean(aps))


def test_chance_ap_equals_enumeration_and_hand_values():
    assert sanity.chance_ap(np.array([1]), np.array([2]))[0] == pytest.approx(0.75)  # AP 1 or 1/2
    assert sanity.chance_ap(np.array([2]), np.array([3]))[0] == pytest.approx(29 / 36)
    for r, n in [(1, 1), (1, 5), (2, 6), (3, 7), (4, 8), (5, 5)]:
        assert sanity.chance_ap(np.array([r]), np.array([n]))[0] == pytest.approx(_brute_chance_ap(r, n)), (r, n)


def test_mean_pairwise_cosine_equals_the_pairs():
    v = np.random.default_rng(0).normal(size=(7, 5))
    u = v / np.linalg.norm(v, axis=1, keepdims=True)
    pairs = [u[i] @ u[j] for i in range(7) for j in range(7) if i != j]
    assert sanity.mean_pairwise_cosine(v) == pytest.approx(np.mean(pairs), abs=1e-12)


def test_constant_embeddings_warn_and_distinct_ones_do_not():
    same = np.tile(np.random.default_rng(1).normal(size=(1, 16)), (6, 1))
    msg = sanity.constant_embeddings(same + 1e-5 * np.random.default_rng(2).normal(size=same.shape), "enc-x")
    assert msg and "enc-x" in msg and "random or placeholder weights?" in msg
    assert sanity.constant_embeddings(np.random.default_rng(3).normal(size=(6, 16)), "enc-x") is None
    assert sanity.constant_embeddings(same[:2], "enc-x") is None  # too few queries to say
    assert sanity.constant_embeddings(np.zeros((6, 0)), "enc-x") is None  # no vectors (a Ray run)


def _aux(values, scorer="clip-t", metric="clip_t") -> pd.DataFrame:
    return pd.DataFrame({"query_id": [f"q{i}" for i in range(len(values))], "scorer": scorer, "metric": metric,
                         "value": values, "note": ""})


def test_constant_scorer_values_warn_from_five_queries():
    [msg] = sanity.constant_scorers(_aux([0.9999999] * 5, "cse", "consistency"))
    assert "'cse'" in msg and "consistency = 1 for all 5 queries" in msg
    assert sanity.constant_scorers(_aux([1.0] * 4)) == []
    assert sanity.constant_scorers(_aux([0.1, 0.2, 0.1, 0.1, 0.1])) == []
    assert sanity.constant_scorers(_aux([0.3] * 5 + [np.nan])) != []  # NaN (not scored) does not count


def test_oracle_at_chance_warns_only_within_noise():
    r, n = np.full(8, 2), np.full(8, 10)
    chance = sanity.chance_ap(r, n)
    msg = sanity.oracle_at_chance(chance + np.linspace(-0.05, 0.05, 8), r, n, "enc-x")
    assert msg and f"chance ({chance.mean():.3f}, 8 queries)" in msg
    assert sanity.oracle_at_chance(np.ones(8), r, n, "enc-x") is None
    assert sanity.oracle_at_chance(chance[:4], r[:4], n[:4], "enc-x") is None  # too few oracle queries


# --------------------------------------------------------------------------- verification status

def test_shipped_world_encoders_are_verified():
    for eid in ("fpr-world-v1", "fpr-world-v2", "fpr-world-v3", "fpr-general-v1", "fpr-general-v2"):
        row = describe(get_spec(eid))
        assert row["verified"] == "verified" and row["verification"] is None, row
    assert describe(get_spec("pixels-16"))["verified"] == "-"  # a fixed function has no weights


def _placeholder_file(folder, seed: int = 0):
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    save_file({"w": torch.randn(4, 3)}, str(folder / "model.safetensors"))
    return folder / "model.safetensors"


def test_status_follows_the_published_digest(tmp_path):
    f = _placeholder_file(tmp_path / "snap")
    digest = hashlib.sha256(f.read_bytes()).hexdigest()
    base = WeightsSource(kind="hf", repo="example/model", files=("model.safetensors",))
    resolved = resolve_weights("x", base, explicit=f)
    unverified = verify_weights("x", base, resolved)
    assert unverified.status == "unverified" and "fpr encoders fetch x --overwrite" in unverified.detail
    right = dataclasses.replace(base, published_sha256=(("model.safetensors", digest),))
    assert verify_weights("x", right, resolved).status == "verified"
    wrong = dataclasses.replace(base, published_sha256=(("model.safetensors", "0" * 64),),
                                published_from="https://example.org/model")
    mismatch = verify_weights("x", wrong, resolved)
    assert mismatch.status == "mismatch" and str(f) in mismatch.detail and "example.org" in mismatch.detail


def test_registered_pretrained_encoders_without_a_published_value_are_unverified(tmp_path, monkeypatch):
    """No citable checksum is registered for the Hub encoders: a file in their layout is 'unverified'."""
    weights = tmp_path / "weights"
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(weights))
    _placeholder_file(weights / "dinov2-vitb14")
    row = describe(get_spec("dinov2-vitb14"))
    assert row["status"] == "available" and row["verified"] == "unverified"
    assert "fpr encoders fetch dinov2-vitb14" in row["verification"]
    assert describe(get_spec("clip-vit-b-32"))["verified"] == "-"  # missing weights: nothing to verify


def test_a_published_value_is_for_its_file_name_only(tmp_path, monkeypatch):
    """CLIP's registered SHA-256 is that of open_clip_model.safetensors: a different file of that name is a
    mismatch, the repo's other weights file (the pickled .bin) is unverified, not a mismatch."""
    from fpr.encoders.clip import CLIP_REVISION, CLIP_SHA256

    spec = get_spec("clip-vit-b-32")
    assert spec.weights.published_sha256 == (("open_clip_model.safetensors", CLIP_SHA256),)
    assert spec.weights.revision == CLIP_REVISION and len(CLIP_REVISION) == 40 and len(CLIP_SHA256) == 64
    weights = tmp_path / "weights"
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(weights))
    f = _placeholder_file(weights / "clip-vit-b-32")
    f.rename(f.with_name("open_clip_model.safetensors"))
    row = describe(spec)
    assert row["verified"] == "mismatch" and "e6d1bd7789aa" in row["verification"]
    (weights / "clip-vit-b-32" / "open_clip_model.safetensors").rename(weights / "clip-vit-b-32" /
                                                                       "open_clip_pytorch_model.bin")
    row = describe(spec)
    assert row["verified"] == "unverified", row
    assert "open_clip_pytorch_model.bin of 'clip-vit-b-32'" in row["verification"]


def test_fetch_downloads_the_registered_revision(tmp_path, monkeypatch):
    """'fpr encoders fetch' asks the Hub for the pinned snapshot (listing and download), not for main."""
    import huggingface_hub

    from fpr.encoders import weights as W

    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(tmp_path / "weights"))
    for var in ("FPR_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.setenv(var, "0")
    monkeypatch.setattr(W, "_probe_hub", lambda: None)  # no network here: the Hub calls are recorded instead
    asked = []

    class Api:
        def list_repo_files(self, repo, revision=None):
            asked.append(("list", repo, revision))
            return ["model.safetensors", "config.json"]

    def snapshot_download(repo, revision=None, allow_patterns=(), local_dir=None):
        asked.append(("download", repo, revision))
        for name in allow_patterns:
            (Path(local_dir) / name).write_bytes(b"{}")

    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    spec = get_spec("dinov2-vitb14")
    dest = W.fetch_weights("dinov2-vitb14", spec.weights)
    rev = "4685c99dabffe5affac90bd99dbffd25801ae58d"
    assert asked == [("list", "timm/vit_base_patch14_dinov2.lvd142m", rev),
                     ("download", "timm/vit_base_patch14_dinov2.lvd142m", rev)]
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "model.safetensors"]
    assert get_spec("miewid-msv2").weights.revision is None  # nothing citable found: the current main


def test_cli_list_shows_the_verified_column(tmp_path):
    from tests.conftest import run_cli

    out = run_cli(tmp_path / "ws", "encoders", "list", "--format", "json").output
    rows = {r["id"]: r for r in json.loads(out)}
    assert rows["fpr-world-v3"]["verified"] == "verified" and rows["pixels-16"]["verified"] == "-"
    table = run_cli(tmp_path / "ws", "encoders", "list").output
    assert "verified" in table.splitlines()[0]


# --------------------------------------------------------------------------- runs

class _Ignores(torch.nn.Module):
    """An encoder whose output ignores its input: what random weights in a saturated network look like."""

    def __init__(self):
        super().__init__()
        # the same vector at every load, as a file would give (the embedding cache mixes loads)
        self.w = torch.nn.Parameter(torch.randn(1, 8, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        return self.w.expand(len(x), -1) + 0 * x.mean()


@pytest.fixture
def world(tmp_path):
    ws = tmp_path / "ws"
    build = build_world(tmp_path / "w", identities=3, gallery=3, references=3, queries=1,
                        species=["zebra", "giraffe"], methods=["faithful"], size=64)
    api.import_gallery("g", build.records, workspace=ws, source="world")
    return ws, build


@pytest.fixture
def placeholder_encoder(tmp_path, monkeypatch):
    weights = tmp_path / "weights"
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(weights))
    _placeholder_file(weights / "test-placeholder")
    spec = EncoderSpec(id="test-placeholder", family="test", dim=8,
                       preprocessing=get_spec("pixels-16").preprocessing,
                       weights=WeightsSource(kind="hf", repo="example/placeholder", files=("model.safetensors",)),
                       build=lambda resolved: _Ignores())
    assert isinstance(spec.preprocessing, Preprocessing)
    register(spec)
    yield spec
    unregister(spec.id)


def test_run_with_placeholder_weights_says_so(world, placeholder_encoder, capsys):
    ws, build = world
    progress.set_enabled(False)  # warnings are not silenced by -q
    api.build_index("g", "test-placeholder", name="ph", workspace=ws)
    capsys.readouterr()
    res = api.run_query("ph", build.queries_csv, workspace=ws, run="ph", oracle=True)
    err = capsys.readouterr().err
    assert res.provenance["weights_verification"]["status"] == "unverified"
    assert "fpr encoders fetch test-placeholder" in res.provenance["weights_verification"]["detail"]
    lines = [x for x in err.splitlines() if "warning" in x]
    assert any("encoder 'test-placeholder' weights unverified" in x for x in lines), err
    assert any("nearly constant (mean pairwise cosine 1.0000)" in x for x in lines), err
    assert any("nearly constant" in w for w in res.provenance["warnings"])
    stored = api.load_run("ph", workspace=ws).provenance
    assert stored["weights_verification"]["status"] == "unverified" and stored["warnings"] == res.provenance["warnings"]


def test_run_with_mismatching_weights_records_mismatch(world, placeholder_encoder, capsys):
    ws, build = world
    spec = dataclasses.replace(placeholder_encoder, weights=dataclasses.replace(
        placeholder_encoder.weights, published_sha256=(("model.safetensors", "0" * 64),)))
    register(spec, replace=True)
    api.build_index("g", "test-placeholder", name="ph", workspace=ws)
    capsys.readouterr()
    res = api.run_query("ph", build.queries_csv, workspace=ws, run="ph")
    assert res.provenance["weights_verification"]["status"] == "mismatch"
    assert "weights mismatch" in capsys.readouterr().err


def test_a_normal_run_warns_nothing(world, capsys):
    ws, build = world
    api.build_index("g", "fpr-world-v3", name="w3", workspace=ws)
    capsys.readouterr()
    res = api.run_query("w3", build.queries_csv, workspace=ws, run="ok", oracle=True)
    assert "warning" not in capsys.readouterr().err
    assert "weights_verification" not in res.provenance and "warnings" not in res.provenance


def test_cli_run_with_a_tiny_dinov2_in_the_real_layout_warns_under_q(world, tmp_path, monkeypatch):
    """Random weights written as the timm Hub checkpoint (model.safetensors + config.json) in the weights folder."""
    import timm

    from tests.conftest import run_cli

    ws, build = world
    weights = tmp_path / "weights"
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(weights))
    args = {"embed_dim": 48, "depth": 1, "num_heads": 2}
    torch.manual_seed(0)
    src = timm.create_model("vit_base_patch14_dinov2", pretrained=False, num_classes=0, **args)
    folder = weights / "dinov2-vitb14"
    folder.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in src.state_dict().items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_base_patch14_dinov2", "num_classes": 0,
                                                    "model_args": args}))
    real = get_spec("dinov2-vitb14")
    register(dataclasses.replace(real, dim=48), replace=True)  # the shrunk architecture's embedding size
    try:
        run_cli(ws, "-q", "index", "build", "--gallery", "g", "--encoder", "dinov2-vitb14", "--name", "d")
        res = run_cli(ws, "-q", "query", "--index", "d", "--queries", str(build.queries_csv), "--run", "d")
    finally:
        register(real, replace=True)
    warned = [x for x in res.stderr.splitlines() if x.startswith("fpr: warning: encoder 'dinov2-vitb14'")]
    assert len(warned) == 1 and "unverified" in warned[0] and "fpr encoders fetch dinov2-vitb14" in warned[0]
    prov = api.load_run("d", workspace=ws).provenance
    assert prov["weights_verification"]["status"] == "unverified"


def test_counts_and_flags_that_are_legitimately_constant_warn_nothing():
    from fpr.eval import sanity

    assert sanity.constant_scorers(_aux([0.0] * 6, "copy-paste", "flag")) == []  # nothing flagged
    assert sanity.constant_scorers(_aux([1.0] * 6, "viescore", "calls")) == []  # one judge call per query
    assert sanity.constant_scorers(_aux([1.0] * 6, "dreambench-concept", "choice_in_options")) == []
    assert sanity.constant_scorers(_aux([0.9999999] * 6, "vistar-cse", "con")) != []  # the "1.000" consistency
