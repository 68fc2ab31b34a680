"""fpr explain end to end on a constructed case: a query made of one identity's half and another's half."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fpr import api
from fpr.files import safe_stem
from fpr.galleries.curate import GallerySpec
from fpr.render.overlay import blend
from tests.conftest import run_cli

SIZE = 48


def _template(seed: int) -> np.ndarray:
    """A smooth random colour field (8x8 blocks upscaled), what pixels-16's thumbnail sees."""
    low = np.random.default_rng(seed).integers(0, 256, (8, 8, 3)).astype(np.uint8)
    return np.asarray(Image.fromarray(low).resize((SIZE, SIZE), Image.NEAREST))


def _noisy(arr: np.ndarray, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(np.clip(arr + rng.normal(0, 8, arr.shape), 0, 255).astype(np.uint8))


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("explain")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FPR_CACHE_DIR", str(tmp / "cache"))
        mp.setenv("FPR_WEIGHTS_DIR", str(tmp / "weights"))
        ws = tmp / "ws"
        t = {name: _template(s) for name, s in (("A", 1), ("B", 2), ("C", 3))}
        for name, arr in t.items():
            for k in range(4):
                p = tmp / "tree" / "g" / name / f"{k}.png"
                p.parent.mkdir(parents=True, exist_ok=True)
                _noisy(arr, 10 * ord(name) + k).save(p)
        half = t["A"].copy()
        half[:, SIZE // 2:] = t["B"][:, SIZE // 2:]  # left: A's, right: B's
        q = tmp / "q" / "half.png"
        q.parent.mkdir()
        _noisy(half, 7).save(q)
        api.import_gallery("g", api.read_folder(tmp / "tree"), GallerySpec(references_per_identity=1), workspace=ws)
        api.build_index("g", "pixels-16", workspace=ws)
        api.run_query("g-pixels-16", pd.DataFrame([{"query_id": "half", "path": str(q), "identity": "A",
                                                    "group": "g", "method": "m"}]), run="r", workspace=ws)
        e = api.explain("r", "half", workspace=ws, out=tmp / "half.png")
        html = api.html_report("r", tmp / "report.html", workspace=ws, explain=True)
        yield tmp, ws, q, e, html


def test_the_map_points_at_the_impostor_half(case):
    _, ws, _, e, _ = case
    v = e.values
    assert v.shape == (SIZE, SIZE) and e.map.impostor == "B" and e.map.true_identity == "A"
    assert e.map.margin > 0
    left, right = v[:, :SIZE // 2 - 4].mean(), v[:, SIZE // 2 + 4:].mean()
    assert left > 0 > right  # A's half carries the true identity's evidence; B's half speaks against it
    m = api.explain("r", "half", workspace=ws, variant="margin", write=False).map  # against the best impostor
    assert m.variant == "margin" and m.values[:, :SIZE // 2 - 4].mean() > 0 > m.values[:, SIZE // 2 + 4:].mean()
    low = np.unravel_index(np.argmin(v), v.shape)
    high = np.unravel_index(np.argmax(v), v.shape)
    assert low[1] >= SIZE // 2 and high[1] < SIZE // 2
    line = e.summary_line()
    assert line.startswith("half: best impostor B (margin +")
    assert re.search(r"evidence against the identity peaks at x=\d+, y=\d+ \(\w+ (centre|right)\)", line)
    assert re.search(r"its evidence peaks at x=\d+, y=\d+ \(\w+ (left|centre)\)", line)


def test_the_overlay_is_a_png_of_the_querys_size_with_a_legend_strip(case):
    tmp, _, q, e, _ = case
    assert e.overlay == tmp / "half.png"
    with Image.open(e.overlay) as im:
        assert im.format == "PNG" and im.size == (SIZE, SIZE + 12)
        top = np.asarray(im.convert("RGB"))[:SIZE]
    with Image.open(q) as src:
        assert np.array_equal(top, np.asarray(blend(src.convert("RGB"), e.values)))


def test_the_html_card_holds_the_overlay(case):
    tmp, ws, _, e, html = case
    text = html.read_text()
    card = re.search(r'<div class="card".*?</div></div>', text, re.S).group(0)
    assert 'figure class="ev"' in card and "evidence: green for, magenta against" in card
    overlay = ws / "explain" / safe_stem("r") / f"{safe_stem('half')}.png"
    with Image.open(overlay) as im:  # the report's overlays have no legend strip (the card's caption is it)
        assert im.size == (SIZE, SIZE)
    assert text.count("data:image/jpeg;base64,") >= 2 + 4  # query, overlay, gallery thumbnails


def test_cli_prints_one_line_and_writes_the_overlay(case, tmp_path):
    _, ws, _, e, _ = case
    res = run_cli(ws, "explain", "--run", "r", "--query", "half", "--out", str(tmp_path / "o.png"))
    assert res.output.strip() == e.summary_line().replace(str(e.overlay), str(tmp_path / "o.png"))
    assert (tmp_path / "o.png").is_file()


@pytest.mark.parametrize("args, message", [
    (("--run", "nope", "--query", "half"), "fpr: error: no run named 'nope'"),
    (("--run", "r", "--query", "x"), "fpr: error: query 'x' is not in run 'r'"),
    (("--run", "r", "--method", "z"), "fpr: error: method 'z' is not in run 'r'"),
    (("--run", "r"), "fpr: error: no query to explain; pass --query QUERY_ID, --method METHOD or --all"),
])
def test_cli_errors_are_one_line_before_any_model_loads(case, monkeypatch, args, message):
    _, ws, _, _, _ = case

    def no_model(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("fpr.encoders.registry.load_encoder", no_model)
    res = run_cli(ws, "explain", *args, ok=False)
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(message)
