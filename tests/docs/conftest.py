"""The prepared workspace the documented examples run in, built once per session.

``fpr demo --quick --run demo-quick --no-copy-paste`` into ``fpr-workspace/`` (the default workspace name), with
the index ``make demo`` leaves (``world-demo-s0-quick-fpr-world-v3``: README's serve example names it),
beside it the files the docs name, written by the documented command a reader runs too, ``fpr examples .``
(:mod:`fpr.workflows.examples`): ``data/animals/<group>/<identity>/*.png``, ``generations/<method>/<group>/
<identity>/*.png``, ``generated.csv``, ``textual-inversion.csv`` and ``queries.csv`` with ``a.png``/``b.png``.
Each document gets a copy of it as its working folder (see ``workdirs``), and its blocks run there in order,
as a reader follows them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO_RUN = "demo-quick"
DEMO_GALLERY = "world-demo-s0-quick"
DEMO_INDEX = "world-demo-s0-quick-fpr-world-v3"  # the demo's index, which README.md's serve example uses
FIRST_DOC = "README.md"


@dataclass(frozen=True)
class DocsWorld:
    """The prepared folder (copied per document), the shims' folder and the environment blocks run with."""

    base: Path
    bin: Path
    cache: Path
    weights: Path

    def env(self, workdir: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '')}", PYTHONPATH=str(ROOT),
                   FPR_WORKSPACE=str(workdir / "fpr-workspace"), FPR_CACHE_DIR=str(self.cache),
                   FPR_WEIGHTS_DIR=str(self.weights), FPR_OFFLINE="1", HF_HUB_OFFLINE="1",
                   HF_HOME=str(self.cache / "hf"), FPR_REPO=str(ROOT))
        return env


def _shims(folder: Path) -> Path:
    """``fpr`` and ``python`` on PATH: this checkout's fpr under the test's interpreter."""
    folder.mkdir(parents=True)
    # scripts, not symlinks: a venv's python found through a symlink in another folder loses the venv's packages
    (folder / "fpr").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m fpr "$@"\n')
    (folder / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    for name in ("fpr", "python"):
        (folder / name).chmod(0o755)
    return folder


@pytest.fixture(scope="session")
def docs_world(tmp_path_factory) -> DocsWorld:
    root = tmp_path_factory.mktemp("docs")
    world = DocsWorld(root / "base", _shims(root / "bin"), root / "cache", root / "weights")
    world.base.mkdir()
    ws = world.base / "fpr-workspace"
    r = subprocess.run(["fpr", "--workspace", str(ws), "demo", "--quick", "--run", DEMO_RUN, "--no-copy-paste"],
                       cwd=world.base, env=world.env(world.base), capture_output=True, text=True, timeout=480,
                       check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = subprocess.run(["fpr", "examples", "."], cwd=world.base, env=world.env(world.base), capture_output=True,
                       text=True, timeout=480, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # a reader runs the docs' `python benchmarks/...` lines from a checkout: the scripts are where they would be
    (world.base / "benchmarks").symlink_to(ROOT / "benchmarks", target_is_directory=True)
    return world


@pytest.fixture(scope="session")
def workdirs(docs_world, tmp_path_factory):
    """One working folder per document, made on first use: README.md's a copy of the prepared folder, every
    other document's a copy of README.md's as its blocks left it (a reader comes from the README, so
    docs/reports.md may report the run README.md made)."""
    made: dict[str, Path] = {}

    def get(doc: str) -> Path:
        if doc not in made:
            source = docs_world.base if doc == FIRST_DOC else get(FIRST_DOC)
            made[doc] = tmp_path_factory.mktemp("doc") / "work"
            shutil.copytree(source, made[doc], symlinks=True)
        return made[doc]

    return get
