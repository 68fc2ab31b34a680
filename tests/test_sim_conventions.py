"""The released Sim conventions (docs/reproduce-paper.md), on values computed by hand.

DreamBooth rows: mean cosine to all the identity's references (leave ``reference_paths`` empty);
other methods: cosine to the one reference the image was conditioned on (that path in
``reference_paths``)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fpr.api as api
from fpr.encoders.embed import embed_paths
from fpr.encoders.registry import load_encoder
from fpr.galleries.records import ImageRecord
from tests.conftest import write_image


def test_dreambooth_and_single_reference_sim(tmp_path, workspace):
    recs, refs = [], {}
    for i, ident in enumerate(("a", "b")):
        for k in range(6):
            p = write_image(tmp_path / ident / f"{k}.png", seed=10 * i + k, size=24)
            role = "reference" if k < 3 else "gallery"
            recs.append(ImageRecord(str(p), ident, "g", role))
            if role == "reference":
                refs.setdefault(ident, []).append(str(p))
    api.import_gallery("sims", recs, workspace=workspace)
    api.build_index("sims", "pixels-16", name="sims-px", workspace=workspace)
    q = [str(write_image(tmp_path / "gen" / f"{j}.png", seed=500 + j, size=24)) for j in range(2)]
    qdf = pd.DataFrame({"path": q, "identity": ["a", "a"], "group": ["g", "g"],
                        "method": ["dreambooth", "ip_adapter"], "reference_paths": ["", refs["a"][1]]})
    res = api.run_query("sims-px", qdf, workspace=workspace)
    sim = dict(zip(res.per_query["method"], res.per_query["sim"]))
    enc = load_encoder("pixels-16")
    qv = embed_paths(enc, q).vectors.astype(np.float64)
    rv = embed_paths(enc, refs["a"]).vectors.astype(np.float64)
    assert sim["dreambooth"] == pytest.approx(float((rv @ qv[0]).mean()), abs=1e-6)
    assert sim["ip_adapter"] == pytest.approx(float(rv[1] @ qv[1]), abs=1e-6)
    assert sim["dreambooth"] != pytest.approx(float(rv[1] @ qv[0]), abs=1e-3)  # the two conventions differ


def test_report_names_the_sim_definition(tmp_path, tiny_tree):
    from click.testing import CliRunner

    from fpr import api
    from fpr.cli.main import cli

    ws = tmp_path / "ws"
    api.import_gallery("g", api.read_folder(tiny_tree), api.GallerySpec(references_per_identity=1), workspace=ws)
    api.build_index("g", "pixels-16", workspace=ws)
    one = sorted(tiny_tree.glob("cats/cats-0/*.png"))
    q = tmp_path / "q.csv"
    q.write_text("path,identity,group,method,sim_reference,reference_paths\n"
                 f"{one[3]},cats-0,cats,a,{one[2]},\n{one[3]},cats-0,cats,b,,{one[1]};{one[2]}\n"
                 f"{one[3]},cats-0,cats,c,,\n")
    res = api.run_query("g-pixels-16", q, run="r", workspace=ws)
    assert res.per_query["sim_source"].tolist() == ["sim_reference", "reference_paths", "identity"]
    assert res.sim_definition == {"identity": 1, "reference_paths": 1, "sim_reference": 1}
    out = CliRunner().invoke(cli, ["--workspace", str(ws), "report", "--run", "r"]).stdout
    assert "Sim: mean cosine to every reference image of the query's identity" in out
    assert "the query's own sim_reference image" in out
