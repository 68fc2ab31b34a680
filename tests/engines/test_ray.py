"""``--engine ray`` (fpr.engines.ray) on a local Ray runtime: the same results as the local engine
query for query (embeddings bit for bit on the CPU), after a worker dies mid-run, after the driver is
killed (finished shards are not redone), and with more data in flight than the object store holds.

One Ray runtime (2 CPUs, an 80 MB object store) serves the whole module; it is shut down after.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray runtime per module, minutes on 2 cores: .ci/run runs -m slow

import fpr.api as api  # noqa: E402
from fpr.encoders.embed import EMBED_STATS  # noqa: E402
from fpr.engines import ray as ray_engine  # noqa: E402
from fpr.engines import ray_runtime as ray_rt
from fpr.galleries.curate import GallerySpec  # noqa: E402
from fpr.store.workspace import Workspace  # noqa: E402
from fpr.workflows.filter import filter_queries  # noqa: E402
from fpr.render.result import RUN_RESULT  # noqa: E402
from tests.conftest import run_cli, write_image  # noqa: E402
from tests.result_schema import validate  # noqa: E402
from tests.workflows.test_filter import INDEX, setup  # noqa: E402,F401  (the 30-query gallery fixture)

OBJECT_STORE_MB = 80


@pytest.fixture(scope="module", autouse=True)
def ray_runtime():
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=OBJECT_STORE_MB * 2 ** 20,
             runtime_env=ray_rt.local_runtime_env(), log_to_driver=False)
    yield ray
    ray.shutdown()


def _stored(ws, run_id: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    q = api.sql(f"SELECT * EXCLUDE (run_id) FROM query_results WHERE run_id = '{run_id}' ORDER BY row_number",
                workspace=ws)
    a = api.sql(f"SELECT * EXCLUDE (run_id) FROM aux_scores WHERE run_id = '{run_id}' "
                "ORDER BY query_id, scorer, metric", workspace=ws)
    r = api.sql(f"SELECT * EXCLUDE (run_id) FROM rankings WHERE run_id = '{run_id}' ORDER BY query_id, rank",
                workspace=ws)
    return q, a, r


def _fresh_cache(monkeypatch, tmp_path, name: str) -> None:
    monkeypatch.setenv("FPR_CACHE_DIR", str(tmp_path / name))


def _same_rows(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Summary rows equal value for value (NaN equals NaN: a row without an interval has NaN bounds)."""
    return a.equals(b)


def test_world_query_and_embed_on_ray_equal_local_bit_for_bit(tmp_path, workspace, monkeypatch):
    """The demo world with its own encoder (fpr-world-v2): every stored value equal, vectors bit for bit,
    each side computing its embeddings (separate caches); the run says it ran on Ray with the cache used.

    The local run scores each species' queries in one block, Ray in shards of 7: a query's scores do not
    depend on its block-mates (scores are exact: fpr.index.exact)."""
    from fpr.eval import relevance
    from fpr.galleries.world import World, WorldConfig

    build = World(WorldConfig(seed=3, identities=2, gallery=3, references=1, queries=1, size=64)).write(
        tmp_path / "world")
    api.import_gallery("world", build.records, GallerySpec(seed=3), workspace=workspace, source="world")
    api.build_index("world", "fpr-world-v2", name="world-idx", workspace=workspace, device="cpu")
    queries = pd.DataFrame(build.queries)
    _fresh_cache(monkeypatch, tmp_path, "cache-ray")
    before = EMBED_STATS["images_embedded"]
    res = api.run_query("world-idx", queries, run="on-ray", workspace=workspace, device="cpu", engine="ray",
                        ray={"shard_size": 7})
    assert EMBED_STATS["images_embedded"] == before  # the driver embedded nothing: the actors did
    _fresh_cache(monkeypatch, tmp_path, "cache-local")
    loc = api.run_query("world-idx", queries, run="local", workspace=workspace, device="cpu")
    for a, b in zip(_stored(workspace, "on-ray"), _stored(workspace, "local")):
        pd.testing.assert_frame_equal(a, b, check_exact=True)  # per-query values, (no) aux scores, rankings
    assert _same_rows(res.summary, loc.summary)
    eng = res.provenance["engine"]
    assert validate(json.loads(json.dumps(res.to_dict())), RUN_RESULT)["provenance"]["engine"]["engine"] == "ray"
    n = len(queries)
    assert eng["engine"] == "ray" and eng["ray_version"] == ray.__version__ and eng["actors"] == 1
    plan = ray_engine.shard_plan(api.read_queries(queries), relevance.open_index(
        Workspace.open(workspace), "world-idx").labels, "group", 7)
    assert max(len(r) for r in plan) == 7
    assert eng["shards"] == len(plan) > queries["group"].nunique() and eng["shards_resumed"] == 0
    assert eng["cache"].startswith(f"used: {tmp_path / 'cache-ray' / 'embeddings'}")
    stored = json.loads(api.sql("SELECT provenance FROM runs WHERE run_id = 'on-ray'", workspace=workspace)
                        ["provenance"][0])
    assert stored["engine"]["actor_device"] == "cpu"
    # report, export and the HTML report read the Ray run like any run
    assert _same_rows(api.report("on-ray", workspace=workspace).summary, loc.summary)
    out = api.export_run("on-ray", tmp_path / "exp.csv", workspace=workspace)
    assert len(pd.read_csv(out)) == n

    # embed: bit for bit against a local run with a cold cache, and a worker that dies mid-run is retried
    paths = [r.path for r in build.records][:12]
    crash = tmp_path / "crash-once"
    crash.write_text("1")
    monkeypatch.setenv(ray_engine.CRASH_ENV, str(crash))
    _fresh_cache(monkeypatch, tmp_path, "cache-embed-ray")
    on_ray = api.embed("fpr-world-v2", paths, device="cpu", engine="ray", ray={"shard_size": 4})
    assert not crash.exists()  # the actor that took shard 1 exited; Ray restarted it and retried the shard
    monkeypatch.delenv(ray_engine.CRASH_ENV)
    _fresh_cache(monkeypatch, tmp_path, "cache-embed-local")
    local = api.embed("fpr-world-v2", paths, device="cpu")
    assert local.n_computed == len(set(local.hashes)) and on_ray.n_computed == local.n_computed
    assert on_ray.vectors.dtype == np.float32 and np.array_equal(on_ray.vectors, local.vectors)
    assert on_ray.hashes == local.hashes


