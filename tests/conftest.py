"""Test isolation: every test gets its own cache, weights folder and workspace, the width of a pipe; no network."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

os.environ.setdefault("FPR_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("FPR_QUIET", "1")


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory, monkeypatch):
    base = tmp_path_factory.mktemp("fprhome")
    monkeypatch.setenv("FPR_CACHE_DIR", str(base / "cache"))
    monkeypatch.setenv("FPR_WEIGHTS_DIR", str(base / "weights"))
    monkeypatch.setenv("HF_HOME", str(base / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(base / "hf" / "hub"))
    # Printed tables fold at the width a pipe gives (100), whoever runs the tests: in pytest-xdist's workers
    # readline (imported with pdb by pytest) exports COLUMNS=80 and LINES=24, which would fold them at 80.
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    yield


@pytest.fixture
def workspace(tmp_path) -> Path:
    return tmp_path / "ws"


def write_image(path: Path, seed: int, size: int = 48, mode: str = "RGB") -> Path:
    """A random-noise image with a seeded colour cast; different seeds give different images."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=3)
    arr = np.clip(base + rng.normal(0, 40, size=(size, size, 3)), 0, 255).astype("uint8")
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr, "RGB").convert(mode).save(path)
    return path


def make_tree(root: Path, identities: int, images: int, groups: tuple[str, ...] = ("cats", "dogs")) -> Path:
    """A folder tree group/identity/k.png of seeded noise images (seed = 1000*group + 10*identity + k)."""
    for g, group in enumerate(groups):
        for i in range(identities):
            for k in range(images):
                write_image(root / group / f"{group}-{i}" / f"{k}.png", seed=1000 * g + 10 * i + k)
    return root


@pytest.fixture
def tiny_tree(tmp_path) -> Path:
    """folder tree group/identity/img: 2 groups x 3 identities x 4 images."""
    return make_tree(tmp_path / "tree", identities=3, images=4)


def run_cli(ws, *args, ok: bool = True):
    """``fpr --workspace WS ARGS...`` through click's test runner; asserts exit 0 unless ``ok=False``."""
    from click.testing import CliRunner

    from fpr.cli.main import cli

    res = CliRunner().invoke(cli, ["--workspace", str(ws), *args], obj={})
    if ok:
        assert res.exit_code == 0, res.output
    return res
