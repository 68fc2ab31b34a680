"""``--engine ray --ray-address`` on a real three-node Ray cluster started by Ray's own commands on this machine
(``ray start --head``, then two ``ray start --address`` worker nodes, each its own raylet with one CPU and
an 80 MB object store; tests/engines/ray_cluster.py): ``fpr query``, ``fpr score`` and ``fpr filter`` run
through the CLI by address give the local engine's values, the work runs on both worker nodes, and a
worker node killed mid-run (its raylet and workers SIGKILLed) loses nothing and counts nothing twice.

The cluster is torn down after the module, by the pids of its own processes only (never ``ray stop``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow,  # three raylets and a CLI driver per command: minutes on 2 cores
              pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="the cluster helper reads /proc")]

import fpr.api as api  # noqa: E402
from tests.engines.ray_cluster import LocalCluster  # noqa: E402
from tests.patience import Deadline, load_factor  # noqa: E402
from tests.result_schema import validate  # noqa: E402
from fpr.render.result import RUN_RESULT  # noqa: E402
from tests.workflows.test_filter import INDEX, setup  # noqa: E402,F401  (the 30-query gallery fixture)

REPO = Path(__file__).resolve().parents[2]
SCORER = "copy-paste"  # a built-in scorer that needs no model download (pixel-level, against the references)


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster(object_store_mb=80, pythonpath=str(REPO))  # the nodes import this checkout's fpr
    try:
        c.start()
        c.add_node("w1")
        c.add_node("w2")
        yield c
    finally:
        c.stop()
    assert not c.root.exists()


def _cli(ws: Path, *args: str, cache: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "FPR_CACHE_DIR": str(cache), "FPR_QUIET": "0", "RAY_ADDRESS": ""}
    return subprocess.run([sys.executable, "-m", "fpr", "--workspace", str(ws), *args], env=env,
                          capture_output=True, text=True, timeout=timeout * load_factor())


def _on_ray(cluster: LocalCluster, *extra: str) -> list[str]:
    return ["--engine", "ray", "--ray-address", cluster.address, "--ray-actors", "2", *extra]


def _stored(ws, run_id: str) -> list[pd.DataFrame]:
    q = api.sql(f"SELECT * EXCLUDE (run_id) FROM query_results WHERE run_id = '{run_id}' ORDER BY row_number",
                workspace=ws)
    a = api.sql(f"SELECT * EXCLUDE (run_id) FROM aux_scores WHERE run_id = '{run_id}' "
                "ORDER BY query_id, scorer, metric", workspace=ws)
    r = api.sql(f"SELECT * EXCLUDE (run_id) FROM rankings WHERE run_id = '{run_id}' ORDER BY query_id, rank",
                workspace=ws)
    return [q, a, r]


def _assert_same_run(ws, run_a: str, run_b: str) -> None:
    for a, b in zip(_stored(ws, run_a), _stored(ws, run_b)):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def test_query_score_and_filter_by_address_equal_the_local_engine(setup, cluster):
    tmp, ws, qfile = setup
    # query: 16 shards of 2 (2 groups x 15 queries) on 2 actors of the 3-node cluster
    out = _cli(ws, "query", "--index", INDEX, "--queries", str(qfile), "--run", "c1", "--format", "json",
               *_on_ray(cluster, "--ray-shard-size", "2"), cache=tmp / "cache-ray")
    assert out.returncode == 0, out.stderr[-4000:]
    eng = validate(json.loads(out.stdout), RUN_RESULT)["provenance"]["engine"]
    assert eng["address"] == cluster.address and eng["actors"] == 2 and eng["shards"] == 16
    names = cluster.node_ids()
    assert sum(eng["nodes"].values()) == 16 and set(eng["nodes"]) <= set(names)
    loc = api.run_query(INDEX, qfile, run="local", workspace=ws)
    _assert_same_run(ws, "c1", "local")
    assert len(_stored(ws, "c1")[0]) == 30
    assert json.loads(out.stdout)["summary"] == json.loads(json.dumps(loc.to_dict()["summary"]))

    # score: the scorer on the cluster's actors, stored like a local fpr score of the local run
    out = _cli(ws, "score", "--run", "c1", "--scorers", SCORER, *_on_ray(cluster, "--ray-shard-size", "8"),
               cache=tmp / "cache-ray")
    assert out.returncode == 0, out.stderr[-4000:]
    assert "ray: score: 4 shard(s) on 2 actor(s)" in out.stderr
    api.score_run("local", SCORER, workspace=ws)
    aux = _stored(ws, "c1")[1]
    assert len(aux) > 0 and set(aux["scorer"]) == {SCORER} and not aux.duplicated(["query_id", "metric"]).any()
    _assert_same_run(ws, "c1", "local")

    # filter: byte-identical kept and rejected files
    rule = "top1 and ap >= 0.5 and not copy_paste"
    out = _cli(ws, "filter", "--index", INDEX, "--queries", str(qfile), "--keep", rule, "--out",
               str(tmp / "kept-ray.csv"), "--rejected", str(tmp / "rej-ray.csv"), "--chunk-size", "4",
               *_on_ray(cluster), cache=tmp / "cache-ray")
    assert out.returncode == 0, out.stderr[-4000:]
    api.filter_queries(INDEX, qfile, rule, tmp / "kept.csv", rejected=tmp / "rej.csv", workspace=ws, chunk_size=4)
    assert (tmp / "kept-ray.csv").read_bytes() == (tmp / "kept.csv").read_bytes()
    assert (tmp / "rej-ray.csv").read_bytes() == (tmp / "rej.csv").read_bytes()
    assert 0 < len(pd.read_csv(tmp / "kept.csv")) < 30


def _query_until_a_node_is_killed(cluster: LocalCluster, cmd: list[str], env: dict,
                                  shards: Path) -> tuple[subprocess.Popen, int, str]:
    """Start the driver; once a shard is done, kill a worker node that runs an actor (the head has one CPU,
    so one of the two actors runs on a worker node). Returns the driver, the shards done at the kill and
    the node killed."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = Deadline(300)
    while not deadline.passed() and proc.poll() is None:
        done = len(list(shards.glob("*/part-*.done")))
        busy = [n for n in ("w1", "w2") if done and cluster.actors_on(n)]
        if busy:
            cluster.kill_node(busy[0])
            return proc, done, busy[0]
        time.sleep(0.02)
    proc.kill()
    raise AssertionError(f"no shard done with an actor on a worker node after {deadline.describe()}: "
                         f"{proc.communicate()[1][-3000:]}")