def test_filter_on_ray_keeps_the_same_rows(setup, monkeypatch):
    tmp, ws, qfile = setup
    rule = "top1 and ap >= 0.5 and not copy_paste"
    res = filter_queries(INDEX, qfile, rule, tmp / "kept-ray.csv", rejected=tmp / "rej-ray.csv", workspace=ws,
                         chunk_size=8, engine="ray")
    _fresh_cache(monkeypatch, tmp, "cache-local")
    loc = filter_queries(INDEX, qfile, rule, tmp / "kept.csv", rejected=tmp / "rej.csv", workspace=ws, chunk_size=8)
    assert (tmp / "kept-ray.csv").read_bytes() == (tmp / "kept.csv").read_bytes()
    assert (tmp / "rej-ray.csv").read_bytes() == (tmp / "rej.csv").read_bytes()
    assert 0 < res.n_kept == loc.n_kept < 30 and res.reasons == loc.reasons and res.n_chunks == 4
    assert res.engine["engine"] == "ray" and res.engine["chunks"] == 4 and not loc.engine
    assert not (tmp / ".kept-ray.csv.fpr-filter").exists()  # state folder removed as on the local engine


def test_query_resumes_after_the_driver_is_killed(setup, ray_runtime, monkeypatch):
    """A CLI driver connected to the running cluster is killed after some shards; the rerun skips them.

    Shards of 2: 2 groups x 8 pieces (15 queries each)."""
    tmp, ws, qfile = setup
    address = ray_runtime.get_runtime_context().gcs_address
    env = {**os.environ, "FPR_QUIET": "0",
           "PYTHONPATH": os.pathsep.join([str(Path(api.__file__).resolve().parent.parent),
                                          os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "fpr", "--workspace", str(ws), "query", "--index", INDEX, "--queries", str(qfile),
           "--run", "r1", "--engine", "ray", "--ray-address", address, "--ray-shard-size", "2", "--format", "json"]
    shards = ws / "shards"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list(shards.glob("*/part-*.done")):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    n_done = len(list(shards.glob("*/part-*.done")))
    assert 1 <= n_done
    assert not api.sql("SELECT * FROM runs", workspace=ws).shape[0]  # nothing stored: the driver died first
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"resuming: {n_done} of 16 shards already done" in out.stderr  # 2 groups x 8 pieces (15 queries)
    printed = validate(json.loads(out.stdout), RUN_RESULT)  # stdout holds the result only; Ray's progress: stderr
    assert printed["provenance"]["engine"]["shards_resumed"] == n_done
    loc = api.run_query(INDEX, qfile, run="local", workspace=ws)
    for a, b in zip(_stored(ws, "r1"), _stored(ws, "local")):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert printed["summary"] == json.loads(json.dumps(loc.to_dict()["summary"]))


def test_more_pixels_than_the_object_store_holds_stream_through(tmp_path, monkeypatch):
    """600 images at 128 px are 118 MB of decoded pixels through an 80 MB object store (decoding in
    separate tasks, so every block crosses the store): the run completes and equals the local one."""
    import torch

    from fpr.encoders.preprocess import Preprocessing
    from fpr.encoders.registry import EncoderSpec, register, unregister
    from fpr.encoders.weights import WeightsSource

    def build(_):
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.AvgPool2d(8), torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 8))

    register(EncoderSpec(id="test-pool-128", family="test", dim=8,
                         preprocessing=Preprocessing(name="test-128", size=128), weights=WeightsSource(kind="none"),
                         build=build), replace=True)
    try:
        paths = [str(write_image(tmp_path / "many" / f"{i}.png", seed=i, size=32)) for i in range(600)]
        pixels_mb = len(paths) * 3 * 128 * 128 * 4 / 2 ** 20
        assert pixels_mb > 1.4 * OBJECT_STORE_MB
        on_ray = api.embed("test-pool-128", paths, device="cpu", engine="ray",
                           ray={"shard_size": 50, "decode_cpus": 0.5})
        _fresh_cache(monkeypatch, tmp_path, "cache-local")
        local = api.embed("test-pool-128", paths, device="cpu")
        assert np.array_equal(on_ray.vectors, local.vectors) and on_ray.engine["shards"] == 12
    finally:
        unregister("test-pool-128")


