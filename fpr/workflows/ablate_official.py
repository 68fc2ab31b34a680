"""``fpr ablate --protocol official``: the paper's gallery ablations as its released code runs them.

The released code (``OSU-MLB/Finer-Personalization-Rank`` at ``b4552a6``) has two ablations:

**Settings grid** (``evaluation/get_ablation.py`` + ``Evaluate.evaluate``; config
``evaluation/configs/ablation.json``). A setting ``[N, M]`` is (identities in the
gallery of a species, gallery images per identity): ``[15,10] [25,10] [10,10] [100,10]
[10,1] [10,5] [10,20]``. Per species:

- identities: the query identities; when ``N > 10`` plus ``min(N - 10, available)``
  *distractor* identities drawn with ``random.sample`` from the gallery identities that
  are not query identities (the literal 10 is the number of query identities per
  species). The released code draws them without a seed, anew in every evaluate call
  (so per method and per encoder); fpr draws once per (species, N) from
  ``random.Random(seed)`` (seed 101) and shares the draw between the baseline and all
  methods, so the settings compare the methods on the same gallery;
- images: per identity, ``min(n, M)`` of its gallery images,
  ``numpy.random.RandomState(101).choice`` afresh per identity (``x.sample(n=..., random_state=101)``);
- queries: the references (the "baseline" rows) and the generated images; mAP over the
  filtered gallery, Sim = mean cosine to the gallery images of the query's identity.

**Gallery selection** (``data_load_scripts/reid_ablation_gallery_select.py`` +
``evaluation/get_ablation_sample_gallery.py``). Per identity that has references,
``K = min(n, 10)`` of its gallery images:

- ``kmeans``: scikit-learn ``KMeans(n_clusters=K, random_state=42, n_init='auto',
  max_iter=300)`` on the *raw* (not L2-normalised) MiewID features (fp16 autocast on
  CUDA), whatever encoder evaluates; per cluster the member nearest the centroid
  (Euclidean; the first on ties);
- ``random``: ``random.sample(paths, K)`` from one ``random.Random(101)`` running over
  the identities in order.

The identities without references (distractors) are left out of these galleries, as in
the released script. Both ablations need the gallery built by the preset
``wildlife-official-ablation`` to match the paper (it holds the distractors and the extra
images per identity).

Order: the released code draws over its CSV rows (the order its loaders sampled them in);
fpr applies the same draws to the stored gallery's order (group, identity, path), so a
draw that depends on the order (the per-identity subsample, ``random``, and the k-means
initialisation) uses the released procedure and seed on that order.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fpr import progress
from fpr.defaults import EMBED_BATCH_SIZE
from fpr.errors import InputError
from fpr.eval.inputs import normalize_queries
from fpr.eval.relevance import gallery_items
from fpr.index.exact import exact_scores
from fpr.keys import new_id
from fpr.store import records as db
from fpr.store.records import check_name
from fpr.store.workspace import Workspace

OFFICIAL_SETTINGS: tuple[tuple[int, int], ...] = ((15, 10), (25, 10), (10, 10), (100, 10), (10, 1), (10, 5),
                                                  (10, 20))  # (identities N, images per identity M)
QUERY_IDENTITIES = 10  # the released "N - 10"
SUBSAMPLE_SEED = 101  # x.sample(n=min(len(x), M), random_state=101)
RANDOM_SEED = 101  # random.seed(101) in reid_ablation_gallery_select.py
KMEANS_K = 10
KMEANS_SETTINGS = {"random_state": 42, "n_init": "auto", "max_iter": 300}
CLUSTER_ENCODER = "miewid-msv2"
SELECTIONS = ("kmeans", "random")
RELEASED = "OSU-MLB/Finer-Personalization-Rank@b4552a6"
ROW_COLUMNS = ["variant", "identities", "per_identity", "sampling", "group", "method", "baseline_map",
               "baseline_sim", "baseline_n", "generated_map", "generated_sim", "generated_n", "gallery_images"]


# --------------------------------------------------------------------------- the released rules

def parse_settings(text: str | Sequence | None) -> list[tuple[int, int]]:
    """``"15x10,25x10"`` (or pairs) -> [(15, 10), (25, 10)]; None -> the released grid."""
    if text is None:
        return list(OFFICIAL_SETTINGS)
    parts = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
    out = []
    for p in parts:
        if isinstance(p, str):
            if not p:
                continue
            try:
                n, m = (int(x) for x in p.lower().split("x"))
            except ValueError:
                raise InputError(f"--settings values look like 15x10 (identities x images per identity), "
                                 f"got '{p}'") from None
        else:
            n, m = (int(x) for x in p)
        if n < 1 or m < 1:
            raise InputError(f"--settings values must be positive, got {n}x{m}")
        if (n, m) not in out:
            out.append((n, m))
    if not out:
        raise InputError("--settings needs at least one NxM value")
    return out


def draw_distractors(query_identities: Sequence[str], gallery_identities: Sequence[str], n: int,
                     seed: int = SUBSAMPLE_SEED) -> list[str]:
    """The N - 10 extra identities of a setting: ``random.sample`` of the non-query gallery identities."""
    if n <= QUERY_IDENTITIES:
        return []
    queried = set(query_identities)
    population = [i for i in dict.fromkeys(gallery_identities) if i not in queried]
    return random.Random(seed).sample(population, min(n - QUERY_IDENTITIES, len(population)))


def subsample(n_rows: int, m: int, seed: int = SUBSAMPLE_SEED) -> list[int]:
    """Rows pandas' ``sample(n=min(n_rows, m), random_state=seed)`` keeps, in its order."""
    return [int(i) for i in np.random.RandomState(seed).choice(n_rows, size=min(n_rows, m), replace=False)]


