"""``fpr encoders list|fetch|import`` through the CLI, offline."""
from __future__ import annotations

import csv
import io
import json

import torch
from click.testing import CliRunner
from safetensors.torch import save_file

from fpr.cli.main import cli
from fpr.encoders.weights import weights_dir


def run(*args, ok=True):
    res = CliRunner().invoke(cli, list(args), obj={})
    if ok:
        assert res.exit_code == 0, res.output
    return res


def _miewid_snapshot(folder):
    """A MiewID Hub snapshot (config.json + model.safetensors, published key names) on a small backbone."""
    from fpr.encoders.miewid import MiewIdNative

    folder.mkdir(parents=True)
    native = MiewIdNative("efficientnetv2_rw_t")
    state = {}
    for k, v in native.state_dict().items():
        k = k.replace("gem.", "pooling.", 1) if k.startswith("gem.") else k
        k = "bn." + k[len("neck."):] if k.startswith("neck.") else k
        state[k] = v.contiguous()
    state["final.weight"], state["final.bias"] = torch.zeros(10, 1024), torch.zeros(10)
    save_file(state, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_name": "efficientnetv2_rw_t", "use_fc": False}))
    return folder


def test_list_formats_show_status_and_where():
    rows = json.loads(run("encoders", "list", "--format", "json").output)
    by_id = {r["id"]: r for r in rows}
    for eid in ("clip-vit-b-32", "dinov2-vitb14", "bioclip-2", "miewid-msv2"):
        assert by_id[eid]["status"] == "missing" and "looked in" in by_id[eid]["where"]
        assert by_id[eid]["dim"] > 0 and by_id[eid]["checksum"] is None
    assert by_id["pixels-16"]["status"] == "available"
    table = run("encoders", "list").output
    assert "miewid-msv2" in table and "2152" in table and "missing" in table
    parsed = list(csv.DictReader(io.StringIO(run("encoders", "list", "--format", "csv").output)))
    assert {r["id"] for r in parsed} == set(by_id) and "status" in parsed[0]


def test_fetch_offline_fails_with_one_line():
    res = run("encoders", "fetch", "dinov2-vitb14", ok=False)
    assert res.exit_code != 0
    lines = [ln for ln in res.output.splitlines() if ln.startswith("fpr: error")]
    assert len(lines) == 1 and "dinov2-vitb14" in lines[0] and "fpr encoders import dinov2-vitb14" in lines[0]


def test_import_verifies_copies_and_lists_available(tmp_path):
    snap = _miewid_snapshot(tmp_path / "snapshot")
    out = json.loads(run("encoders", "import", "miewid-msv2", str(snap), "--format", "json").output)
    assert out["status"] == "available" and out["found_in"] == "weights-dir"
    assert out["checksum"].startswith("sha256:")
    assert sorted(p.name for p in (weights_dir() / "miewid-msv2").iterdir()) == ["config.json", "model.safetensors"]
    rows = {r["id"]: r for r in json.loads(run("encoders", "list", "--format", "json").output)}
    assert rows["miewid-msv2"]["status"] == "available" and rows["miewid-msv2"]["checksum"] == out["checksum"]
    again = run("encoders", "import", "miewid-msv2", str(snap), ok=False)
    assert again.exit_code != 0 and "--overwrite" in again.output


def test_import_refuses_weights_that_do_not_load(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    save_file({"something.else": torch.zeros(2)}, str(bad / "model.safetensors"))
    res = run("encoders", "import", "miewid-msv2", str(bad), ok=False)
    assert res.exit_code != 0 and "weights do not match encoder 'miewid-msv2'" in res.output
    assert "something.else" in res.output
    assert not (weights_dir() / "miewid-msv2").exists()
    res = run("encoders", "import", "pixels-16", str(bad), ok=False)
    assert "has no weights" in res.output
