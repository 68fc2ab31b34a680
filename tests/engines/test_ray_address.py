"""An unreachable ``--ray-address`` is one line and exit 2 within seconds, and ``-q`` keeps Ray's logs out
of stderr (#26). A subprocess: the address check must happen before Ray's own connection retries."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # Ray: .ci/run runs -m slow

REPO = Path(__file__).resolve().parents[2]
from tests.workflows.test_filter import INDEX, setup  # noqa: E402,F401  (the 30-query gallery fixture)


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_unreachable_ray_address_is_one_line_within_seconds(setup, address):
    tmp, ws, qfile = setup
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "fpr", "-q", "--workspace", str(ws), "query", "--index", INDEX,
                          "--queries", str(qfile), "--engine", "ray", "--ray-address", address],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(REPO), RAY_ADDRESS=""))
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.splitlines() == [out.stderr.strip()], out.stderr[-3000:]  # one line, nothing from Ray
    assert out.stderr.startswith(f"fpr: error: cannot reach the Ray cluster at '{address}' (Connection refused; "
                                 "checked for 5 s)"), out.stderr
    assert time.monotonic() - t0 < 60
