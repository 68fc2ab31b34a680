"""The HTML report is readable by default (issue #27 item 6) and shows Sim vs mAP per method for every
encoder (issue #23 item 5): checked in the file, and at 1440 and 390 px in a real (headless, offline) Chromium."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from fpr import api
from fpr.galleries.curate import GallerySpec
from fpr.render import html as report_html
from tests.browser import Browser, find_chromium, in_ci
from tests.conftest import make_tree, write_image
from tests.render.test_html import isolated

ENCODERS = ("pixels-16", "fpr-world-v1")
TESTED = ("faithful", "drift-0.25-with-a-long-name")  # hyphens: never broken
CONTROLS = ("generic", "paste-mirror")  # the world's control rows, and the oracle the run adds


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Two encoders, two groups x 3 identities, two methods under test, two controls and the oracle."""
    return isolated(tmp_path_factory.mktemp("readable"), _make_report)


def _make_report(tmp):
    ws = tmp / "ws"
    tree = make_tree(tmp / "tree", identities=3, images=4)
    api.import_gallery("g", api.read_folder(tree), GallerySpec(references_per_identity=1), workspace=ws)
    rows = []
    for g, group in enumerate(("cats", "dogs")):
        for i in range(3):
            for m, method in enumerate(TESTED + CONTROLS):
                p = write_image(tmp / "q" / f"{group}{i}{m}.png", seed=1000 * g + 10 * i + 5 + m)
                rows.append({"query_id": f"{group}{i}-{m}", "path": str(p), "identity": f"{group}-{i}",
                             "group": group, "method": method})
    api.run_query_encoders("g", ",".join(ENCODERS), pd.DataFrame(rows), run="r", workspace=ws, oracle=True)
    return api.html_report("r", tmp / "report.html", workspace=ws), pd.DataFrame(rows)


def test_page_has_a_viewport_and_opens_on_the_summary_then_the_methods_under_test(report):
    path, queries = report
    text = path.read_text()
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in text
    assert [h for h in re.findall(r'<h2 id="([a-z-]+)"', text)] == ["summary", "headroom", "sim-map", "plots", "drift",
                                                                     "queries"]
    cards = re.findall(r'<div class="card" data-method="([^"]+)"', text)
    n_oracle = 2 * 3 * 1  # one reference image per identity
    per_encoder = len(queries) + n_oracle
    assert len(cards) == len(ENCODERS) * per_encoder
    controls_at = text.index('<details class="controls" id="controls">')
    first_control = min(text.index(f'data-method="{m}"', text.index('id="cards"')) for m in (*CONTROLS, "oracle"))
    assert first_control > controls_at  # every control card is inside the collapsed block ...
    tested = cards[:len(ENCODERS) * 2 * 3 * len(TESTED)]
    assert set(tested) == set(TESTED)  # ... and the methods under test come first
    assert "Controls: generic, paste-mirror, oracle (" in text or "Controls: oracle, generic, paste-mirror (" in text
    # the summary shows Sim and mAP; every metric and scorer is one click below
    summary = text[text.index('id="summary"'):text.index('id="sim-map"')]
    first_table = summary[:summary.index("</table>")]
    assert "CMC" not in first_table and "Sim" in first_table and "mAP" in first_table
    assert "<details><summary>Every metric and scorer</summary>" in summary and "CMC@10" in summary


def test_sim_vs_map_per_encoder_with_the_oracle_as_reference(report):
    path, _ = report
    text = path.read_text()
    section = text[text.index('id="sim-map"'):text.index('id="plots"')]
    charts = re.findall(r"<svg .*?</svg>", section)
    assert [re.search(r"<title>Sim vs mAP · ([^ ]+) · all groups</title>", c).group(1) for c in charts] == \
        list(ENCODERS)
    for c in charts:
        refs = re.findall(r'<line x1="([0-9.]+)"[^>]*class="ref"[^>]*><title>oracle (Sim|mAP)</title>', c)
        assert [r[1] for r in refs] == ["Sim", "mAP"]
        ticks = re.findall(r'text-anchor="middle">(-?[0-9.]+)</text>', c)
        assert ticks[:5] == ["0", "0.25", "0.5", "0.75", "1"] or ticks[1:6] == ["0", "0.25", "0.5", "0.75", "1"]


