"""The Ray engine: ``fpr embed``, ``fpr query`` and ``fpr filter`` on a Ray cluster (``--engine ray``).

The work is cut into shards of queries (``fpr filter``: its chunks). A Ray Data
pipeline carries them:

1. a dataset with one row per shard still to do (its queries, pickled);
2. ``map_batches`` of :func:`_decode_shard` in tasks: the shard's images are read,
   hashed, decoded and put through the encoder's protocol by
   :func:`fpr.encoders.embed.decode_paths`, the same reader and decoder as a local run;
3. ``map_batches`` of :class:`_ShardWorker` on an actor pool: each actor receives the
   encoder and the job (the gallery index with its labels, the settings) once, from
   the object store, embeds the decoded images with
   :func:`fpr.encoders.embed.embed_decoded` and runs the job, which calls the local
   engine's own functions (:func:`fpr.eval.pipeline.evaluate`, the filter's chunk
   function) with the embeddings served from what was just computed;
4. the driver receives each finished shard (streaming, in completion order) and
   writes it as files in a shard folder; a shard whose files exist is not run again.

Results therefore equal a local run's query for query by construction: the same
functions compute them, and every per-query value depends on that query alone.
On a CPU the embeddings are bit for bit those of a local run (the encoder embeds one
image per forward pass); on a GPU, for the same device and precision, up to the
batch composition.

Ray is imported here only, and only when the engine runs: a missing Ray is one
line naming ``fpr[ray]``. When Ray is already initialised (a notebook, a test) that
runtime is used as it is; otherwise ``ray.init`` connects to ``address`` or starts a
local runtime on this machine, shut down after the run.
"""
from __future__ import annotations

import math
import os
import pickle
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fpr import keys, progress, settings
from fpr.defaults import EMBED_BATCH_SIZE
from fpr.engines.parts import PartsFolder
from fpr.errors import FprError, InputError
from fpr.eval import frames, pipeline, scoring
from fpr.files import ensure_dir
from fpr.engines.ray_runtime import ENGINES, RayOptions, Runtime, _ray, check_engine, ray_options

DEFAULT_SHARD_SIZE = 256
SHARD_PIXEL_BYTES = 256 * 2 ** 20  # default shard: at most this much decoded pixels (float32) per shard
# Test hook: a file holding a shard number; the actor that takes that shard deletes the file and
# exits its process (as a crashed or preempted worker would). Ray restarts the actor and retries.
CRASH_ENV = "FPR_RAY_CRASH_ONCE"


# --------------------------------------------------------------------------- the runtime


# --------------------------------------------------------------------------- stages

def _decode_shard(batch: dict, preprocess) -> dict:
    """Task: read, hash, decode and preprocess the images of each shard in the batch."""
    from fpr.encoders.embed import decode_paths

    decoded = [pickle.dumps(decode_paths(preprocess, pickle.loads(p)["paths"]), protocol=5)
               for p in batch["payload"]]
    return {"shard": batch["shard"], "payload": batch["payload"], "decoded": np.array(decoded, dtype=object)}


def open_worker_cache(encoder, root: str | None) -> tuple[object | None, str]:
    """The embedding cache at ``root`` when this process can reach it (an existing, writable folder,
    e.g. on a shared file system), else None; with a note saying which."""
    from fpr.encoders.embed import cache_for

    if not root:
        return None, "bypassed: no cache folder"
    if not (os.path.isdir(root) and os.access(root, os.W_OK)):
        return None, f"bypassed: {root} not reachable from the worker"
    return cache_for(encoder, root), f"used: {root}"


