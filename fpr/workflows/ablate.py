"""Gallery ablations (paper section 4.5, Figure 5, Table 2): how gallery design moves the score.

    fpr ablate --gallery G --encoder E --queries generated.csv \\
        --per-identity 1,5,10,20 --identities 2,5,10 --sampling random,kmeans --repeats 5 --seed 0

The gallery ``G``'s gallery images are the *pool*; each variant draws a gallery
from it and is evaluated with

- **oracle** queries: real images held out of the variant's gallery (the
  identity's reference images, plus its pool images the variant did not
  choose), i.e. the score a perfect generator would get;
- **generated** queries: the ``--queries`` file (optional).

Per (variant, repeat) the table holds mAP and Sim for both query sets. Sim follows
section 4.5: the mean cosine between a query and the variant's gallery images of
its identity (so, as in the paper, adding identities does not change it).

Factors:

- ``per_identity`` (M): gallery images per identity, drawn by ``sampling`` with
  :func:`fpr.galleries.curate.curate` (``random``, or ``kmeans`` on the already
  computed embeddings: k-means never re-embeds);
- ``identities`` (N): identities a query competes against in its group. Each
  identity is evaluated against a gallery of itself plus N-1 identities of its
  group drawn at random (seeded per repeat and identity), so every query is
  scored in every variant and N is exactly the number of competitors (drawing
  one N-subset per group instead would drop the queries of unchosen identities
  and make variants incomparable);
- ``sampling``: ``random`` or ``kmeans``.

Design ``one-at-a-time`` (default) varies one factor while the others stay at
their baseline (10 images, 10 identities, random: the paper's choice, when in
the lists; otherwise the largest value / the first sampling); ``grid`` runs every
combination. Repeat ``r`` uses seed ``seed + r``.

Cost: every distinct image (pool, references, queries) is embedded once for the
whole sweep, and each group's similarity matrix is computed once; a variant only
selects columns (a mask) and re-ranks with :func:`fpr.metrics.ranking.retrieval_metrics`.
"""
from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from fpr import progress
from fpr.defaults import EMBED_BATCH_SIZE
from fpr.encoders.embed import embed_paths
from fpr.encoders.registry import load_encoder
from fpr.errors import ConflictError, InputError
from fpr.eval.inputs import normalize_queries
from fpr.eval.relevance import gallery_items, missing_identities
from fpr.galleries.curate import SAMPLINGS, GallerySpec, curate
from fpr.galleries.records import ImageRecord
from fpr.index.exact import exact_scores
from fpr.keys import keyed_rng, new_id
from fpr.metrics.ranking import retrieval_metrics
from fpr.store import records as db
from fpr.store.records import check_name
from fpr.store.workspace import Workspace

DESIGNS = ("one-at-a-time", "grid")
BASELINE = {"per_identity": 10, "identities": 10, "sampling": "random"}
FACTORS = ("per_identity", "identities", "sampling")

# The ablations table is part of the workspace schema (fpr/store.py).


COLUMNS = ["ablation", "variant", "gallery", "encoder", "per_identity", "identities", "sampling", "repeat", "seed",
           "method", "oracle_map", "oracle_sim", "oracle_n", "generated_map", "generated_sim", "generated_n",
           "gallery_images"]


@dataclass(frozen=True)
class Variant:
    per_identity: int | None  # None: all pool images
    identities: int | None  # None: all identities of the group
    sampling: str

    @property
    def id(self) -> str:
        m = "all" if self.per_identity is None else self.per_identity
        n = "all" if self.identities is None else self.identities
        return f"m{m}-n{n}-{self.sampling}"

    def get(self, factor: str):
        return getattr(self, factor)


@dataclass
class AblationResult:
    name: str
    rows: pd.DataFrame  # one row per (variant, repeat, method); method "*" = all generated queries
    summary: pd.DataFrame  # mean and std over repeats per (variant, method)
    baseline: Variant
    n_images: int  # distinct images embedded for the sweep
    n_computed: int  # of which computed now (not from the cache)
    seconds: float
    plot: str | None = None
    timings: dict = field(default_factory=dict)


