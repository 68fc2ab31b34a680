"""Fast checks of the docs that need no workspace (default suite): skip markers have reasons and sit on runnable
blocks, commands are in shell blocks (so test_docs_examples.py runs them), and the demo figures the docs quote
are the rendering of benchmarks/results/demo_figures.json."""
from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pytest

from tests.docs.conftest import ROOT
from tests.docs.extract import SKIP, all_blocks, parse, untagged_commands

BLOCKS = all_blocks(ROOT)


def _figures_module():
    spec = importlib.util.spec_from_file_location("docs_figures", ROOT / "benchmarks" / "docs_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_skip_marker_has_a_reason(capsys):
    bare = [b.id for b in BLOCKS if b.skip_marker and not b.skip_reason]
    assert not bare, f"docs-test skip markers without a reason: {bare}"
    run = [b for b in BLOCKS if b.kind != "output"]
    skipped = [b for b in run if b.skip_marker]
    with capsys.disabled():
        print(f"\ndocs examples: {len(run) - len(skipped)} run, {len(skipped)} skipped with a reason, "
              f"{len(BLOCKS) - len(run)} output blocks not run")


def test_skip_markers_sit_only_on_blocks_that_would_run():
    """A marker on an output block hides nothing, and one not directly above a fence skips nothing."""
    assert not [b.id for b in BLOCKS if b.skip_marker and b.kind == "output"]
    for f in sorted({b.path for b in BLOCKS}):
        lines = (ROOT / f).read_text(encoding="utf-8").splitlines()
        starts = {b.line - 1 for b in BLOCKS if b.path == f and b.skip_marker}
        stray = [n for n, line in enumerate(lines, 1) if SKIP.match(line) and n not in starts]
        assert not stray, f"{f}: docs-test markers not directly above a code block: lines {stray}"


def test_command_blocks_say_they_are_shell():
    """A block of commands without a shell language would silently escape the docs test: it must be tagged."""
    found = [f"{b.path}:{b.doc_line(n)}" for b in BLOCKS for n in untagged_commands(b)]
    assert not found, f"commands in blocks without a shell language (tag them ```bash): {found}"


def test_extractor_on_a_known_document():
    text = ("intro\n<!-- docs-test: skip (needs a GPU (cuda)) -->\n```bash\nfpr a\n```\n\n```\nfpr b\n```\n"
            "<!-- docs-test: skip -->\n```python\nx = 1\n```\n```text\nout\n```\n")
    a, b, c, d = parse(text, "x.md")
    assert (a.id, a.kind, a.text, a.skip_marker, a.skip_reason) == ("x.md:3", "shell", "fpr a\n", True,
                                                                     "needs a GPU (cuda)")
    assert (b.id, b.kind, untagged_commands(b)) == ("x.md:7", "output", [1])
    assert (c.id, c.kind, c.skip_marker, c.skip_reason) == ("x.md:11", "python", True, "")
    assert (d.kind, untagged_commands(d), a.doc_line(1)) == ("output", [], 4)


def test_demo_figures_in_the_docs_are_rendered_from_the_results_file():
    """Edit the figures by regenerating them (benchmarks/docs_figures.py), never by hand."""
    mod = _figures_module()
    fig = json.loads(mod.RESULTS.read_text())
    names = []
    for doc in mod.documents():
        text = doc.read_text(encoding="utf-8")
        names += [m.group("name") for m in mod.SECTION.finditer(text)]
        assert mod.render(text, fig) == text, (f"{doc.relative_to(ROOT)}: a figures section differs from "
                                               "benchmarks/results/demo_figures.json; run "
                                               "'PYTHONPATH=. python benchmarks/docs_figures.py --render'")
    assert sorted(names) == sorted(mod.RENDER), names


def test_a_failing_shell_line_is_named_by_its_document_line(tmp_path):
    """The runner's failure names the document line of the failing command (fence on line 5: line 3 of the block
    is line 8), and a served block keeps the block's exit status, not the stopped server's."""
    import os

    import pytest

    from tests.docs.test_docs_examples import _run_shell, _serving

    block = parse("a\nb\nc\n\n```bash\necho one\ntrue\nfalse\necho never\n```\n", "x.md")[0]
    with pytest.raises(pytest.fail.Exception, match=r"^x\.md:8: exit 1"):
        _run_shell(block, tmp_path, dict(os.environ))
    script = _serving("X=1 fpr --workspace w serve --host 0.0.0.0 --port 8080  # comment\ncurl localhost:8080/x\n")
    first, second = script.splitlines()
    assert first.startswith("X=1 fpr --workspace w serve --host 0.0.0.0 --port 8080 & FPR_DOCS_SERVER=$!;")
    assert "http://127.0.0.1:8080/v1/health" in first  # waits for the server where the block put it
    assert second == "curl localhost:8080/x" and len(script.splitlines()) == 2  # the block's lines as written


def test_demo_figures_agree_with_the_independent_truth_agreement_benchmark():
    """The demo's agreement figures (fpr's code) in demo_figures.json equal, to the 3 decimals printed, seed 0 of
    benchmarks/results/truth_agreement.md, which recomputes them by loops over the pairs (a full world without
    the copy-paste scorer: the agreement does not depend on it)."""
    import re

    fig = json.loads(_figures_module().RESULTS.read_text())["full"]["demo"]
    text = (ROOT / "benchmarks" / "results" / "truth_agreement.md").read_text()
    seed0 = text[text.index("## Seed 0"):text.index("## Seed 1")]
    rows = {(m.group(1), m.group(2)): m.groups()[2:] for m in re.finditer(
        r"^\| (generations|with copies) \| (mAP|Sim) \| (\d+) \| ([\d.]+) \| ([\d.]+) \[[^]]*\] \| ([\d.]+) \| "
        r"([\d.]+) \| ([\d.]+) \|$", seed0, re.MULTILINE)}
    assert len(rows) == 4, rows
    for r in (r for r in fig["validity"]["agreement"] if r["metric"] in ("mAP", "Sim")):  # the table's metrics
        pairs, spearman, ppa, half, ties, tau = rows[(r["methods"], r["metric"])]
        assert int(pairs) == r["n_pairs"]
        got = [r["spearman"], r["ppa"], r["ppa_ties_half"], r["metric_tie_share"], r["kendall_within"]]
        assert [f"{x:.3f}" for x in got] == [spearman, ppa, half, ties, tau], (r["methods"], r["metric"])
    share_header, share_values = re.search(r"Share of queries with AP = 1:\n\n(\|.*\|)\n\|[-|]+\|\n(\|.*\|)",
                                           seed0).groups()
    shares = dict(zip(share_header.strip("|").split(" | "), share_values.strip("|").split(" | ")))
    assert {k.strip(): f"{v:.3f}" for k, v in fig["validity"]["ap_one_share"].items()} == \
        {k.strip(): v.strip() for k, v in shares.items()}



def test_demo_verdicts_agree_with_the_general_standin_benchmark():
    """The full demo's pooled verdicts (demo_figures.json, rendered into README.md) equal, to the 3 decimals
    printed, the pooled table of benchmarks/results/general_standin.md: the same world seeds 0, 1, 2 evaluated
    by a separate run whose every PPA was re-computed by loops over the cross-context pairs."""
    fig = json.loads(_figures_module().RESULTS.read_text())["full"]["demo"]["claims"]
    text = (ROOT / "benchmarks" / "results" / "general_standin.md").read_text()
    pooled = text[text.index("## pooled over seeds"):]
    assert "Every PPA re-computed by loops: all equal" in text
    rows = {m.group(1): m.groups()[1:] for m in re.finditer(
        r"^\| (specialist mAP vs [\w -]+?) \| ([\d.]+) \| ([\d.]+) \| ([+-][\d.]+) \[([+-][\d.]+), ([+-][\d.]+)\] "
        r"\| (\d+) \| (\w+) \|$", pooled, re.MULTILINE)}
    assert len(rows) == 2 == len(fig["verdicts"]), rows
    assert fig["info"]["seeds"] == [0, 1, 2] and fig["info"]["pairs"] in pooled
    for v in fig["verdicts"]:
        got = [f"{v['ppa_a']:.3f}", f"{v['ppa_b']:.3f}", f"{v['diff']:+.3f}", f"{v['diff_lo']:+.3f}",
               f"{v['diff_hi']:+.3f}", str(v["n_pairs"]), v["verdict"]]
        assert got == list(rows[v["claim"]]), v["claim"]

def test_demo_figures_agree_with_the_independent_world_contexts_benchmark():
    """docs/world.md says the full demo's mAP and Sim of every method (fpr's pipeline, demo_figures.json) equal
    what benchmarks/world_contexts.py computes with its own Sim and AP code on the same images (seed 0, as-is;
    its per-query files hold 6 decimals, so a mean of 90 agrees to 1e-6)."""
    mod = _figures_module()
    demo = json.loads(mod.RESULTS.read_text())["full"]["demo"]
    other = mod.contexts_rows(0, "as-is").groupby("method")[["ap", "sim"]].mean()
    methods = demo["world"]["methods"]
    for r in demo["summary"]:
        if r["group"] == "*" and r["method"] in methods:
            assert (r["map"], r["sim"]) == pytest.approx(tuple(other.loc[r["method"]]), abs=1e-6), r["method"]
    assert {r["method"] for r in demo["summary"] if r["group"] == "*"} == {*methods, "oracle"}


def test_world_version_2s_paired_figures_come_from_the_shared_view_files():
    """The shared_view control renders world version 2's queries: its ladder Spearman per query, computed here
    by ranking directly, equals what docs/world.md renders and what version 2's demo printed before the queries
    changed (fpr's pipeline then, world_contexts' probe now: two implementations)."""
    from scipy.stats import rankdata

    mod = _figures_module()
    got = []
    for seed in (0, 1, 2):
        lad = mod.contexts_rows(seed, "shared-view")
        lad = lad[lad["method"].isin(mod.LADDER)]
        a, b = rankdata(lad["ap"]), rankdata(lad["drift"])
        got.append(float(np.corrcoef(a, b)[0, 1]))
    assert [f"{x:.3f}" for x in got] == ["-0.742", "-0.689", "-0.721"]
    assert " / ".join(f"{x:.3f}" for x in got) in (ROOT / "docs" / "world.md").read_text()
    # fpr-world-v2 on seed 0, as version 2's `fpr demo` printed it (per query -0.620, faithful mAP 0.762)
    v2 = mod.contexts_rows(0, "shared-view", "fpr-world-v2")
    lad = v2[v2["method"].isin(mod.LADDER)]
    rho = float(np.corrcoef(rankdata(lad["ap"]), rankdata(lad["drift"]))[0, 1])
    assert (f"{rho:.3f}", f"{v2.loc[v2['method'] == 'new-scene@0', 'ap'].mean():.3f}") == ("-0.620", "0.762")


def test_world_stress_figures_equal_the_specialist_tests_pins():
    """docs/world.md's stress table (benchmarks/world_contexts.py's files) and the golden values of
    tests/galleries/test_world_specialist.py were measured by two runs of the same probe: they agree."""
    from tests.galleries import test_world_specialist as pins

    mod = _figures_module()
    for seed in (0, 1, 2):
        rows = {c: mod.contexts_rows(seed, c) for c in ("as-is", "siblings-0.5", "occlusion", "thumbnail-g5",
                                                       "thumbnail-g5-home")}
        m = lambda c, method, col: rows[c].loc[rows[c]["method"] == method, col].mean()  # noqa: E731
        assert (m("as-is", "new-scene@1", "sim"), m("siblings-0.5", "new-scene@1", "sim")) == \
            pytest.approx(pins.GENERIC_SIM[seed], abs=0.002)
        assert (m("thumbnail-g5", "ref-scene@1", "ap"), m("thumbnail-g5-home", "ref-scene@1", "ap")) == \
            pytest.approx(pins.HOME_MAP[seed][0], abs=0.002)
        sep = [mod._auroc(*(rows[c].loc[rows[c]["method"] == k, "sim"] for k in ("new-scene@0", "new-scene@0.25")))
               for c in ("as-is", "occlusion")]
        assert tuple(sep) == pytest.approx(pins.OCCLUDED_AUROC[seed], abs=0.002)


def _table_rows(text: str, header: str) -> dict[str, list[float]]:
    """The rows of the markdown table whose header row starts with ``header``: first cell -> the numbers of
    the other cells (bold and the part after ';' dropped)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = [float(c.replace("*", "").split(";")[0]) for c in cells[1:]]
    return rows


def test_general_standin_auroc_table_equals_the_pins_and_the_results_files():
    """docs/world.md's table of issue #23's line is typed from three measurements: the stand-ins' pins in
    tests/galleries/test_world_specialist.py (which measure them), fpr-general-v2's check file and the
    specialist's row of the world-contexts file. The three-decimal figures must equal them."""
    from tests.galleries import test_world_specialist as pins

    doc = _table_rows((ROOT / "docs" / "world.md").read_text(), "| AUROC of new-scene@0 over |")
    for eid, short in (("fpr-general-v2", "fpr-general-v2"), ("fpr-general-v1", "fpr-general-v1")):
        scene = [pins.GENERAL_AUROC[eid][s][1] for s in (0, 1, 2)]
        pose = [pins.GENERAL_AUROC[eid][s][0] for s in (0, 1, 2)]
        got_scene = next(v for k, v in doc.items() if k.startswith(f"ref-scene@1, `{short}`"))
        got_pose = next(v for k, v in doc.items() if k.startswith(f"ref-pose@1, `{short}`"))
        assert got_scene == pytest.approx(scene, abs=6e-4), eid
        assert got_pose == pytest.approx(pose, abs=6e-4), eid
    check = _table_rows((ROOT / "benchmarks/results/general_standin_layout_check.md").read_text(),
                        "| seed | oracle mAP |")
    assert [check[str(s)][1] for s in (0, 1, 2)] == pytest.approx(doc["ref-scene@1, `fpr-general-v2`"], abs=6e-4)
    contexts = _table_rows((ROOT / "benchmarks/results/world_contexts.md").read_text(), "| AUROC (Sim; AP) |")
    assert doc["ref-scene@1, specialist `fpr-world-v3`"] == contexts["new-scene@0 over ref-scene@1"]


# A timing figure: a number (or range) followed by s, ms or min ("1.1 s", "20-40 s", "30.9 ms/img", "49.5 min").
TIMING = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?(?:-\d+(?:\.\d+)?)?\s?(?:s|ms|min)\b")
RESULTS_CITE = re.compile(r"benchmarks/results/[\w./-]+\.(?:md|json)")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
# Settings, not measurements: a default, a timeout or a retry schedule the code defines (phrase as written,
# whitespace-normalised). A measured figure never belongs here.
SETTINGS: tuple[tuple[str, str], ...] = (
    ("README.md", "a plain line every 10 s"),
    ("docs/architecture.md", "a line every 10 s of a phase"),
    ("docs/architecture.md", "default 300 s"),
    ("docs/architecture.md", "60 s busy timeout"),
    ("docs/judges.md", "exponential backoff from 0.5 s (at most 8 s)"),
    ("docs/judges.md", "no reply within 1 s after 2 retries"),
    ("docs/serve.md", "exits within 0.2 s when the server is gone"),
)
# Measured figures not yet backed by a results file (the test fails once one of these is gone from the text).
# Empty: docs/world.md's training figures now cite benchmarks/results/cuda.md.
KNOWN_UNCHECKED: tuple[tuple[str, str], ...] = ()


def _units(text: str) -> list[str]:
    """What must cite a results file: each table row on its own, otherwise each paragraph (whitespace-normalised)."""
    units: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        rows = [line for line in para.splitlines() if line.lstrip().startswith("|")]
        prose = [line for line in para.splitlines() if not line.lstrip().startswith("|")]
        units += rows + [" ".join(" ".join(prose).split())]
    return units


def unchecked_timings(path: str, text: str) -> list[str]:
    """Timing figures of a document that sit neither in a rendered figures section nor in a paragraph (or table
    row) citing a benchmarks/results file; settings and KNOWN_UNCHECKED phrases aside."""
    text = _figures_module().SECTION.sub("", text)
    text = HTML_COMMENT.sub("", text)  # skip reasons and markers are for the docs test, not the reader
    found = []
    for unit in _units(text):
        flat = " ".join(unit.split())
        for doc, phrase in SETTINGS + KNOWN_UNCHECKED:
            if doc == path:
                flat = flat.replace(phrase, "")
        if TIMING.search(flat) and not RESULTS_CITE.search(flat):
            found.append(f"{path}: {TIMING.findall(flat)} in: {flat[:100]}")
    return found


def test_timing_figures_come_from_a_results_file():
    """Every timing figure in the docs sits in a rendered figures section or cites the benchmarks/results file it
    was measured in (issue #27: no unchecked figures); the cited files exist."""
    found, cited = [], set()
    for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        rel, text = str(f.relative_to(ROOT)), f.read_text(encoding="utf-8")
        found += unchecked_timings(rel, text)
        cited |= set(RESULTS_CITE.findall(text))
        flat = " ".join(text.split())
        stale = [p for d, p in SETTINGS + KNOWN_UNCHECKED if d == rel and p not in flat]
        assert not stale, f"{rel}: listed phrases no longer in the text (remove them from the list): {stale}"
    assert not found, "timing figures without a results file:\n" + "\n".join(found)
    missing = sorted(c for c in cited if not (ROOT / c).exists())
    assert not missing, f"the docs cite results files that do not exist: {missing}"


def test_timing_check_on_a_known_document():
    text = ("Took 1.1 s here.\n\nTook 2 min (`benchmarks/results/x.md`).\n\n| a | 3 ms |\n| b | 4 ms, "
            "`benchmarks/results/y.md` |\n\n<!-- docs-test: skip (5 s) -->\nA 12-px sign, 3 queries.\n")
    assert [u.split(": ")[1] for u in unchecked_timings("x.md", text)] == ["['1.1 s'] in", "['3 ms'] in"]


def test_the_docs_test_runs_blocks_as_written_or_skips_them_with_a_reason():
    """No block is rewritten before it runs (issue #33: a block saying miewid-msv2 ran fpr-world-v3): the script
    a shell block becomes holds each of its lines unchanged, in order; a block naming weights that need a
    download, or a judge endpoint, is skipped with that reason."""
    import inspect

    from tests.docs import test_docs_examples as ex

    source = inspect.getsource(ex)
    assert "SUBSTITUTE" not in source and ".replace(" not in source
    for block in (b for b in ex.RUN if b.kind == "shell" and b.lang != "console"):
        written, run = block.text.splitlines(), ex._serving(block.text).splitlines()
        assert len(run) == len(written) and all(r.startswith(w) for r, w in zip(run, written)), block.id
    skipped = {b.id: ex.why_skipped(b) for b in ex.RUN}
    assert all(skipped[b.id] for b in ex.RUN if "miewid-msv2" in b.text)
    judge = [b for b in ex.RUN if b.path == "docs/judges.md" and "OPENAI_BASE_URL=" in b.text and not b.skip_marker]
    assert judge and all("judge endpoint" in skipped[b.id] or "miewid" in skipped[b.id] for b in judge)
