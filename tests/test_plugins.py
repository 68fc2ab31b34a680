"""Third-party scorers and encoders register through entry points (groups fpr.scorers, fpr.encoders).

The test installs a tiny package (a module plus its .dist-info with entry_points.txt, the layout pip
writes) into a folder and runs fpr in a subprocess with that folder on the path."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = '''
import numpy as np
import pandas as pd
import torch

from fpr.encoders.preprocess import Preprocessing
from fpr.encoders.registry import EncoderSpec, register
from fpr.encoders.weights import WeightsSource
from fpr.scorers import Scorer, register_scorer
from fpr.scorers.options import Option


class Brightness(Scorer):
    name = "demo-brightness"
    description = "mean grey level of the generated image (a plugin test)"
    needs = frozenset({"image"})
    metrics = ("mean",)
    options = (Option("scale", float, 1.0, "multiplier"),)

    def score(self, batch):
        from fpr.images import load_rgb
        scale = self.option_values(batch.options)["scale"]
        return pd.DataFrame({"query_id": batch.query_ids, "metric": "mean",
                             "value": [scale * float(np.asarray(load_rgb(p)).mean()) for p in batch.paths]})


register_scorer(Brightness())


class Mean(torch.nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3))


register(EncoderSpec(id="demo-mean-rgb", family="plugin", dim=3,
                     preprocessing=Preprocessing(name="squash32-unit", size=32, mean=(0.5, 0.5, 0.5),
                                                 std=(0.5, 0.5, 0.5)),
                     weights=WeightsSource(kind="none"), build=lambda w: Mean(),
                     description="mean colour (a plugin test)", tags=("plugin",)))
'''


def _install(site: Path, body: str, module: str = "fpr_demo_plugin") -> None:
    (site / f"{module}.py").write_text(body)
    info = site / f"{module}-0.1.dist-info"  # as a wheel names it: the project name with underscores
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[fpr.scorers]\ndemo-brightness = {module}\n\n"
                                           f"[fpr.encoders]\ndemo-mean-rgb = {module}\n")


def _run(site: Path, code: str) -> subprocess.CompletedProcess:
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(repo)])}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.slow
def test_an_installed_plugin_adds_a_scorer_and_an_encoder(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install(site, PLUGIN)
    from PIL import Image
    img = tmp_path / "grey.png"
    Image.new("RGB", (8, 8), (100, 100, 100)).save(img)
    code = f"""
import json

from fpr.scorers import QueryBatch, all_scorers, run_scorers
from fpr.encoders.registry import all_specs, load_encoder
from fpr.encoders.embed import embed_paths
batch = QueryBatch(["q1"], [{str(img)!r}], ["i"], ["g"], [None], [[]], options={{"demo-brightness.scale": "2"}})
out = run_scorers(["demo-brightness"], batch)
vec = embed_paths(load_encoder("demo-mean-rgb", device="cpu"), [{str(img)!r}], cache=False).vectors[0]
print(json.dumps({{"scorer": "demo-brightness" in all_scorers(), "encoder": "demo-mean-rgb" in all_specs(),
                  "value": float(out["value"][0]), "vec": [round(float(v), 6) for v in vec]}}))
"""
    res = _run(site, code)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["scorer"] and got["encoder"]
    assert got["value"] == 200.0  # grey level 100, scale 2
    # 100/255 normalised by mean 0.5, std 0.5, averaged; three equal channels, then L2-normalised
    assert got["vec"] == [round(1 / 3 ** 0.5, 6)] * 3 or got["vec"] == [round(-1 / 3 ** 0.5, 6)] * 3


def test_a_plugin_that_fails_to_import_is_one_line_naming_it(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    _install(site, "raise RuntimeError('broken on purpose')\n")
    res = _run(site, "from fpr.scorers import all_scorers\nall_scorers()")
    assert res.returncode != 0
    assert "plugin 'demo-brightness' (fpr.scorers, from fpr-demo-plugin 0.1) failed to load: RuntimeError: " \
           "broken on purpose" in res.stderr