def test_bar_chart_geometry_by_hand():
    bars = [("m-1", [report_html.Bar(0.5, 0.25, 0.75, 0, "tip")])]
    svg = report_html.bar_chart("T", "axis", ["s"], bars, [report_html.Reference(1.0, 0, "oracle")])
    label_w = int(8 + 4 * 7.0)  # the label column fits "m-1" (at least 4 characters of 7 px)
    x = lambda v: label_w + v * 300  # noqa: E731  0..1 over 300 px
    assert f'<rect x="{x(0):.1f}" y="42" width="{x(0.5) - x(0):.1f}" height="7"' in svg
    assert f'M{x(0.25):.1f} 45.5H{x(0.75):.1f}' in svg  # the interval's whisker
    assert f'<line x1="{x(1.0):.1f}"' in svg and 'class="ref"' in svg
    assert re.findall(r'text-anchor="middle">([0-9.]+)</text>', svg) == ["0", "0.25", "0.5", "0.75", "1"]
    assert '<text x="4" y="14" class="t">T</text>' in svg and ">axis</text>" in svg


def test_a_method_label_is_never_cut_off_the_charts_left_edge():
    """``new-scene@0.25`` showed as ``ew-scene@0.25``: the label ended at the column's right edge, and the
    column (6.2 px a character) was narrower than the font draws it, so its first letter fell off the left."""
    name = "new-scene@0.25"
    bars = [(name, [report_html.Bar(0.5, 0.4, 0.6, 0, "tip")]), ("m", [report_html.Bar(0.2, 0.1, 0.3, 0, "t")])]
    svg = report_html.bar_chart("T", "axis", ["s"], bars)
    label = re.search(r'<text ([^>]*)>new-scene@0\.25</text>', svg).group(1)
    assert 'x="4"' in label and "text-anchor" not in label  # starts at the left edge: drawn from its first letter
    bar_x = float(re.search(r'<rect x="([0-9.]+)" y="42"', svg).group(1))
    # 11 px sans-serif: at most 10 px for 'w', 7 px for other lower-case letters, digits and '-', 4 px for '.'
    assert bar_x >= 4 + 10 + 7 * 12 + 4


WIDTHS = (1440, 390)

LAYOUT = """(() => {
  const one_line = el => { const r = document.createRange(); r.selectNodeContents(el);
    return new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top))).size === 1; };
  const visible = Array.from(document.querySelectorAll('#cards > .card'));
  return {client: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth,
          first: document.querySelector('h2').id, first_card: visible[0].dataset.method,
          controls_open: document.getElementById('controls').open,
          methods_on_one_line: Array.from(document.querySelectorAll('td.method')).every(one_line),
          n_method_cells: document.querySelectorAll('td.method').length,
          plots: Array.from(document.querySelectorAll('.plots svg')).map(s => ({
            title: s.querySelector('text.t').textContent,
            ticks: s.querySelectorAll('text[text-anchor=middle]').length,
            right: s.getBoundingClientRect().right}))};
})()"""


@pytest.mark.parametrize("width", WIDTHS)
def test_layout_in_headless_chromium(report, tmp_path, width):
    exe = find_chromium()
    if exe is None:
        if in_ci():
            pytest.fail("chromium is missing in CI (.ci/run installs it)")
        pytest.skip("chromium is not installed here (CI installs it: apt-get install chromium)")
    path, _ = report
    with Browser(exe, width=width, height=900) as b:
        b.open(path)
        b.call("Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False)
        got = b.eval(LAYOUT)
        assert got["scroll"] <= got["client"], got  # no horizontal scroll: wide tables scroll in their own box
        assert got["first"] == "summary" and got["first_card"] in TESTED and not got["controls_open"]
        assert got["methods_on_one_line"] and got["n_method_cells"] > 0  # drift-0.25-with-a-long-name whole
        assert len(got["plots"]) == len(ENCODERS) + 2 * 3  # Sim vs mAP per encoder; (cats, dogs, all) x 2
        for plot in got["plots"]:
            assert plot["title"] and plot["ticks"] >= 5 and plot["right"] <= got["client"], plot
        b.eval("(() => {const s = document.getElementById('f-method'); s.value = 'generic'; "
               "s.dispatchEvent(new Event('change')); })()")
        assert b.eval("document.getElementById('controls').open")  # choosing a control opens them
        assert b.eval("document.querySelectorAll('.card:not([hidden])').length") == len(ENCODERS) * 6
        shot = b.screenshot(tmp_path / f"report-{width}.png")
        print(f"\nreport screenshot at {width} px: {shot}")
        assert b.errors == []
