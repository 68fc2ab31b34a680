"""The default run leaves out only marked sets that .ci/run runs on its own: no test loses CI coverage."""
from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _default_markexpr() -> str:
    addopts = shlex.split(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
                          ["addopts"])
    return addopts[addopts.index("-m") + 1]


def test_every_marker_the_default_run_leaves_out_is_a_ci_step():
    expr = _default_markexpr()
    left_out = re.findall(r"not (\w+)", expr)
    assert expr == " and ".join(f"not {m}" for m in left_out), expr  # only "not X and not Y": nothing else hidden
    assert set(left_out) == {"slow", "docs"}
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert "make test" in steps
    for marker in left_out:
        assert any(re.search(rf"-m {marker}\b", s) for s in steps), marker


def test_make_test_runs_the_default_on_two_workers_and_make_demo_installs_no_test_extra():
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: .*\n\t\$\(PY\) -m pytest -n \$\(TEST_WORKERS\)$", make, re.M)
    assert re.search(r"^TEST_WORKERS \?= 2$", make, re.M)  # two xdist workers: one per core of a 2-core machine
    assert "DEMO_SPEC := -e '.[cpu]'" in make and "TEST_SPEC := -e '.[cpu,test]'" in make
    assert re.search(r"^\$\(VENV\)/\.installed-demo: .*\n(\t.*\n)*\t\$\(call pip_retry,[^\n]*\$\(DEMO_SPEC\)\)", make,
                     re.M)
    assert not re.search(r"pip install[^\n]*(--quiet|-q\b)", make)  # pip says what it is doing
