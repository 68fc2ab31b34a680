"""Every environment and file fault of issue 8 (the parts in fpr/files, images, index, encoders) through the CLI:
exit code 2 and one line, never a traceback or "internal error"."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from fpr.encoders.weights import weights_dir
from tests.conftest import run_cli, write_image
from tests.test_images import bomb_png

run = run_cli


def one_line_error(res, *needles) -> str:
    """Exit 2, and the error is one line with every needle; nothing of Python's internals."""
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    errors = [ln for ln in res.output.splitlines() if "rror" in ln]
    assert len(errors) == 1, res.output
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


@pytest.fixture
def flow(tmp_path, tiny_tree):
    ws = tmp_path / "ws"
    run(ws, "gallery", "import", "--name", "g", "--folder", str(tiny_tree), "--references", "1")
    run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    rows = [{"path": str(write_image(tmp_path / "q" / f"{grp}{i}.png", seed=1000 * g + 10 * i + 3)),
             "identity": f"{grp}-{i}", "group": grp, "method": "m"}
            for g, grp in enumerate(("cats", "dogs")) for i in range(3)]
    pd.DataFrame(rows).to_csv(tmp_path / "queries.csv", index=False)
    return ws, tmp_path / "queries.csv"


def test_unknown_device_lists_valid_ones(flow, tmp_path):
    ws, queries = flow
    one_line_error(run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16", "--name", "x",
                       "--device", "tpu", ok=False),
                   "unknown device 'tpu'", "valid devices: auto, cpu, cuda, cuda:N, mps")
    one_line_error(run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--device", "tpu", ok=False),
                   "unknown device 'tpu'")
    pd.DataFrame({"path": [str(write_image(tmp_path / "e.png", seed=1))]}).to_csv(tmp_path / "e.csv", index=False)
    one_line_error(run(ws, "embed", "--encoder", "pixels-16", "--images", str(tmp_path / "e.csv"), "--out",
                       str(tmp_path / "e.npy"), "--device", "tpu", ok=False), "unknown device 'tpu'")


@pytest.mark.parametrize("args, needle", [
    (["index", "build", "--gallery", "g", "--encoder", "pixels-16", "--batch-size", "0"], "--batch-size"),
    (["index", "build", "--gallery", "g", "--encoder", "pixels-16", "--workers", "-1"], "--workers"),
    (["query", "--index", "g-pixels-16", "--queries", "Q", "--top-k", "-1"], "--top-k"),
    (["query", "--index", "g-pixels-16", "--queries", "Q", "--batch-size", "-5"], "--batch-size"),
    (["ablate", "--gallery", "g", "--encoder", "pixels-16", "--repeats", "0"], "--repeats"),
    (["encoders", "train", "--id", "x", "--epochs", "0"], "--epochs"),
])
def test_bad_option_values_are_refused_before_any_work(flow, args, needle):
    ws, queries = flow
    res = run(ws, *[str(queries) if a == "Q" else a for a in args], ok=False)
    one_line_error(res, needle, "is not in the range")


def test_decompression_bomb_in_a_gallery_is_one_line_and_stores_nothing(tmp_path, tiny_tree):
    ws = tmp_path / "ws"
    bomb = tiny_tree / "cats" / "cats-0" / "9.png"
    bomb.write_bytes(bomb_png())
    one_line_error(run(ws, "gallery", "import", "--name", "g", "--folder", str(tiny_tree), ok=False),
                   str(bomb), "decompression bomb")
    listed = run(ws, "gallery", "list", ok=False)  # nothing stored: not even the workspace was made
    assert listed.exit_code == 2 and "no fpr workspace here" in listed.stderr


def test_skip_unreadable_skips_a_decompression_bomb_query(flow, tmp_path):
    ws, queries = flow
    df = pd.read_csv(queries)
    (tmp_path / "bomb.png").write_bytes(bomb_png())
    df.loc[1, "path"] = str(tmp_path / "bomb.png")
    df.to_csv(tmp_path / "bad.csv", index=False)
    one_line_error(run(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "bad.csv"), ok=False),
                   "bomb.png", "decompression bomb")
    out = json.loads(run(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "bad.csv"),
                         "--skip-unreadable", "--run", "s", "--format", "json").stdout)
    assert out["run"]["n_skipped"] == 1 and "q000001" in out["skipped"]


@pytest.mark.parametrize("file, damage", [("index.faiss", b"garbage"), ("card.json", b"{oops"),
                                          ("item_ids.npy", b"\x93NUMPY")])
def test_damaged_index_is_one_line_naming_the_file_and_the_rebuild(flow, file, damage):
    ws, queries = flow
    [folder] = [p.parent for p in (ws / "indices" / "g-pixels-16").rglob("card.json")]  # the current version
    (folder / file).write_bytes(damage)
    one_line_error(run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), ok=False),
                   "index 'g-pixels-16' is damaged", file, "--overwrite")


def test_unwritable_export_folder(flow, tmp_path):
    ws, queries = flow
    run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "r")
    (tmp_path / "plain").write_text("a file, not a folder")
    one_line_error(run(ws, "export", "--run", "r", "--out", str(tmp_path / "plain" / "out.csv"), ok=False),
                   str(tmp_path / "plain"), "a file is in the way")