class _ShardWorker:
    """Actor: holds the encoder and the job (loaded once from the object store), runs shards."""

    def __init__(self, shared_ref, cache_root: str | None, batch_size: int, gpu: bool, crash_file: str | None):
        import torch

        ray = _ray()
        shared = ray.get(shared_ref[0])
        enc = shared["encoder"]
        if gpu and torch.cuda.is_available():
            from fpr.encoders.registry import Encoder

            enc = Encoder(enc.spec, enc.weights, enc.model, torch.device("cuda"))
        self.encoder = enc
        self.job = shared["job"]
        self.batch_size = batch_size
        self.crash_file = crash_file
        self.cache, self.cache_note = open_worker_cache(enc, cache_root)
        self.node = ray.get_runtime_context().get_node_id()

    def _embed(self, paths, *, on_error: str = "raise", desc: str = "embedding"):
        from fpr.encoders.embed import embed_paths

        return embed_paths(self.encoder, paths, batch_size=self.batch_size, workers=0,
                           cache=self.cache if self.cache is not None else False, on_error=on_error, desc=desc)

    def __call__(self, batch: dict) -> dict:
        from fpr.encoders.embed import embed_decoded

        out = []
        for k, payload, decoded in zip(batch["shard"], batch["payload"], batch["decoded"]):
            self._maybe_crash(int(k))
            t0 = time.perf_counter()
            dec = pickle.loads(decoded)
            job_input = pickle.loads(payload)
            try:
                embedded = embed_decoded(self.encoder, dec, batch_size=self.batch_size, cache=self.cache)
                served = served_embedder(job_input["paths"], embedded, self._embed)
                result = self.job.run(self.encoder, job_input, embedded, served)
            except FprError as exc:  # bad input (an unreadable image, ...): raised again by the driver, as is
                result = {"fpr_error": exc}
            result["worker"] = {"pid": os.getpid(), "node": self.node, "device": self.encoder.device_class,
                                "precision": self.encoder.precision, "embedding_key": self.encoder.cache_key,
                                "cache": self.cache_note,
                                "seconds": time.perf_counter() - t0, "n_images": len(dec.hashes)}
            out.append(pickle.dumps(result, protocol=5))
        return {"shard": batch["shard"], "result": np.array(out, dtype=object)}

    def _maybe_crash(self, k: int) -> None:
        if not self.crash_file:
            return
        try:
            target = int(Path(self.crash_file).read_text().strip())
        except (OSError, ValueError):
            return
        if target == k:
            Path(self.crash_file).unlink()
            os._exit(17)


def served_embedder(paths: Sequence[str], embedded, fallback: Callable):
    """An ``embed(paths, on_error=, desc=)`` for the pipeline that serves ``paths`` (already embedded
    as ``embedded``) from memory and anything else from ``fallback`` (references, scorers)."""
    from fpr.encoders.embed import EmbedResult, raise_if_failed

    pos: dict[str, int] = {}
    for i, p in enumerate(paths):
        pos.setdefault(str(p), i)

    def embed(want, *, on_error: str = "raise", desc: str = "embedding"):
        want = [str(p) for p in want]
        if not all(p in pos for p in want):
            return fallback(want, on_error=on_error, desc=desc)
        rows = [pos[p] for p in want]
        failed = {j: embedded.failed[i] for j, i in enumerate(rows) if i in embedded.failed}
        raise_if_failed(failed, on_error)
        return EmbedResult(embedded.vectors[rows], [embedded.hashes[i] for i in rows], failed,
                           embedded.n_from_cache, embedded.n_computed, embedded.seconds)
    return embed


# --------------------------------------------------------------------------- the driver

def _actor_plan(ray, options: RayOptions, device: str) -> tuple[int, float]:
    """(actors, GPUs per actor): one actor per GPU when the cluster has GPUs and the device allows.

    More actors than GPUs share them: 1/k of a GPU each, k = ceil(actors / GPUs), so that every
    GPU holds k whole actors. An actor also ranks and runs the scorers on its CPU, which for a fast
    encoder is most of its time: several actors per GPU keep the GPU busy (docs/scale.md)."""
    gpus = int(ray.cluster_resources().get("GPU", 0))
    use_gpu = gpus > 0 and device != "cpu"
    if device.startswith("cuda") and gpus == 0:
        raise InputError(f"--device {device} but the Ray cluster has no GPUs",
                         hint="use --device auto or cpu, or a cluster with GPU nodes")
    if use_gpu:
        actors = options.actors or gpus
        return actors, 1.0 / math.ceil(actors / gpus)
    return (options.actors or 1), 0.0


