"""fpr plan through the CLI and the API: a pilot run's methods, the same designs as the library, one-line errors."""
from __future__ import annotations

import json

from fpr import api
from fpr.metrics import power as pw
from tests.cli.test_report_cli import run, world  # noqa: F401  (the fixture: a gallery and methods a, b)


def test_plan_from_a_pilot_run_equals_the_library_and_refuses_bad_input(world):  # noqa: F811
    ws, queries = world
    run(ws, "index", "build", "--gallery", "g", "--encoder", "pixels-16")
    run(ws, "query", "--index", "g-pixels-16", "--queries", str(queries), "--run", "r")
    out = json.loads(run(ws, "plan", "--run", "r", "--a", "a", "--b", "b", "--difference", "0.2", "--sims", "200",
                         "--format", "json").stdout)
    pilot = pw.pilot_from_frame(api.load_run("r", workspace=ws).per_query, "a", "b")
    want = pw.plan_from_pilot(pilot, difference=0.2, n_sim=200)
    assert out["designs"] == want["designs"] and out["pilot"]["identities"] == pilot.n_identities == 6
    assert out["designs"][0]["power"] >= 0.8 and out["pilot"]["run"] == "r"
    assert api.plan("r", "a", "b", difference=0.2, n_sim=200, workspace=ws)["designs"] == want["designs"]
    text = run(ws, "plan", "--run", "r", "--a", "a", "--b", "b", "--difference", "0.2", "--sims", "200").stdout
    assert "pilot: run r, a (a) vs b (b), 6 identities" in text and "identities" in text
    best = next(d for d in want["designs"] if d["per_identity"] == want["cheapest"])
    assert f"fewest generations: {best['identities']} identities x {best['per_identity']} generations" in text
    for args, msg in ((["--run", "r", "--a", "a", "--b", "zz"], "run 'r' has no method 'zz'"),
                      (["--run", "r", "--a", "a", "--b", "b", "--power", "1.5"], "power must be within (0, 1)"),
                      (["--run", "r", "--a", "a", "--b", "b", "--per-identity", "x"], "--per-identity takes whole"),
                      (["--run", "nope", "--a", "a", "--b", "b"], "nope"),
                      (["--sd", "0.2"], "give the assumptions --sd, --icc and --difference")):
        bad = run(ws, "plan", *args, ok=False)
        assert bad.exit_code != 0 and msg in bad.stderr and "Traceback" not in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1


def test_plan_from_assumptions_prints_one_design_per_generation_count(tmp_path):
    out = json.loads(run(tmp_path / "ws", "plan", "--sd", "0.2", "--icc", "0", "--difference", "0.05",
                         "--per-identity", "1,4", "--sims", "200", "--format", "json").stdout)
    want = pw.assumed_power(sd=0.2, icc=0.0, difference=0.05, per_identity=(1, 4), n_sim=200)
    assert out["designs"] == want["designs"] and [d["per_identity"] for d in out["designs"]] == [1, 4]
    assert out["designs"][1]["pairs"] == 4 * out["designs"][1]["identities"]