def test_a_worker_node_killed_mid_run_loses_nothing_and_counts_nothing_twice(setup, cluster):
    """30 shards of one query on 2 actors; one worker node (raylet, object store, workers) is SIGKILLed once a
    shard is done and an actor runs there. The run completes on the surviving nodes (Ray restarts the actor
    and retries its shard) or, if Ray gives up, a rerun resumes from the shards already written; either way
    the stored run equals the local one row for row: 30 queries, each once."""
    tmp, ws, qfile = setup
    env = {**os.environ, "PYTHONPATH": str(REPO), "FPR_CACHE_DIR": str(tmp / "cache-kill"), "FPR_QUIET": "0",
           "RAY_ADDRESS": ""}
    cmd = [sys.executable, "-m", "fpr", "--workspace", str(ws), "query", "--index", INDEX, "--queries", str(qfile),
           "--run", "killed", "--format", "json", *_on_ray(cluster, "--ray-shard-size", "1")]
    proc, done_at_kill, victim = _query_until_a_node_is_killed(cluster, cmd, env, ws / "shards")
    stdout, stderr = proc.communicate(timeout=600 * load_factor())
    assert 1 <= done_at_kill < 30  # killed mid-run
    if proc.returncode != 0:  # Ray gave up on the lost node: the rerun resumes
        assert "Traceback" not in stderr and stderr.strip(), stderr[-3000:]
        rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600 * load_factor())
        assert rerun.returncode == 0, rerun.stderr[-4000:]
        assert "resuming:" in rerun.stderr
        stdout, stderr = rerun.stdout, rerun.stderr
    eng = validate(json.loads(stdout), RUN_RESULT)["provenance"]["engine"]  # stdout: the result only
    assert eng["shards"] == 30
    # each shard reached the driver once: those of this run, on their nodes, plus those resumed
    assert sum(eng["nodes"].values()) == 30 - eng["shards_resumed"]
    api.run_query(INDEX, qfile, run="local", workspace=ws)
    q = _stored(ws, "killed")[0]
    assert len(q) == 30 and q["query_id"].is_unique
    _assert_same_run(ws, "killed", "local")
    assert not list((ws / "shards").glob("*/part-*"))  # ingested, then the shard folder removed
    print(f"killed {victim} with {done_at_kill} of 30 shards done; first run's exit {proc.returncode}; "
          f"engine {json.dumps(eng)}; nodes {cluster.node_ids()}")