def parse_values(text: str | Sequence, what: str, *, numeric: bool = True) -> list:
    """``"1,5,10,all"`` -> [1, 5, 10, None]; validates and de-duplicates, keeping order."""
    parts = [p.strip() for p in (text.split(",") if isinstance(text, str) else [str(t) for t in text])]
    parts = [p for p in parts if p]
    if not parts:
        raise InputError(f"--{what} needs at least one value")
    out: list = []
    for p in parts:
        if not numeric:
            if p not in SAMPLINGS:
                raise InputError(f"unknown sampling '{p}'", hint=f"valid: {', '.join(SAMPLINGS)}")
            v = p
        elif p.lower() in ("all", "none"):
            v = None
        else:
            try:
                v = int(p)
            except ValueError:
                raise InputError(f"--{what} values must be positive integers or 'all', got '{p}'") from None
            if v < 1:
                raise InputError(f"--{what} values must be positive, got {v}")
        if v not in out:
            out.append(v)
    return out


def _baseline_of(values: list, factor: str):
    if BASELINE[factor] in values:
        return BASELINE[factor]
    if factor == "sampling":
        return values[0]
    if None in values:
        return None
    return max(values)


def plan_variants(per_identity: list, identities: list, samplings: list, design: str = "one-at-a-time"
                  ) -> tuple[list[Variant], Variant]:
    if design not in DESIGNS:
        raise InputError(f"unknown design '{design}'", hint=f"valid: {', '.join(DESIGNS)}")
    lists = {"per_identity": per_identity, "identities": identities, "sampling": samplings}
    base = Variant(*(_baseline_of(lists[f], f) for f in FACTORS))
    if design == "grid":
        return [Variant(*combo) for combo in itertools.product(per_identity, identities, samplings)], base
    out: list[Variant] = []
    for f in FACTORS:
        for v in lists[f]:
            var = Variant(**{**{g: base.get(g) for g in FACTORS}, f: v})
            if var not in out:
                out.append(var)
    return out, base


@dataclass
class _Group:
    """One group's precomputed pieces: every similarity a variant can need."""

    name: str
    identities: list[str]
    pool_paths: list[str]
    pool_ident: np.ndarray  # identity code per pool item
    oracle_ident: np.ndarray  # identity code per oracle candidate (references, then pool items)
    oracle_pool_pos: np.ndarray  # pool position of an oracle candidate, -1 for references
    s_oracle: np.ndarray  # (n_oracle, n_pool)
    gen_rows: np.ndarray  # row positions in the queries frame
    gen_ident: np.ndarray
    s_gen: np.ndarray  # (n_gen, n_pool)


def _queries_in_pool(queries, pool: list, skip_missing_identities: bool) -> pd.DataFrame | None:
    """The queries table, checked for identities without gallery images in the pool (skipped or an error)."""
    if queries is None:
        return None
    qdf = normalize_queries(queries)
    pool_keys = {(it.group, it.identity) for it in pool}
    has = np.array([(g, i) in pool_keys for g, i in zip(qdf["group"], qdf["identity"])], dtype=bool)
    where = str(queries) if not isinstance(queries, pd.DataFrame) else "queries"
    keep = missing_identities(qdf, has, skip=skip_missing_identities, where=where) == "ok"
    if not keep.all():
        progress.log(f"skipping {int((~keep).sum())} queries without gallery images of their identity")
        qdf = qdf[keep].reset_index(drop=True)
    return qdf


def _sweep(variants: list, repeats: int, seed: int, pool: list, vec_of: dict, groups, qdf: pd.DataFrame | None,
           gallery: str) -> list[dict]:
    """Every (variant, repeat): draw the gallery (once per M, sampling and seed) and re-rank."""
    records = [ImageRecord(it.path, it.identity, it.group, None, it.content_hash) for it in pool]

    def lookup(ps: Sequence[str]) -> np.ndarray:  # k-means sees the sweep's embeddings: no re-embedding
        return np.stack([vec_of[p] for p in ps])

    methods = sorted(qdf["method"].unique()) if qdf is not None else []
    rows: list[dict] = []
    drawn: dict[tuple, set[str]] = {}  # (M, sampling, seed) -> chosen pool paths; N does not change the draw
    for v, r in progress.bar([(v, r) for v in variants for r in range(repeats)], desc="variants", unit="variant"):
        seed_r = seed + r
        key = (v.per_identity, v.sampling, seed_r)
        if key not in drawn:
            spec = GallerySpec(gallery_per_identity=v.per_identity, sampling=v.sampling, seed=seed_r,
                               min_identities_per_group=1)
            # k-means fits are tiny (one identity's images): BLAS/OpenMP threads only add overhead (~13x)
            with threadpool_limits(1):
                chosen_items, _ = curate(records, spec, embed=lookup if v.sampling == "kmeans" else None,
                                         where=f"gallery:{gallery}")
            drawn[key] = {it.path for it in chosen_items}
        rows.extend(_evaluate(v, r, seed_r, groups, drawn[key], qdf, methods))
    return rows