def test_unwritable_cache_folder_is_one_warning_and_the_index_is_built(flow, tmp_path, monkeypatch):
    """fpr.cache's one policy (issue #36): an unwritable embedding cache warns and the run goes on."""
    ws, _ = flow
    (tmp_path / "plain").write_text("x")
    monkeypatch.setenv("FPR_CACHE_DIR", str(tmp_path / "plain" / "cache"))
    res = run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16", "--name", "n")
    warned = [line for line in res.output.splitlines() if "embedding cache" in line]
    assert len(warned) == 1 and str(tmp_path / "plain") in warned[0] and "set FPR_CACHE_DIR to a writable" in warned[0]


def test_broken_trained_card_is_listed_and_its_use_is_one_line(tmp_path):
    folder = weights_dir() / "mine"
    folder.mkdir(parents=True)
    (folder / "fpr-encoder.json").write_text('{"id": "mine", "architecture": "fpr-cnn-s", "dim": 8,, }')
    rows = {r["id"]: r for r in json.loads(run(tmp_path / "ws", "encoders", "list", "--format", "json").stdout)}
    assert rows["mine"]["status"] == "broken" and "not valid JSON" in rows["mine"]["reason"]
    assert "broken" in run(tmp_path / "ws", "encoders", "list").stdout
    pd.DataFrame({"path": [str(write_image(tmp_path / "e.png", seed=1))]}).to_csv(tmp_path / "e.csv", index=False)
    one_line_error(run(tmp_path / "ws", "embed", "--encoder", "mine", "--images", str(tmp_path / "e.csv"), "--out",
                       str(tmp_path / "e.npy"), ok=False), "encoder 'mine' is broken", "not valid JSON")


def test_incomplete_weights_folder_is_listed_as_incomplete(tmp_path):
    folder = weights_dir() / "bioclip-2"
    folder.mkdir(parents=True)
    (folder / "open_clip_model.safetensors").write_bytes(b"w")
    rows = {r["id"]: r for r in json.loads(run(tmp_path / "ws", "encoders", "list", "--format", "json").stdout)}
    assert rows["bioclip-2"]["status"] == "incomplete" and "open_clip_config.json" in rows["bioclip-2"]["where"]


def test_pickle_stored_under_a_safetensors_name_can_no_longer_happen(tmp_path):
    """The reported bug: 'fpr encoders import dinov2-vitb14 weights.pth' stored the pickle as model.safetensors."""
    import torch

    torch.save({"not": torch.zeros(1)}, tmp_path / "weights.pth")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_base_patch14_dinov2",  # a tiny ViT
                                                      "model_args": {"embed_dim": 48, "depth": 1, "num_heads": 2}}))
    one_line_error(run(tmp_path / "ws", "encoders", "import", "dinov2-vitb14", str(tmp_path / "weights.pth"),
                       ok=False), "dinov2-vitb14")
    assert not (weights_dir() / "dinov2-vitb14").exists()


def test_usage_errors_are_one_line_through_the_console_script():
    import subprocess
    import sys

    for args, needle in ((["index", "build", "--gallery", "g", "--encoder", "e", "--batch-size", "0"],
                          "Invalid value for '--batch-size'"), (["nosuch"], "No such command 'nosuch'")):
        out = subprocess.run([sys.executable, "-m", "fpr", *args], capture_output=True, text=True, timeout=120)
        assert out.returncode == 2 and out.stdout == ""
        assert out.stderr.startswith("fpr: error: ") and needle in out.stderr and out.stderr.count("\n") == 1


def _bad_plots(tmp_path):
    """--plot paths that cannot be written: (path, needle of the one-line error)."""
    (tmp_path / "a-file").write_text("x")
    return [(str(tmp_path / "a-file" / "fig.png"), "cannot create folder"),
            ("/proc/fpr-no-such-folder/fig.png", "cannot create folder"),
            ("/proc/fig.png", "cannot write to folder"),
            (str(tmp_path / "fig.xyz"), "--plot must end in .png, .pdf, .svg, got 'fig.xyz'")]


def test_meta_plot_faults_are_one_line(flow, tmp_path):
    ws, queries = flow
    df = pd.read_csv(queries).assign(drift=[0.0, 0.5, 1.0] * 2)
    df.to_csv(tmp_path / "drift.csv", index=False)
    run(ws, "query", "--index", "g-pixels-16", "--queries", str(tmp_path / "drift.csv"), "--run", "d")
    for plot, needle in _bad_plots(tmp_path):
        one_line_error(run(ws, "meta", "--run", "d", "--truth", "drift", "--n-boot", "10", "--plot", plot, ok=False),
                       needle)


def test_ablate_plot_faults_are_one_line_and_lose_nothing(flow, tmp_path):
    ws, queries = flow
    args = ["ablate", "--gallery", "g", "--encoder", "pixels-16", "--queries", str(queries), "--per-identity", "1",
            "--identities", "2", "--sampling", "random", "--repeats", "1", "--workers", "0", "--run-prefix", "ab"]
    run(ws, *args)
    stored = run(ws, "sql", "SELECT count(*) AS n FROM ablations WHERE ablation = 'ab'", "--format", "csv").output
    for plot, needle in _bad_plots(tmp_path):
        one_line_error(run(ws, *args, "--overwrite", "--plot", plot, ok=False), needle)
    assert run(ws, "sql", "SELECT count(*) AS n FROM ablations WHERE ablation = 'ab'", "--format", "csv").output \
        == stored
