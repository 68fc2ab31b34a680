"""The self-contained HTML report: its file, and the page in a real (headless, offline) Chromium."""
from __future__ import annotations

import re

import pandas as pd
import pytest

from fpr import api
from fpr.galleries.curate import GallerySpec
from tests.browser import Browser, find_chromium, in_ci
from tests.conftest import make_tree, write_image


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A pixels-16 run of 12 queries (2 groups x 3 identities x methods a, b) and its HTML report."""
    return isolated(tmp_path_factory.mktemp("html"), _make_report)


def isolated(tmp, make):
    """``make(tmp)`` with the cache and weights folders inside ``tmp``: a module-scoped fixture runs before
    the per-test isolation fixture."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FPR_CACHE_DIR", str(tmp / "cache"))
        mp.setenv("FPR_WEIGHTS_DIR", str(tmp / "weights"))
        return make(tmp)


def _make_report(tmp):
    ws = tmp / "ws"
    tree = make_tree(tmp / "tree", identities=3, images=4)
    api.import_gallery("g", api.read_folder(tree), GallerySpec(references_per_identity=1), workspace=ws)
    api.build_index("g", "pixels-16", workspace=ws)
    rows = []
    for g, group in enumerate(("cats", "dogs")):
        for i in range(3):
            for m, method in enumerate(("a", "b")):
                p = write_image(tmp / "q" / f"{group}{i}{method}.png", seed=1000 * g + 10 * i + 5 + m)
                rows.append({"query_id": f"{group}{i}{method}", "path": str(p), "identity": f"{group}-{i}",
                             "group": group, "method": method})
    api.run_query("g-pixels-16", pd.DataFrame(rows), run="r", workspace=ws)
    out = api.html_report("r", tmp / "report.html", workspace=ws)
    return out, pd.DataFrame(rows), api.export_run("r", tmp / "r.csv", workspace=ws)


def test_report_file_is_self_contained(report):
    path, queries, _ = report
    text = path.read_text()
    assert text.count('<div class="card"') == len(queries)
    bare = re.sub(r"data:image/jpeg;base64,[A-Za-z0-9+/=]+", "", text)
    assert not re.search(r"(https?:)?//[a-z0-9]|\burl\(|\bfetch\(|XMLHttpRequest", bare.replace("http-equiv", ""))
    assert "default-src 'none'; img-src data:" in text
    assert "<link" not in text and "src=\"http" not in text and "@import" not in text
    assert text.count("data:image/jpeg;base64,") >= len(queries)


def test_cards_are_worst_ap_first(report):
    path, _, export = report
    aps = [float(a) for a in re.findall(r'class="card"[^>]* data-ap="([0-9.]+)"', path.read_text())]
    df = pd.read_csv(export)
    assert aps == sorted(aps) and len(aps) == len(df)
    assert aps == pytest.approx(sorted(df["ap"].round(6)), abs=1e-6)


def test_report_in_headless_chromium(report, tmp_path):
    exe = find_chromium()
    if exe is None:
        if in_ci():
            pytest.fail("chromium is missing in CI (.ci/run installs it)")
        pytest.skip("chromium is not installed here (CI installs it: apt-get install chromium)")
    path, queries, _ = report
    with Browser(exe) as b:
        seconds = b.open(path)
        n_cards = b.eval("document.querySelectorAll('.card').length")
        assert n_cards == len(queries)
        sizes = b.eval("Promise.all(Array.from(document.images).map(i => i.decode().then(() => i.naturalWidth)))",
                       await_promise=True)
        assert len(sizes) >= 2 * len(queries) and min(sizes) > 0
        assert b.eval("document.getElementById('count').textContent") == f"{len(queries)} of {len(queries)} " \
                                                                         "queries shown"

        def choose(name, value):
            b.eval(f"(() => {{const s = document.getElementById('f-{name}'); s.value = {value!r}; "
                   "s.dispatchEvent(new Event('change')); })()")
            return b.eval("document.querySelectorAll('.card:not([hidden])').length")

        assert choose("method", "a") == (queries["method"] == "a").sum()
        assert choose("group", "dogs") == ((queries["method"] == "a") & (queries["group"] == "dogs")).sum()
        assert b.eval("Array.from(document.querySelectorAll('.card:not([hidden])')).every("
                      "c => c.dataset.method === 'a' && c.dataset.group === 'dogs')")
        assert choose("encoder", "pixels-16") == 3
        assert choose("encoder", "") == 3
        choose("method", "")
        assert choose("group", "") == len(queries)
        # Sim vs mAP (one encoder); (cats, dogs, all) x (mAP, Sim)
        assert b.eval("document.querySelectorAll('.plots svg').length") == 1 + 2 * 3
        assert b.eval("document.querySelectorAll('.conf table').length") == 2
        b.eval("document.getElementById('filters').scrollIntoView()")
        shot = b.screenshot(tmp_path / "report.png")
        assert shot.stat().st_size > 10_000
        print(f"\nreport screenshot: {shot} (opened in {seconds:.2f} s)")
        assert b.errors == []