def ablate(gallery: str, encoder: str, queries: str | Path | pd.DataFrame | None = None, *,
           per_identity: Sequence | str = (1, 5, 10, 20), identities: Sequence | str = (2, 5, 10),
           sampling: Sequence | str = ("random", "kmeans"), repeats: int = 5, seed: int = 0,
           design: str = "one-at-a-time", name: str | None = None, workspace: str | Path | None = None,
           weights: str | None = None, device: str = "auto", batch_size: int = EMBED_BATCH_SIZE,
           workers: int | None = None,
           skip_missing_identities: bool = False, plot: str | Path | None = None, overwrite: bool = False,
           store: bool = True, background: str = "keep") -> AblationResult:
    """Evaluate gallery variants with one embedding pass; store rows in the ``ablations`` table."""
    start = time.perf_counter()
    timings: dict[str, float] = {}
    m_values = parse_values(per_identity, "per-identity")
    n_values = parse_values(identities, "identities")
    s_values = parse_values(sampling, "sampling", numeric=False)
    if repeats < 1:
        raise InputError(f"--repeats must be at least 1, got {repeats}")
    variants, base = plan_variants(m_values, n_values, s_values, design)
    name = check_name(name, "ablation") if name else new_id("abl")
    ws = Workspace.open(workspace)
    if store and not overwrite and db.ablation_exists(ws, name):
        raise ConflictError(f"ablation '{name}' already exists", hint="choose another --name or pass --overwrite")

    items = gallery_items(ws, gallery)
    pool = [it for it in items if it.role == "gallery"]
    refs = [it for it in items if it.role == "reference"]
    qdf = _queries_in_pool(queries, pool, skip_missing_identities)

    t0 = time.perf_counter()  # the one embedding pass
    enc = load_encoder(encoder, weights=weights, device=device)
    if background != "keep":  # background removal is part of the protocol (Table 14: keep vs remove)
        from fpr.encoders.background import with_background

        enc = with_background(enc, background)
    paths = list(dict.fromkeys([it.path for it in pool] + [it.path for it in refs]
                               + (qdf["path"].tolist() if qdf is not None else [])))
    res = embed_paths(enc, paths, batch_size=batch_size, workers=workers, desc="embedding (once for all variants)")
    vec_of = dict(zip(paths, res.vectors))
    timings["embed"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    groups = _prepare_groups(pool, refs, qdf, vec_of)
    timings["similarities"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows = _sweep(variants, repeats, seed, pool, vec_of, groups, qdf, gallery)
    timings["variants"] = time.perf_counter() - t0

    df = pd.DataFrame(rows)
    df.insert(0, "encoder", enc.id)
    df.insert(0, "gallery", gallery)
    df.insert(0, "ablation", name)
    df = df[COLUMNS]
    for col in ("per_identity", "identities"):
        df[col] = pd.array([None if pd.isna(x) else int(x) for x in df[col].astype(object)], dtype="Int64")
    summary = summarize_ablation(df)
    if store:
        params = json.dumps({"per_identity": m_values, "identities": n_values, "sampling": s_values,
                             "repeats": repeats, "seed": seed, "design": design, "queries": str(queries)
                             if not isinstance(queries, pd.DataFrame) else "dataframe",
                             "baseline": base.id, "weights_checksum": enc.weights.checksum})
        db.store_ablation(ws, name, df.assign(params=params), overwrite=overwrite)
    plot_path = None
    if plot:
        plot_path = str(plot_ablation(df, base, plot, variants=variants))
    return AblationResult(name, df, summary, base, len(paths), res.n_computed, time.perf_counter() - start,
                          plot_path, timings)


@dataclass
class BackgroundSweep:
    """One gallery ablation per background step (the paper's Table 14: keep vs remove)."""

    steps: list[str]
    results: list[AblationResult]

    def table(self, *, raw: bool = False) -> pd.DataFrame:
        """Rows (``raw``) or summaries of every step; a ``background`` column when there is more than one."""
        parts = [r.rows if raw else r.summary for r in self.results]
        if len(self.steps) > 1:
            parts = [t.assign(background=s) for t, s in zip(parts, self.steps)]
        return pd.concat(parts, ignore_index=True)


def ablate_backgrounds(gallery: str, encoder: str, queries: str | Path | pd.DataFrame | None = None, *,
                       backgrounds: str | Sequence[str] = "keep", name: str | None = None,
                       plot: str | Path | None = None, **options) -> BackgroundSweep:
    """:func:`ablate` once per background step. With several steps each ablation is stored as
    ``<name>-bg-<step>`` and no plot is drawn; ``options`` are :func:`ablate`'s."""
    from fpr.encoders.background import parse_background

    items = backgrounds.split(",") if isinstance(backgrounds, str) else list(backgrounds)
    steps = list(dict.fromkeys(parse_background(b) for b in items if b.strip())) or ["keep"]
    many = len(steps) > 1
    results = [ablate(gallery, encoder, queries, background=step, plot=None if many else plot,
                      name=f"{name or 'abl'}-bg-{step.replace(':', '-')}" if many else name, **options)
               for step in steps]
    return BackgroundSweep(steps, results)


def _prepare_groups(pool, refs, qdf, vec_of) -> list[_Group]:
    groups = []
    for g in sorted({it.group for it in pool}):
        gp = [it for it in pool if it.group == g]
        idents = sorted({it.identity for it in gp})
        code = {k: i for i, k in enumerate(idents)}
        gr = [it for it in refs if it.group == g and it.identity in code]
        pool_vec = np.stack([vec_of[it.path] for it in gp]).astype(np.float32)
        cand = [vec_of[it.path] for it in gr] + [vec_of[it.path] for it in gp]
        s_oracle = exact_scores(np.stack(cand), pool_vec)  # the pipeline's scores, whatever the BLAS
        oracle_ident = np.array([code[it.identity] for it in gr] + [code[it.identity] for it in gp])
        oracle_pool_pos = np.concatenate([np.full(len(gr), -1), np.arange(len(gp))]).astype(np.int64)
        if qdf is not None:
            gen_rows = np.flatnonzero((qdf["group"] == g).to_numpy())
            gen_ident = np.array([code[i] for i in qdf["identity"].iloc[gen_rows]], dtype=np.int64)
            qv = np.stack([vec_of[p] for p in qdf["path"].iloc[gen_rows]]) if len(gen_rows) \
                else np.zeros((0, pool_vec.shape[1]), np.float32)
            s_gen = exact_scores(qv, pool_vec)
        else:
            gen_rows, gen_ident, s_gen = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, len(gp)))
        groups.append(_Group(g, idents, [it.path for it in gp], np.array([code[it.identity] for it in gp]),
                             oracle_ident, oracle_pool_pos, s_oracle, gen_rows, gen_ident, s_gen))
    return groups