def official_kmeans_pick(features: np.ndarray, k: int) -> list[int]:
    """Rows nearest each of the ``k`` centroids of the released KMeans, in cluster order."""
    from sklearn.cluster import KMeans
    from sklearn.metrics.pairwise import euclidean_distances
    from threadpoolctl import threadpool_limits

    # float64: the released features are float16 (autocast output), which scikit-learn fits as float64;
    # fp16 values are exact in float32 and float64, so both paths see the same numbers.
    x = np.asarray(features, dtype=np.float64)
    with threadpool_limits(1):  # one identity's images are one Lloyd chunk: threads change nothing but time
        km = KMeans(n_clusters=k, **KMEANS_SETTINGS)
        labels = km.fit_predict(x)
        picks = []
        for c in range(k):
            members = np.flatnonzero(labels == c)
            if len(members) == 0:  # scikit-learn relocates empty clusters; kept for safety
                continue
            d = euclidean_distances(x[members], km.cluster_centers_[c].reshape(1, -1))
            picks.append(int(members[int(np.argmin(d))]))
    return picks


def official_random_pick(rows_per_identity: Sequence[Sequence], k: int = KMEANS_K, seed: int = RANDOM_SEED
                         ) -> list[list]:
    """``random.sample(rows, min(n, k))`` per identity from one generator seeded once."""
    rnd = random.Random(seed)
    return [rnd.sample(list(rows), min(len(rows), k)) for rows in rows_per_identity]


# --------------------------------------------------------------------------- evaluation

@dataclass
class _Group:
    name: str
    identities: list[str]  # gallery identities, in gallery order
    query_identities: list[str]  # identities with references
    rows_of: dict[str, list[int]]  # identity -> positions in pool (gallery order)
    pool_paths: list[str]
    pool_ident: np.ndarray  # identity string per pool row
    ref_ident: np.ndarray
    s_ref: np.ndarray  # (n_ref, n_pool) cosine
    gen_rows: np.ndarray
    gen_ident: np.ndarray
    s_gen: np.ndarray


def _score(s: np.ndarray, q_ident: np.ndarray, cols: np.ndarray, pool_ident: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray]:
    """AP and Sim per query against the pool columns ``cols``."""
    from fpr.metrics.ranking import retrieval_metrics

    if len(q_ident) == 0:
        return np.zeros(0), np.zeros(0)
    sub = s[:, cols]
    relevant = q_ident[:, None] == pool_ident[cols][None, :]
    ap = retrieval_metrics(sub, relevant).ap
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.where(relevant, sub, 0.0).sum(axis=1) / relevant.sum(axis=1)
    return ap, sim