def run_shards(shards: Sequence[tuple[int, dict]], job, encoder, *, options: RayOptions, device: str,
               batch_size: int, cache_root: str | None, on_result: Callable[[int, dict], None],
               what: str) -> dict:
    """Run ``job`` over ``shards`` ((number, input dict with ``paths``)) on Ray; ``on_result(k, result)``
    is called in the driver for each finished shard. Returns the run's engine information."""
    if not shards:  # everything was done by an earlier, interrupted run: no need to start Ray
        return {"engine": "ray", "ray_version": _ray().__version__, "address": options.address or "local",
                "actors": 0, "gpus_per_actor": 0.0}
    with Runtime(options) as ray:
        n_actors, gpus = _actor_plan(ray, options, device)
        n_actors = max(1, min(n_actors, len(shards)))
        info = {"engine": "ray", "ray_version": ray.__version__, "address": options.address or "local",
                "actors": n_actors, "gpus_per_actor": gpus}
        shared = ray.put({"encoder": encoder, "job": job})
        rows = [{"shard": int(k), "payload": pickle.dumps(inp, protocol=5)} for k, inp in shards]
        ds = ray.data.from_items(rows, override_num_blocks=len(rows))
        ds = ds.map_batches(_decode_shard, batch_size=1, batch_format="numpy",
                            fn_kwargs={"preprocess": encoder.preprocessing}, num_cpus=options.decode_cpus)
        ds = ds.map_batches(_ShardWorker, batch_size=1, batch_format="numpy",
                            compute=ray.data.ActorPoolStrategy(size=n_actors), num_cpus=options.actor_cpus,
                            num_gpus=gpus or None,
                            fn_constructor_kwargs={"shared_ref": [shared], "cache_root": cache_root,
                                                   "batch_size": batch_size, "gpu": gpus > 0,
                                                   "crash_file": settings.raw(CRASH_ENV) or None})
        progress.log(f"ray: {what}: {len(shards)} shard(s) on {n_actors} actor(s)"
                     f"{' with a GPU each' if gpus else ''} (Ray {ray.__version__}, {info['address']})")
        workers: dict = {}
        nodes: dict[str, int] = {}  # shards per Ray node id: where the work ran
        t0 = time.perf_counter()
        n_images = 0
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for k, raw in zip(batch["shard"], batch["result"]):
                res = pickle.loads(raw)
                w = res.pop("worker")
                if "fpr_error" in res:
                    raise res["fpr_error"]
                workers[w["cache"]] = workers.get(w["cache"], 0) + 1
                nodes[w["node"]] = nodes.get(w["node"], 0) + 1
                info.setdefault("actor_device", w["device"])
                info.setdefault("actor_precision", w["precision"])
                info.setdefault("actor_embedding_key", w["embedding_key"])
                n_images += w["n_images"]
                on_result(int(k), res)
        dt = time.perf_counter() - t0
        info["cache"] = "; ".join(f"{note} ({n} shard{'s' if n != 1 else ''})" for note, n in workers.items())
        info["nodes"] = nodes
        info["seconds"] = round(dt, 3)
        info["images_per_s"] = round(n_images / dt, 2) if dt > 0 else None
        progress.log(f"ray: {what}: {n_images} images in {dt:.1f}s ({n_images / max(dt, 1e-9):.1f} img/s); "
                     f"embedding cache {info['cache']}")
        return info


def cache_root_for_workers() -> str:
    """The embedding cache folder the workers are offered (created here, so that a worker that
    sees it shares it; a worker on a node without it bypasses the cache)."""
    from fpr.encoders.cache import default_cache_root

    root = default_cache_root()
    try:
        ensure_dir(root)
    except InputError:
        pass  # the workers then find no cache folder and say so
    return str(root.resolve())


