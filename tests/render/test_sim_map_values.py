"""Sim vs mAP per method (issue #23 item 5), on values: for every encoder of a run, the numbers the HTML report
plots and the bars ``fpr report`` draws are the run's own per-method values, with their 95% intervals, and the
oracle's Sim and mAP are the reference lines. The HTML values are read back from the SVG's coordinates (against
its own 0 and 1 ticks), not from the code that drew them."""
from __future__ import annotations

import re

import pandas as pd
import pytest
from click.testing import CliRunner

from fpr import api
from fpr.cli.main import cli
from fpr.galleries.curate import GallerySpec
from fpr.render import paper as rep
from fpr.render.cells import format_cell
from tests.conftest import make_tree, write_image
from tests.render.test_html import isolated

ENCODERS = ("pixels-16", "fpr-world-v1")
METHODS = ("kept-identity", "lost-identity")
N = 12  # queries per method: enough for a 95% interval (fpr.defaults.MIN_QUERIES_FOR_INTERVAL)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return isolated(tmp_path_factory.mktemp("simmap"), _make_run)


def _make_run(tmp):
    """One group of 4 identities, two methods of 12 queries (copies of the identity's images with noise, or
    images of nothing), the oracle; both encoders in one run."""
    ws = tmp / "ws"
    tree = make_tree(tmp / "tree", identities=4, images=5, groups=("cats",))
    api.import_gallery("g", api.read_folder(tree), GallerySpec(references_per_identity=2), workspace=ws)
    rows = []
    for m, method in enumerate(METHODS):
        for q in range(N):
            i = q % 4
            seed = 10 * i + q % 5 if m == 0 else 50_000 + q  # kept: an image of the identity; lost: new noise
            p = write_image(tmp / "q" / f"{method}{q}.png", seed=seed)
            rows.append({"query_id": f"{method}-{q}", "path": str(p), "identity": f"cats-{i}", "group": "cats",
                         "method": method})
    api.run_query_encoders("g", ",".join(ENCODERS), pd.DataFrame(rows), run="r", workspace=ws, oracle=True)
    return ws, api.html_report("r", tmp / "report.html", workspace=ws)


def _values(ws, encoder: str) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(method, metric) -> (mean, lo, hi) of the run's stored rows for one encoder; the mean recomputed here."""
    res = api.load_run(f"r@{encoder}", workspace=ws)
    pq = res.per_query[res.per_query["status"] == "ok"]
    out = {}
    for r in res.summary_records():
        if r["group"] != "*":
            continue
        for metric, col in (("sim", "sim"), ("map", "ap")):
            mean = pd.to_numeric(pq.loc[pq["method"] == r["method"], col]).mean()
            assert r[metric] == pytest.approx(mean, abs=1e-12)
            out[(r["method"], metric)] = (mean, r.get(f"{metric}_lo"), r.get(f"{metric}_hi"))
    return out


def _float(v) -> float:
    return float("nan") if v is None else float(v)


def test_html_plots_each_encoders_per_method_sim_and_map_with_intervals_and_the_oracle(run):
    ws, path = run
    text = path.read_text()
    section = text[text.index('id="sim-map"'):text.index('id="plots"')]
    charts = re.findall(r"<svg .*?</svg>", section)
    assert len(charts) == len(ENCODERS)
    for encoder, svg in zip(ENCODERS, charts):
        assert f"<title>Sim vs mAP · {encoder} · all groups</title>" in svg
        ticks = {float(t): float(x) for x, t in re.findall(r'<text x="([-0-9.]+)" y="[0-9.]+" class="s" '
                                                              r'text-anchor="middle">(-?[0-9.]+)</text>', svg)}
        x0, x1 = ticks[0.0], ticks[1.0]

        def value(x: str) -> float:  # a coordinate read back on the chart's own scale
            return (float(x) - x0) / (x1 - x0)

        want = _values(ws, encoder)
        bars = re.findall(r'<rect x="([-0-9.]+)" y="[0-9.]+" width="([0-9.]+)" height="[0-9]+" fill="[^"]+">'
                          r"<title>([^<]+) · (Sim|mAP) [^<]+</title></rect>"
                          r'(?:<path d="M([-0-9.]+) [0-9.]+H([-0-9.]+)M)?', svg)
        assert {(m, label) for *_, m, label, _, _ in bars} == {(m, lab) for m in (*METHODS, "oracle")
                                                               for lab in ("Sim", "mAP")}
        for x, width, method, label, lo_x, hi_x in bars:
            mean, lo, hi = want[(method, "sim" if label == "Sim" else "map")]
            end = float(x) + float(width) if mean >= 0 else float(x)  # a bar runs from 0 to the mean
            assert value(end) == pytest.approx(mean, abs=1e-3), (encoder, method, label)
            if method in METHODS:  # 12 queries: an interval; the oracle's 8 have none
                assert (value(lo_x), value(hi_x)) == pytest.approx((lo, hi), abs=1e-3), (encoder, method, label)
            else:
                assert lo is None and lo_x == ""
        refs = dict((label, x) for x, label in re.findall(
            r'<line x1="([-0-9.]+)"[^>]*class="ref"[^>]*><title>oracle (Sim|mAP)</title>', svg))
        assert value(refs["Sim"]) == pytest.approx(want[("oracle", "sim")][0], abs=1e-3)
        assert value(refs["mAP"]) == pytest.approx(want[("oracle", "map")][0], abs=1e-3)


def test_fpr_report_draws_each_encoders_per_method_sim_and_map_from_the_run(run):
    ws, _ = run
    out = CliRunner().invoke(cli, ["--workspace", str(ws), "report", "--run", "r", "--width", "160"], obj={})
    assert out.exit_code == 0, out.output
    blocks = {b.splitlines()[0].split("encoder ")[1].split(":")[0]: b.splitlines()
              for b in out.output.split("\n\n") if b.startswith("Sim vs mAP, all groups, encoder ")}
    assert list(blocks) == list(ENCODERS)
    values = {e: _values(ws, e) for e in ENCODERS}
    texts = {(e, *k): f"{'Sim' if k[1] == 'sim' else 'mAP'} {format_cell(v, _float(lo), _float(hi))}"
             for e in ENCODERS for k, (v, lo, hi) in values[e].items()}
    name_w, text_w = max(len(m) for m in (*METHODS, "oracle")), max(map(len, texts.values()))  # one column for all
    for encoder, lines in blocks.items():
        want = values[encoder]
        axis = rep.chart_axis([_float(x) for v in want.values() for x in v], 160 - name_w - text_w - 4)
        assert f"oracle (Sim {want[('oracle', 'sim')][0]:.3f}, mAP {want[('oracle', 'map')][0]:.3f})" in lines[0]
        body = [line for line in lines if line[:1].strip() or line.lstrip().startswith("mAP ")]
        for method in (*METHODS, "oracle"):
            k = next(i for i, line in enumerate(body) if line.startswith(method + " "))
            for line, metric in zip(body[k:k + 2], ("sim", "map")):
                v, lo, hi = want[(method, metric)]
                drawn = rep.bar(v, _float(lo), _float(hi), want[("oracle", metric)][0], axis)
                label = method if metric == "sim" else ""
                assert line == f"{label:<{name_w}}  {texts[(encoder, method, metric)]:<{text_w}}  {drawn}".rstrip(), \
                    (encoder, method, metric)
