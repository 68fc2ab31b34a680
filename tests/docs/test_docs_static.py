"""Fast checks of the docs that need no workspace (default suite): skip markers have reasons and sit on runnable
blocks, commands are in shell blocks (so test_docs_examples.py runs them), and the demo figures the docs quote
are the rendering of benchmarks/results/demo_figures.json."""
from __future__ import annotations

import importlib.util
import json

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