def test_engine_errors_are_one_line(setup, monkeypatch):
    tmp, ws, qfile = setup
    r = run_cli(ws, "query", "--index", INDEX, "--queries", str(qfile), "--engine", "ray", "--ray-address",
                "not an address", ok=False)
    assert r.exit_code == 2 and "bad Ray address 'not an address'" in r.output and "Traceback" not in r.output
    r = run_cli(ws, "embed", "--encoder", "pixels-16", "--images", str(qfile), "--out", str(tmp / "v.npy"),
                "--ray-actors", "2", ok=False)
    assert r.exit_code == 2 and "--ray-address and --ray-actors go with --engine ray" in r.output
    # bad input found in a worker (an image that does not decode) comes back as the local engine's one line
    (tmp / "gen" / "broken.png").write_bytes(b"not an image")
    pd.DataFrame([{"path": "gen/00.png", "identity": "cats-0", "group": "cats", "method": "m"},
                  {"path": "gen/broken.png", "identity": "cats-0", "group": "cats", "method": "m"}]).to_csv(
        tmp / "two.csv", index=False)
    r = run_cli(ws, "query", "--index", INDEX, "--queries", str(tmp / "two.csv"), "--engine", "ray", ok=False)
    assert r.exit_code == 2 and "broken.png" in r.output and "internal error" not in r.output, r.output
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    r = run_cli(ws, "filter", "--index", INDEX, "--queries", str(qfile), "--keep", "top1", "--out",
                str(tmp / "k.csv"), "--engine", "ray", ok=False)
    assert r.exit_code == 2 and "pip install 'fpr[ray]'" in r.output


def test_shard_plan_keeps_groups_together():
    """Hand-computed: group a has ok rows 0,2,3,5,7, group b 1,6, row 4 has no relevant item. Shards of 5:
    pieces [0,2,3,5,7] (a), [1,6] (b), [4] (skipped), packed up to 5 rows."""
    from fpr.eval.inputs import normalize_queries
    from fpr.eval.relevance import GalleryLabels

    labels = GalleryLabels(np.arange(5), np.array(list("aaabb"), object),
                           np.array(["a1", "a1", "a2", "b1", "b1"], object), np.zeros((0, 4), np.float32),
                           np.array([], object), np.array([], object), [], [f"g{i}" for i in range(5)])
    rows = [("a", "a1"), ("b", "b1"), ("a", "a2"), ("a", "a1"), ("b", "b9"), ("a", "a1"), ("b", "b1"), ("a", "a2")]
    qdf = normalize_queries(pd.DataFrame([{"path": f"q{i}.png", "identity": ident, "group": g, "method": "m"}
                                          for i, (g, ident) in enumerate(rows)]))
    plan = ray_engine.shard_plan(qdf, labels, "group", 5)
    assert [r.tolist() for r in plan] == [[0, 2, 3, 5, 7], [1, 4, 6]]
    plan = ray_engine.shard_plan(qdf, labels, "all", 5)  # one part: ok rows in order
    assert [r.tolist() for r in plan] == [[0, 1, 2, 3, 5], [4, 6, 7]]
    plan = ray_engine.shard_plan(qdf, labels, "group", 1)
    assert [r.tolist() for r in plan] == [[0], [2], [3], [5], [7], [1], [6], [4]]


def test_workers_use_the_cache_only_where_they_reach_it(tmp_path):
    enc = api.load_encoder("pixels-16", device="cpu")
    cache, note = ray_engine.open_worker_cache(enc, str(tmp_path / "elsewhere"))  # not on this node
    assert cache is None and note == f"bypassed: {tmp_path / 'elsewhere'} not reachable from the worker"
    (tmp_path / "shared").mkdir()
    cache, note = ray_engine.open_worker_cache(enc, str(tmp_path / "shared"))
    assert note == f"used: {tmp_path / 'shared'}" and cache.dir == tmp_path / "shared" / enc.cache_key
    assert ray_engine.open_worker_cache(enc, None) == (None, "bypassed: no cache folder")