def _allowed(group: _Group, n: int | None, seed_r: int) -> np.ndarray:
    """(identities, identities) bool: row i = identity i plus n-1 other identities of the group."""
    k = len(group.identities)
    if n is None or n >= k:
        return np.ones((k, k), dtype=bool)
    out = np.zeros((k, k), dtype=bool)
    for i, ident in enumerate(group.identities):
        others = [j for j in range(k) if j != i]
        pick = keyed_rng(seed_r, "identities", group.name, ident).choice(len(others), n - 1, replace=False)
        out[i, i] = True
        out[i, [others[j] for j in pick]] = True
    return out


def _score(s: np.ndarray, row_ident: np.ndarray, cols: np.ndarray, allowed: np.ndarray,
           pool_ident: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AP and Sim (mean cosine to the identity's gallery images) of rows against a masked gallery."""
    if len(row_ident) == 0:
        return np.zeros(0), np.zeros(0)
    mask = allowed[row_ident][:, pool_ident] & cols[None, :]
    relevant = mask & (row_ident[:, None] == pool_ident[None, :])
    scores = np.where(mask, s, -np.inf)
    ap = retrieval_metrics(scores, relevant).ap
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.where(relevant, s, 0.0).sum(axis=1) / relevant.sum(axis=1)
    return ap, sim


def _evaluate(v: Variant, r: int, seed_r: int, groups: list[_Group], chosen: set[str], qdf, methods) -> list[dict]:
    o_ap, o_sim, g_ap, g_sim, g_rows, n_gallery = [], [], [], [], [], 0
    for grp in groups:
        cols = np.array([p in chosen for p in grp.pool_paths], dtype=bool)
        n_gallery += int(cols.sum())
        allowed = _allowed(grp, v.identities, seed_r)
        held = (grp.oracle_pool_pos < 0) | ~cols[np.maximum(grp.oracle_pool_pos, 0)]
        ap, sim = _score(grp.s_oracle[held], grp.oracle_ident[held], cols, allowed, grp.pool_ident)
        o_ap.append(ap)
        o_sim.append(sim)
        ap, sim = _score(grp.s_gen, grp.gen_ident, cols, allowed, grp.pool_ident)
        g_ap.append(ap)
        g_sim.append(sim)
        g_rows.append(grp.gen_rows)
    o_ap, o_sim = np.concatenate(o_ap), np.concatenate(o_sim)
    g_ap, g_sim, g_rows = np.concatenate(g_ap), np.concatenate(g_sim), np.concatenate(g_rows)
    row = {"variant": v.id, "per_identity": v.per_identity, "identities": v.identities, "sampling": v.sampling,
           "repeat": r,
           "seed": seed_r, "method": "*", "oracle_map": _nanmean(o_ap), "oracle_sim": _nanmean(o_sim),
           "oracle_n": int(np.isfinite(o_ap).sum()), "generated_map": _nanmean(g_ap),
           "generated_sim": _nanmean(g_sim), "generated_n": int(np.isfinite(g_ap).sum()),
           "gallery_images": n_gallery}
    out = [row]
    if len(methods) > 1:
        q_method = qdf["method"].to_numpy()[g_rows]
        for m in methods:
            sel = q_method == m
            out.append({**row, "method": m, "generated_map": _nanmean(g_ap[sel]),
                        "generated_sim": _nanmean(g_sim[sel]), "generated_n": int(np.isfinite(g_ap[sel]).sum())})
    return out


def _nanmean(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if len(x) else float("nan")


def summarize_ablation(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over repeats per (variant, method)."""
    keys = ["variant", "per_identity", "identities", "sampling", "method"]
    metrics = ["oracle_map", "oracle_sim", "generated_map", "generated_sim", "gallery_images"]
    g = df.groupby(keys, dropna=False, sort=False)
    out = g[metrics].mean()
    std = g[["oracle_map", "generated_map"]].std(ddof=1).add_suffix("_std")
    out = out.join(std).join(g.size().rename("repeats")).reset_index()
    cols = keys + ["repeats", "oracle_map", "oracle_map_std", "oracle_sim", "generated_map", "generated_map_std",
                   "generated_sim", "gallery_images"]
    return out[cols]


def load_ablation(name: str, *, workspace: str | Path | None = None) -> pd.DataFrame:
    """The stored rows of an ablation (one per variant, repeat and method)."""
    return db.ablation_rows(Workspace.open(workspace), name, COLUMNS)


def _label(x) -> str:
    if x is None or pd.isna(x):
        return "all"
    return x if isinstance(x, str) else str(int(x))


def plot_ablation(df: pd.DataFrame, base: Variant, out: str | Path, variants: list[Variant] | None = None) -> Path:
    """One panel per varied factor: mAP (oracle, generated) and Sim against the factor, error bars = std over
    repeats, other factors at their baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    if out.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise InputError("plot must end in .png, .pdf or .svg", where=str(out))
    d = df[df["method"] == "*"].copy()
    for f in FACTORS:  # compare factor values as labels: 'all' for None
        d[f"_{f}"] = [_label(x) for x in d[f].astype(object)]
    varied = [f for f in FACTORS if d[f"_{f}"].nunique() > 1] or ["per_identity"]
    fig, axes = plt.subplots(1, len(varied), figsize=(4.2 * len(varied), 3.6), squeeze=False)
    series = [("oracle_map", "oracle mAP", "-o"), ("generated_map", "generated mAP", "-s"),
              ("oracle_sim", "oracle Sim", ":o"), ("generated_sim", "generated Sim", ":s")]
    for ax, f in zip(axes[0], varied):
        sel = d
        for g in FACTORS:
            if g != f:
                sel = sel[sel[f"_{g}"] == _label(base.get(g))]
        labels = list(dict.fromkeys(sel[f"_{f}"]))
        if f != "sampling":
            labels.sort(key=lambda x: float("inf") if x == "all" else int(x))
        xs = np.arange(len(labels))
        for col, label, style in series:
            if sel[col].isna().all():
                continue
            means = [sel.loc[sel[f"_{f}"] == x, col].mean() for x in labels]
            stds = [np.nan_to_num(sel.loc[sel[f"_{f}"] == x, col].std(ddof=1)) for x in labels]
            ax.errorbar(xs, means, yerr=stds, fmt=style, capsize=3, label=label)
        ax.set_xticks(xs, labels)
        ax.set_xlabel({"per_identity": "images per identity", "identities": "identities per gallery",
                       "sampling": "sampling"}[f])
        ax.set_ylabel("score")
        ax.set_ylim(min(0.0, float(np.nanmin(sel[[c for c, _, _ in series]].to_numpy(dtype=float))) - 0.05)
                    if len(sel) else 0.0, 1.05)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"gallery ablation {d['ablation'].iloc[0]} ({d['encoder'].iloc[0]}); error bars: std over repeats",
                 fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{out.suffix}")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(out)
    return out