def portable_index(opened):
    """An :class:`fpr.eval.relevance.OpenIndex` without its gallery item list and its lazily built
    searchers, to ship to the actors once."""
    from fpr.eval.relevance import OpenIndex
    from fpr.index.faiss_index import GalleryIndex

    gi = opened.index
    clean = GalleryIndex(gi.card, gi.index, gi.item_ids, gi.ref_vectors, gi.ref_ids, gi.approx)
    return OpenIndex(clean, opened.row, [], opened.labels)


# --------------------------------------------------------------------------- shard folders

def frame_digest(df: pd.DataFrame) -> str:
    """A digest of a table's content (every column as text), for fingerprints."""
    h = keys.hasher()
    h.update(",".join(map(str, df.columns)).encode())
    h.update(pd.util.hash_pandas_object(df.astype(str), index=False).to_numpy().tobytes())
    return h.hexdigest()[:24]


def default_shard_size(encoder) -> int:
    """256 images, fewer where their decoded pixels would pass 256 MB (a 440 px protocol: 111)."""
    size = encoder.preprocessing.output_size
    return int(max(1, min(DEFAULT_SHARD_SIZE, SHARD_PIXEL_BYTES // (3 * size * size * 4))))


def n_shards(n_rows: int, size: int) -> int:
    return max(0, math.ceil(n_rows / size))


# --------------------------------------------------------------------------- embed

class EmbedJob:
    """Per shard: the embeddings, hashes and failures of its images."""

    def run(self, encoder, job_input: dict, embedded, embed) -> dict:
        return {"vectors": embedded.vectors, "hashes": embedded.hashes, "failed": embedded.failed,
                "n_from_cache": embedded.n_from_cache, "n_computed": embedded.n_computed}


def embed_paths_ray(encoder, paths: Sequence[str], *, options: RayOptions, shard_dir: Path,
                    batch_size: int = EMBED_BATCH_SIZE,
                    on_error: str = "raise", device: str = "auto"):
    """:func:`fpr.encoders.embed.embed_paths` on Ray: rows in input order; shards in ``shard_dir``
    (kept until the caller removes them, so a killed run resumes)."""
    from fpr.encoders.embed import EmbedResult, raise_if_failed

    start = time.perf_counter()
    paths = [str(p) for p in paths]
    size = options.shard_size or default_shard_size(encoder)
    folder = PartsFolder(shard_dir, {"what": "embed", "paths": keys.sha256_hex("\n".join(paths)),
                                     "encoder": encoder.id, "weights": encoder.weights.checksum,
                                     "protocol": encoder.preprocessing.key(), "shard": size})
    total = n_shards(len(paths), size)
    done = folder.done()
    todo = [(k, {"paths": paths[k * size:(k + 1) * size]}) for k in range(total) if k not in done]
    if done:
        progress.log(f"resuming: {len(done)} of {total} shards already done ({folder.root})")

    def write(k: int, res: dict) -> None:
        n = len(res["hashes"])
        df = pd.DataFrame({"row": np.arange(k * size, k * size + n), "hash": res["hashes"],
                           "vector": [v.tobytes() for v in res["vectors"]],
                           "error": [res["failed"].get(i, "") for i in range(n)]})
        folder.write_parquet(k, ".parquet", df)
        folder.write_json(k, ".json", {"n_from_cache": res["n_from_cache"], "n_computed": res["n_computed"]})
        folder.mark_done(k)

    info = run_shards(todo, EmbedJob(), encoder, options=options, device=device, batch_size=batch_size,
                      cache_root=cache_root_for_workers(), on_result=write, what="embedding")
    out = np.full((len(paths), encoder.spec.dim), np.nan, dtype=np.float32)
    hashes: list[str | None] = [None] * len(paths)
    failed: dict[int, str] = {}
    n_cached = n_computed = 0
    for k in range(total):
        df = folder.read_parquet(k, ".parquet")
        counts = folder.read_json(k, ".json")
        n_cached += counts["n_from_cache"]
        n_computed += counts["n_computed"]
        for row, h, vec, err in df[["row", "hash", "vector", "error"]].itertuples(index=False):
            hashes[row] = h if isinstance(h, str) else None
            if err:
                failed[row] = err
            else:
                out[row] = np.frombuffer(vec, dtype=np.float32)
    raise_if_failed(failed, on_error)
    res = EmbedResult(out, hashes, failed, n_cached, n_computed, time.perf_counter() - start)
    res.engine = {**info, "shards": total, "shards_resumed": len(done), "shard_dir": str(folder.root)}
    return res


# --------------------------------------------------------------------------- query

class QueryJob:
    """Per shard: :func:`fpr.eval.pipeline.evaluate` of its queries against the broadcast index."""

    def __init__(self, opened, settings, encoder_id: str, workspace: str | None, where: str, dim: int):
        self.opened = opened
        self.settings = settings
        self.encoder_id = encoder_id
        self.workspace = workspace
        self.where = where
        self.dim = dim
        self.block_bytes = scoring.BLOCK_BYTES

    def run(self, encoder, job_input: dict, embedded, embed) -> dict:
        qdf = job_input["qdf"]
        scoring.BLOCK_BYTES = self.block_bytes  # block as the driver's process does (FPR_EVAL_BLOCK_MB there)
        ev = pipeline.evaluate(qdf, self.opened.labels, self.opened.index, embed, self.settings, where=self.where,
                               encoder_id=self.encoder_id,
                               workspace=Path(self.workspace) if self.workspace else None, dim=self.dim)
        return {"per_query": frames.stored_columns(ev.per_query, ""), "aux": ev.aux, "rankings": ev.rankings,
                "reasons": ev.reasons, "aux_provenance": ev.aux.attrs.get("provenance")}


def shard_plan(qdf: pd.DataFrame, labels, scope: str, shard_size: int) -> list[np.ndarray]:
    """Rows of each shard: the queries of each scored part (a group with ``--scope group``, all of
    them with ``all``) in row order, cut into pieces of at most ``shard_size`` and packed into shards
    of up to ``shard_size`` queries; queries without a relevant gallery image (skipped) fill shards of
    their own. Keeping a group's queries together lets an actor score them against one sub-index.
    Where a shard's pieces fall does not change any value: scores are exact
    (:func:`fpr.index.exact.exact_scores`), so a query's scores do not depend on its block-mates.
    """
    codes = labels.codes(qdf)
    ok = np.flatnonzero(labels.has_relevant(qdf))
    rest = np.setdiff1d(np.arange(len(qdf)), ok)
    if scope == "all":
        parts = [ok]
    else:
        qg = codes.q_group[ok]
        parts = [ok[qg == g] for g in np.unique(qg)]
    pieces = [rows[s:s + shard_size] for rows in parts for s in range(0, len(rows), shard_size)]
    pieces += [rest[s:s + shard_size] for s in range(0, len(rest), shard_size)]
    shards: list[list[np.ndarray]] = []
    filled = shard_size
    for piece in pieces:
        if filled + len(piece) > shard_size:
            shards.append([])
            filled = 0
        shards[-1].append(piece)
        filled += len(piece)
    return [np.sort(np.concatenate(sh)) for sh in shards]


def evaluate_ray(qdf: pd.DataFrame, opened, encoder, settings, *, options: RayOptions, shard_dir: Path,
                 fingerprint: dict, where: str = "queries", workspace: Path | None = None):
    """:func:`fpr.eval.pipeline.evaluate` on Ray, shard by shard (:func:`shard_plan`); returns
    (Evaluation, engine info), rows in query order as a local run returns them.

    Missing identities must have been checked by the caller (``missing_identities``) with the
    same ``skip`` setting; shards are written to ``shard_dir`` and read back at the end."""
    size = options.shard_size or default_shard_size(encoder)
    plan = shard_plan(qdf, opened.labels, settings.scope, size)
    folder = PartsFolder(shard_dir, {**fingerprint, "queries": frame_digest(_digest_columns(qdf)), "shard": size})
    total = len(plan)
    done = folder.done()
    if done:
        progress.log(f"resuming: {len(done)} of {total} shards already done ({folder.root})")
    has_rel = opened.labels.has_relevant(qdf)
    todo = []
    for k, rows in enumerate(plan):
        if k in done:
            continue
        part = qdf.iloc[rows].reset_index(drop=True)
        todo.append((k, {"qdf": part, "paths": part["path"][has_rel[rows]].tolist()}))

    def write(k: int, res: dict) -> None:
        folder.write_parquet(k, ".aux.parquet", res["aux"])
        folder.write_parquet(k, ".rankings.parquet", res["rankings"])
        folder.write_json(k, ".json", {"reasons": res["reasons"], "aux_provenance": res["aux_provenance"]})
        folder.write_parquet(k, ".parquet", res["per_query"])
        folder.mark_done(k)

    job = QueryJob(portable_index(opened), settings, encoder.id, str(workspace) if workspace else None, where,
                   encoder.spec.dim)
    info = run_shards(todo, job, encoder, options=options, device=settings.device, batch_size=settings.batch_size,
                      cache_root=cache_root_for_workers(), on_result=write, what="query")
    per_query, aux, rankings, reasons, aux_prov = [], [], [], {}, None
    for k in range(total):
        per_query.append(folder.read_parquet(k, ".parquet"))
        aux.append(folder.read_parquet(k, ".aux.parquet"))
        rankings.append(folder.read_parquet(k, ".rankings.parquet"))
        meta = folder.read_json(k, ".json")
        reasons.update(meta["reasons"])
        aux_prov = aux_prov or meta.get("aux_provenance")
    stored = pd.concat(per_query, ignore_index=True) if per_query else frames.stored_columns(
        frames.query_frame(qdf.iloc[:0], np.array([], dtype=object), []), "")
    stored = stored.sort_values("row_number", kind="stable").reset_index(drop=True)
    order = {q: i for i, q in enumerate(stored["query_id"])}  # query order, as a local run lists rows
    aux_df = _in_query_order(_concat(aux, frames.empty_aux()), order, ["scorer", "metric"])
    if aux_prov:
        aux_df.attrs["provenance"] = aux_prov
    per = frames.expand_extras(stored.drop(columns=["run_id"]))
    per["row_number"] = per["row_number"].astype(np.int64)
    ev = pipeline.Evaluation(per["status"].to_numpy(dtype=object), per, aux_df,
                             _in_query_order(_concat(rankings, frames.empty_rankings()), order, [], ["rank"]),
                             np.zeros((len(per), 0), np.float32), reasons)
    info = {**info, "shards": total, "shards_resumed": len(done), "shard_size": size,
            "shard_dir": str(folder.root)}
    return ev, info


def _in_query_order(df: pd.DataFrame, order: dict, before: list[str], after: Sequence[str] = ()) -> pd.DataFrame:
    if not len(df):
        return df
    key = df["query_id"].map(order)
    return (df.assign(__q=key).sort_values([*before, "__q", *after], kind="stable").drop(columns="__q")
            .reset_index(drop=True))


def _concat(frames: list[pd.DataFrame], empty: pd.DataFrame) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else empty


def _digest_columns(qdf: pd.DataFrame) -> pd.DataFrame:
    return qdf.drop(columns=[c for c in ("reference_list",) if c in qdf.columns])


__all__ = ["ENGINES", "RayOptions", "Runtime", "check_engine", "embed_paths_ray", "evaluate_ray",
           "ray_options", "run_shards", "served_embedder"]
