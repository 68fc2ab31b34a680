"""Store fixtures: the workspace written by fpr 0.1.0 (tests/fixtures/workspace-0.1.0.tar.gz)."""
from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "workspace-0.1.0.tar.gz"


@pytest.fixture
def old_workspace(tmp_path) -> Path:
    """The 0.1.0 workspace unpacked under a fresh folder: <tmp>/old/ws (+ queries, exports, images)."""
    dest = tmp_path / "old"
    dest.mkdir()
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(dest, filter="data")
    return dest