def _mean(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else float("nan")


def _rows_for(variant: str, n: int | None, m: int | None, sampling: str, groups: list[_Group],
              cols_of: Callable[[_Group], np.ndarray], qdf: pd.DataFrame | None, methods: list[str]) -> list[dict]:
    out = []
    for grp in groups:
        cols = cols_of(grp)
        b_ap, b_sim = _score(grp.s_ref, grp.ref_ident, cols, grp.pool_ident)
        g_ap, g_sim = _score(grp.s_gen, grp.gen_ident, cols, grp.pool_ident)
        base = {"variant": variant, "identities": n, "per_identity": m, "sampling": sampling, "group": grp.name,
                "baseline_map": _mean(b_ap), "baseline_sim": _mean(b_sim), "baseline_n": int(np.isfinite(b_ap).sum()),
                "gallery_images": int(len(cols))}
        out.append({**base, "method": "*", "generated_map": _mean(g_ap), "generated_sim": _mean(g_sim),
                    "generated_n": int(np.isfinite(g_ap).sum())})
        if qdf is not None and len(methods) > 1:
            q_method = qdf["method"].to_numpy()[grp.gen_rows]
            for meth in methods:
                sel = q_method == meth
                out.append({**base, "method": meth, "generated_map": _mean(g_ap[sel]),
                            "generated_sim": _mean(g_sim[sel]), "generated_n": int(np.isfinite(g_ap[sel]).sum())})
    # "*" group: the mean of the per-species rows (the released code reports one row per species)
    frame = pd.DataFrame(out)
    for meth, part in frame.groupby("method", sort=False):
        out.append({"variant": variant, "identities": n, "per_identity": m, "sampling": sampling, "group": "*",
                    "method": meth, "baseline_map": _mean(part["baseline_map"]),
                    "baseline_sim": _mean(part["baseline_sim"]), "baseline_n": int(part["baseline_n"].sum()),
                    "generated_map": _mean(part["generated_map"]), "generated_sim": _mean(part["generated_sim"]),
                    "generated_n": int(part["generated_n"].sum()), "gallery_images": int(part["gallery_images"].sum())})
    return out


@dataclass
class OfficialAblationResult:
    name: str
    rows: pd.DataFrame  # ROW_COLUMNS: one row per (variant, group, method); group "*" = mean over groups
    galleries: dict[str, dict[str, list[str]]]  # variant -> group -> chosen gallery paths
    distractors: dict[tuple[str, int], list[str]]  # (group, N) -> the drawn distractor identities
    n_images: int
    seconds: float
    params: dict = field(default_factory=dict)


def _inputs(gallery: str, queries, workspace):
    """Gallery items and the queries table, read the way every evaluation reads them."""
    items = gallery_items(Workspace.open(workspace), gallery)
    qdf = normalize_queries(queries) if queries is not None else None
    return items, qdf


def _check_name(name: str) -> str:
    return check_name(name, "ablation")


def _store(workspace, name: str, df: pd.DataFrame, overwrite: bool) -> None:
    """Rows into the workspace's ``ablations`` table (the schema fpr.workflows.ablate writes)."""
    db.store_ablation(Workspace.open(workspace), name, df, overwrite=overwrite)


def _grid_rows(grid, groups: list, qdf, methods: list, seed: int) -> tuple[list[dict], dict, dict]:
    """Rows of every (N, M) setting of the released grid, the paths each chose and the distractors drawn."""
    rows: list[dict] = []
    chosen_paths: dict[str, dict[str, list[str]]] = {}
    distractors: dict[tuple[str, int], list[str]] = {}
    for n, m in progress.bar(grid, desc="settings", unit="setting"):
        variant = f"n{n}-m{m}"

        def cols_of(grp: _Group, n=n, m=m) -> np.ndarray:
            if (grp.name, n) not in distractors:  # one draw per (species, N): shared by baseline and methods
                distractors[(grp.name, n)] = draw_distractors(grp.query_identities, grp.identities, n, seed)
            keep = list(grp.query_identities) + distractors[(grp.name, n)]
            cols = []
            for ident in keep:
                rows_i = grp.rows_of.get(ident, [])
                cols.extend(rows_i[j] for j in subsample(len(rows_i), m, seed))
            return np.array(sorted(cols), dtype=np.int64)

        rows.extend(_rows_for(variant, n, m, "random", groups, cols_of, qdf, methods))
        chosen_paths[variant] = {g.name: [g.pool_paths[c] for c in cols_of(g)] for g in groups}
    return rows, chosen_paths, distractors


def _selection_picks(selection: list[str], groups: list, cluster_encoder: str, cluster_weights: str | None,
                     device: str, batch_size: int, workers: int | None) -> dict[str, dict[tuple[str, str], list[int]]]:
    """Per selection (random, kmeans), the gallery rows picked for each query identity, as the released code does."""
    import torch

    from fpr.encoders.embed import embed_paths
    from fpr.encoders.registry import load_encoder

    per_identity = [(g, ident, g.rows_of[ident]) for g in groups for ident in g.query_identities
                    if g.rows_of.get(ident)]
    picks: dict[str, dict[tuple[str, str], list[int]]] = {}
    if "random" in selection:
        drawn = official_random_pick([rows_i for _, _, rows_i in per_identity], KMEANS_K, RANDOM_SEED)
        picks["random"] = {(g.name, ident): d for (g, ident, _), d in zip(per_identity, drawn)}
    if "kmeans" in selection:
        cenc = load_encoder(cluster_encoder, weights=cluster_weights, device=device)
        cpaths = [g.pool_paths[r] for g, _, rows_i in per_identity for r in rows_i]
        raw = embed_paths(cenc, cpaths, batch_size=batch_size, workers=workers, normalize=False,
                          amp_dtype=torch.float16, desc=f"raw {cenc.id} features for k-means").vectors
        raw_of = dict(zip(cpaths, raw))
        picks["kmeans"] = {}
        for g, ident, rows_i in progress.bar(per_identity, desc="k-means", unit="identity"):
            feats = np.stack([raw_of[g.pool_paths[r]] for r in rows_i])
            picks["kmeans"][(g.name, ident)] = [rows_i[j] for j in
                                                official_kmeans_pick(feats, min(len(rows_i), KMEANS_K))]
    return picks


def ablate_official(gallery: str, encoder: str, queries: str | Path | pd.DataFrame | None = None, *,
                    settings: str | Sequence | None = None, selection: Sequence[str] = SELECTIONS,
                    cluster_encoder: str = CLUSTER_ENCODER, cluster_weights: str | None = None,
                    seed: int = SUBSAMPLE_SEED, name: str | None = None, workspace: str | Path | None = None,
                    weights: str | None = None, device: str = "auto", batch_size: int = EMBED_BATCH_SIZE,
                    workers: int | None = None, skip_missing_identities: bool = False, overwrite: bool = False,
                    store: bool = True, background: str = "keep") -> OfficialAblationResult:
    """Run the released settings grid and gallery-selection ablation on a stored gallery.

    ``background``: ``remove`` segments every image before the evaluation encoder embeds it (the paper's
    Table 14); the k-means features stay those of the images as they are, as the released selection script's."""
    from fpr.encoders.background import with_background
    from fpr.encoders.embed import embed_paths
    from fpr.encoders.registry import load_encoder

    start = time.perf_counter()
    grid = parse_settings(settings)
    selection = [s for s in dict.fromkeys(selection)]
    bad = [s for s in selection if s not in SELECTIONS]
    if bad:
        raise InputError(f"unknown gallery selection '{bad[0]}'", hint=f"valid: {', '.join(SELECTIONS)}")
    name = _check_name(name) if name else new_id("abl-official")
    items, qdf = _inputs(gallery, queries, workspace)
    pool = [it for it in items if it.role == "gallery"]
    refs = [it for it in items if it.role == "reference"]
    if not refs:
        raise InputError(f"gallery '{gallery}' has no reference images: the official protocol's baseline queries "
                         "and query identities are the references",
                         hint="build it with --preset wildlife-official-ablation (or another *-official preset)")
    if qdf is not None:
        keys = {(it.group, it.identity) for it in pool}
        has = np.array([(g, i) in keys for g, i in zip(qdf["group"], qdf["identity"])], dtype=bool)
        if not has.all():
            missing = sorted({f"{g}/{i}" for g, i in zip(qdf["group"][~has], qdf["identity"][~has])})
            if not skip_missing_identities:
                raise InputError(f"{int((~has).sum())} queries have no gallery image of their identity: "
                                 f"{', '.join(missing[:8])}" + (" ..." if len(missing) > 8 else ""),
                                 hint="fix the labels or pass --skip-missing-identities")
            progress.log(f"skipping {int((~has).sum())} queries without gallery images of their identity")
            qdf = qdf[has].reset_index(drop=True)

    enc = with_background(load_encoder(encoder, weights=weights, device=device), background)
    paths = list(dict.fromkeys([it.path for it in pool] + [it.path for it in refs]
                               + (qdf["path"].tolist() if qdf is not None else [])))
    vec_of = dict(zip(paths, embed_paths(enc, paths, batch_size=batch_size, workers=workers,
                                         desc="embedding (once for all settings)").vectors))
    groups = _prepare(pool, refs, qdf, vec_of)
    methods = sorted(qdf["method"].unique()) if qdf is not None else []

    rows, chosen_paths, distractors = _grid_rows(grid, groups, qdf, methods, seed)
    if selection:
        picks = _selection_picks(selection, groups, cluster_encoder, cluster_weights, device, batch_size, workers)
        for sel in selection:
            variant = f"{sel}-k{KMEANS_K}"

            def sel_cols(grp: _Group, sel=sel) -> np.ndarray:
                return np.array(sorted(r for (gname, _), rs in picks[sel].items() if gname == grp.name for r in rs),
                                dtype=np.int64)

            rows.extend(_rows_for(variant, None, KMEANS_K, sel, groups, sel_cols, qdf, methods))
            chosen_paths[variant] = {g.name: [g.pool_paths[c] for c in sel_cols(g)] for g in groups}

    df = pd.DataFrame(rows)[ROW_COLUMNS]
    for col in ("identities", "per_identity"):
        df[col] = pd.array([None if pd.isna(x) else int(x) for x in df[col].astype(object)], dtype="Int64")
    params = {"protocol": "official", "released": RELEASED, "settings": [list(s) for s in grid],
              "selection": selection, "cluster_encoder": cluster_encoder if "kmeans" in selection else None,
              "kmeans": {**KMEANS_SETTINGS, "k": KMEANS_K, "features": "raw, fp16 autocast on CUDA"},
              "seed": seed, "random_seed": RANDOM_SEED, "weights_checksum": enc.weights.checksum,
              "background": enc.spec.preprocessing.background,
              "queries": None if queries is None else (str(queries) if not isinstance(queries, pd.DataFrame)
                                                       else "dataframe"),
              "distractors": {f"{g}|{n}": ids for (g, n), ids in distractors.items()}}
    if store:
        _store(workspace, name, _ablations_rows(df, name, gallery, enc.id, seed, params), overwrite)
    return OfficialAblationResult(name, df, chosen_paths, distractors, len(paths), time.perf_counter() - start,
                                  params)


def _ablations_rows(df: pd.DataFrame, name: str, gallery: str, encoder_id: str, seed: int, params: dict
                    ) -> pd.DataFrame:
    """The group "*" rows in the ``ablations`` table's columns (baseline -> oracle_*)."""
    d = df[df["group"] == "*"]
    return pd.DataFrame({
        "ablation": name, "variant": d["variant"].to_numpy(), "gallery": gallery, "encoder": encoder_id,
        "per_identity": d["per_identity"].to_numpy(), "identities": d["identities"].to_numpy(),
        "sampling": d["sampling"].to_numpy(), "repeat": 0, "seed": seed, "method": d["method"].to_numpy(),
        "oracle_map": d["baseline_map"].to_numpy(), "oracle_sim": d["baseline_sim"].to_numpy(),
        "oracle_n": d["baseline_n"].to_numpy(), "generated_map": d["generated_map"].to_numpy(),
        "generated_sim": d["generated_sim"].to_numpy(), "generated_n": d["generated_n"].to_numpy(),
        "gallery_images": d["gallery_images"].to_numpy(), "params": json.dumps(params)})


def _prepare(pool, refs, qdf, vec_of) -> list[_Group]:
    groups = []
    for g in sorted({it.group for it in pool}):
        gp = [it for it in pool if it.group == g]
        identities = list(dict.fromkeys(it.identity for it in gp))
        rows_of: dict[str, list[int]] = {}
        for pos, it in enumerate(gp):
            rows_of.setdefault(it.identity, []).append(pos)
        gr = [it for it in refs if it.group == g]
        query_identities = list(dict.fromkeys(it.identity for it in gr))
        pool_vec = np.stack([vec_of[it.path] for it in gp]).astype(np.float32)
        # the pipeline's exact scores: the same ranks whatever the BLAS (fpr.index.exact)
        s_ref = exact_scores(np.stack([vec_of[it.path] for it in gr]), pool_vec) if gr else \
            np.zeros((0, len(gp)), np.float32)
        if qdf is not None:
            gen_rows = np.flatnonzero((qdf["group"] == g).to_numpy())
            gen_ident = qdf["identity"].to_numpy()[gen_rows].astype(object)
            s_gen = (exact_scores(np.stack([vec_of[p] for p in qdf["path"].iloc[gen_rows]]), pool_vec)
                     if len(gen_rows) else np.zeros((0, len(gp)), np.float32))
        else:
            gen_rows, gen_ident, s_gen = np.zeros(0, np.int64), np.zeros(0, object), np.zeros((0, len(gp)))
        groups.append(_Group(g, identities, query_identities, rows_of, [it.path for it in gp],
                             np.array([it.identity for it in gp], dtype=object),
                             np.array([it.identity for it in gr], dtype=object), s_ref, gen_rows, gen_ident, s_gen))
    return groups
