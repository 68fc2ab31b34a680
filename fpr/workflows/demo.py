"""``fpr demo``: the whole protocol on the built-in world, offline, on a CPU, in seconds (``--full``: minutes).

1. render a world (per species a group of identities with gallery and reference
   images) and each simulated method's queries, whose identity drift is known;
2. import the gallery into the workspace, build the index with the shipped
   encoder ``fpr-world-v3``, evaluate every method plus the ``oracle`` row (the
   gallery's reference images as queries: real images, the paper's Table 1
   ceiling) with the ``copy-paste`` scorer -- a normal run that
   ``fpr report --run R`` shows again;
3. check the metric: the Spearman correlation of mAP with the ground-truth drift
   (across methods, and per query) should be strongly negative; the agreement table
   (:func:`truth_agreement`: Spearman, VISTAR's strict PPA, ties-half PPA, the metric's
   tie share and tau-b within identity, from ``fpr meta --truth drift``) gives each
   statistic on one method set at a time; the copy controls
   (``paste``, ``paste-mirror``, ``paste-rescale``, ``edit``) and the reference-layout
   generations (``ref-pose@1``, ``ref-scene@0.25``) show what retrieval alone rewards, and the
   copy-paste flag rates and the documented keep-rule (:data:`KEEP_RULE`) show that the filter
   keeps faithful generations (``new-scene@0``) and drops the copies.
"""
# Over 500 lines by reason: one user operation (fpr demo) whose parts (the world, the background verdict seeds of
# two worlds, validity, agreement) share its method sets and configs; the numbers it prints live in metrics/
# (headroom, claims, agreement) and render/, so what is left here is orchestration.
from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from fpr import progress
from fpr.metrics.headroom import ap_one_share, headroom
from fpr.registry import import_module
from fpr.workflows.kernels import COPY_PASTE, compiling_ahead, stop_with_parent

DEMO_ENCODER = "fpr-world-v3"
# The general-purpose stand-in (a stand-in for CLIP/DINOv2, not them: docs/world.md) whose Sim and mAP fill the
# other half of the paper's Figure 3 2x2, and the world seeds the full demo pools the two claims' verdicts over.
GENERAL_ENCODER = "fpr-general-v2"
CLAIM_SEEDS = 3
KEEP_RULE = "top1 and ap >= 0.9 and not copy_paste"  # the rule docs/workflows.md documents
# Method sets the agreement table judges (every statistic of a row on the same set). The copy controls
# carry the world's declared drift (fpr.galleries.world.METHOD_DRIFT): 0 for paste, paste-mirror,
# paste-rescale and edit (the identity's own markings copied from a reference image: identity-wise
# nothing drifted; that they copy is the copy-paste scorer's business). The oracle has no drift value
# and is in neither set.
AGREEMENT_SETS = ("generations", "with copies")
AGREEMENT_METRICS = (("mAP", "ap"), ("Sim", "sim"), ("top margin", "top_margin"))  # top margin: fpr.metrics.top_margin
# The drift ladder in new scenes, the two reference-layout failures (the IP-Adapter-Plus behaviour of the
# paper's appendix C: the reference's layout with the subject lost; its whole scene, a quarter redrawn) and
# the copy controls: 11 methods (world version 2 had 10), so the demo's run time grows by about a tenth.
DEMO_METHODS = ("new-scene@0", "new-scene@0.1", "new-scene@0.25", "new-scene@0.5", "new-scene@1", "ref-pose@1",
                "ref-scene@0.25", "paste", "paste-mirror", "paste-rescale", "edit")
FULL = dict(identities=10, gallery=10, references=3, queries=3, methods=DEMO_METHODS)
QUICK = dict(identities=5, gallery=6, references=2, queries=2, methods=DEMO_METHODS)
# The paper-difficulty world: look-alike pairs sharing most of their markings, so the specialist's oracle mAP
# sits in the paper's range (MiewID 0.803 on its Re-ID gallery, Table 1; 0.75-0.85) by the gallery, not by a
# weaker encoder. Calibrated on world seeds 100-101, checked on held-out seeds 0, 1, 2 and 7
# (benchmarks/paper_world.py, benchmarks/results/paper_world.md). Its sizes are FULL's unless named here.
PAPER = dict(identities=10, gallery=10, lookalikes=0.9, family_size=2)
# Named worlds (fpr demo --world): the look-alike and size fields each sets over FULL (QUICK with --quick)
WORLDS = {"easy": {}, "paper": PAPER}


DEMO_RESULT = "fpr.demo-result/1"  # what `fpr demo --format json` prints; its JSON Schema: DEMO_SCHEMA_FILE
DEMO_SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schemas" / "demo-result-v1.json"


@dataclass
class DemoResult:
    run_id: str
    gallery: str
    index: str
    encoder: str
    images_dir: str
    summary: list[dict]
    validity: dict
    timings: dict = field(default_factory=dict)
    world: dict = field(default_factory=dict)
    claims: dict | None = None  # ClaimsResult.as_json(): the 2x2 per seed and method, both verdicts
    general_runs: dict = field(default_factory=dict)  # world seed -> (specialist run, general run)
    # per world the verdicts ran on (the demo's world first): {"world": label, "config": its WorldConfig fields
    # that differ between worlds, "claims": ClaimsResult.as_json(), "general_runs": {seed: (specialist, general)}}
    claims_worlds: list = field(default_factory=list)

    def as_json(self) -> dict:
        """The ``fpr.demo-result/1`` document (schema: ``fpr/schemas/demo-result-v1.json``)."""
        return {"schema": DEMO_RESULT, "run": self.run_id, "gallery": self.gallery, "index": self.index, "encoder": self.encoder,
                "images": self.images_dir, "world": self.world, "summary": self.summary,
                "validity": self.validity, "timings": self.timings, "claims": self.claims,
                "general_runs": self.general_runs, "claims_worlds": self.claims_worlds}


def validity(per_query: pd.DataFrame, aux: pd.DataFrame | None = None) -> dict:
    """Spearman of AP with ground-truth drift, across methods (method means) and per query; copies; oracle.

    The copy-like methods (:data:`fpr.galleries.world.COPY_METHODS`) and the ``oracle``
    row are left out of both correlations: they are not generations with some
    drift, and are reported on their own. With ``aux`` (the run's ``copy-paste``
    scores), the flag rate and mean score per method and the share of each method
    that :data:`KEEP_RULE` keeps are added.
    """
    from scipy.stats import spearmanr

    from fpr.galleries.world import COPY_METHODS, DRIFT_LEVELS, METHOD_DRIFT, method_name

    df = per_query[per_query["status"] == "ok"].copy() if "status" in per_query else per_query.copy()
    df["drift"] = pd.to_numeric(df["drift"], errors="coerce")
    df["ap"] = pd.to_numeric(df["ap"], errors="coerce")
    df["sim"] = pd.to_numeric(df["sim"], errors="coerce")
    gen = df[~df["method"].isin(COPY_METHODS + ("oracle",))]
    by_method = gen.groupby("method").agg(drift=("drift", "first"), map=("ap", "mean"), sim=("sim", "mean"))
    by_method = by_method.reindex([m for m in METHOD_DRIFT if m in by_method.index])
    out: dict = {"methods": list(by_method.index)}

    def rho(a, b) -> float | None:
        if len(a) < 3 or np.unique(a).size < 2 or np.unique(b).size < 2:
            return None
        return float(spearmanr(a, b).statistic)

    out["spearman_map_drift_methods"] = rho(by_method["drift"].to_numpy(), by_method["map"].to_numpy())
    out["spearman_sim_drift_methods"] = rho(by_method["drift"].to_numpy(), by_method["sim"].to_numpy())
    out["spearman_ap_drift_queries"] = rho(gen["drift"].to_numpy(), gen["ap"].to_numpy())
    out["spearman_sim_drift_queries"] = rho(gen["drift"].to_numpy(), gen["sim"].to_numpy())
    out["n_queries"] = int(len(gen))
    maps = by_method["map"].to_dict()
    order = [m for m in (method_name("new-scene", d) for d in DRIFT_LEVELS) if m in maps]  # the ladder
    out["ordering_holds"] = all(maps[a] > maps[b] for a, b in zip(order, order[1:]))
    out["map_by_method"] = {m: float(v) for m, v in maps.items()}
    paste = df[df["method"] == "paste"]
    if len(paste):
        out["paste_map"] = float(paste["ap"].mean())
        out["paste_sim"] = float(paste["sim"].mean())
        if "new-scene@0" in maps:  # (key kept from world version 2, where new-scene@0 was "faithful")
            out["paste_minus_faithful_map"] = float(paste["ap"].mean() - maps["new-scene@0"])
    out["ap_one_share"] = ap_one_share(df, _method_order(df["method"].unique()))
    mix = profile_mix(df) if "context" in df else {}
    if mix:
        out["profile_mix"] = mix
    copies = df[df["method"].isin(COPY_METHODS)]
    if len(copies):
        out["copy_map_by_method"] = {m: float(g["ap"].mean()) for m, g in copies.groupby("method")}
    oracle = df[df["method"] == "oracle"]
    if len(oracle):
        out["oracle_map"] = float(oracle["ap"].mean())
        out["oracle_sim"] = float(oracle["sim"].mean())
    if aux is not None and len(aux):
        out.update(copy_paste_rates(df, aux))
    return out


def profile_mix(per_query: pd.DataFrame) -> dict[str, dict]:
    """Per profile of the run: the graded methods its queries drew (each row's ``context@drift``) as shares of
    its queries, beside the declared mixture, and the mean drift beside the declared expected drift."""
    from fpr.galleries.world import PROFILES, method_name

    out = {}
    for name in [p for p in PROFILES if p in set(per_query["method"].astype(str))]:
        rows = per_query[per_query["method"] == name]
        drawn = pd.Series([method_name(c, d) for c, d in zip(rows["context"], pd.to_numeric(rows["drift"]))])
        shares = drawn.value_counts(normalize=True)
        declared = dict(PROFILES[name].mixture)
        out[name] = {"n_queries": int(len(rows)), "declared": declared,
                     "drawn": {m: float(shares.get(m, 0.0)) for m in [*declared, *sorted(set(shares.index) - set(declared))]},
                     "mean_drift": float(pd.to_numeric(rows["drift"]).mean()),
                     "declared_drift": PROFILES[name].drift}
    return out


def agreement_methods(per_query: pd.DataFrame) -> dict[str, list[str]]:
    """The run's methods in each :data:`AGREEMENT_SETS` set: generations (every graded method and profile: each
    query carries its drawn drift) and those plus the copy-like methods. The validity line's per-query
    Spearman sees the generations set too."""
    from fpr.galleries.world import COPY_METHODS, METHOD_DRIFT, PROFILES

    present = set(per_query["method"].astype(str))
    gen = [m for m in (*METHOD_DRIFT, *PROFILES) if m in present and m not in COPY_METHODS]
    return {"generations": gen, "with copies": gen + [m for m in COPY_METHODS if m in present]}


def truth_agreement(run_id: str, workspace: str | Path, per_query: pd.DataFrame, *, seed: int = 0,
                    n_boot: int = 200) -> list[dict]:
    """Per method set and metric (mAP, Sim): ``fpr meta --truth drift --methods SET`` rows.

    Spearman is per query against -drift (positive = agrees), so it is minus the validity line's per-query
    Spearman(AP, drift) on the generations set.
    """
    from fpr.workflows.meta import meta

    out = []
    for set_name, methods in agreement_methods(per_query).items():
        if len(methods) < 2:
            continue
        res = meta(run_id, truth="drift", workspace=workspace, seed=seed, metrics=[m for _, m in AGREEMENT_METRICS],
                       n_boot=n_boot, methods=methods)
        rows = {r["metric"]: r for r in res.rows}
        for label, m in AGREEMENT_METRICS:
            r = rows[m]
            out.append({"methods": set_name, "metric": label, "n_pairs": r["n_pairs"], "spearman": r["spearman"],
                        "ppa": r["ppa"], "ppa_lo": r["ppa_lo"], "ppa_hi": r["ppa_hi"],
                        "ppa_ties_half": r["ppa_ties_half"], "metric_tie_share": r["metric_tie_share"],
                        "kendall_within": r["kendall_within"]})
    return out


def copy_paste_rates(per_query: pd.DataFrame, aux: pd.DataFrame) -> dict:
    """Per method: copy-paste flag rate and mean score, and the share :data:`KEEP_RULE` keeps."""
    from fpr.metrics.rules import parse_rule

    cp = aux[aux["scorer"] == "copy-paste"].pivot_table(index="query_id", columns="metric", values="value",
                                                         aggfunc="first")
    if cp.empty or "flag" not in cp:
        return {}
    df = per_query.set_index("query_id").join(cp[["flag", "score"]], how="left")
    values = {"top1": pd.to_numeric(df["cmc1"], errors="coerce").to_numpy(float),
              "ap": pd.to_numeric(df["ap"], errors="coerce").to_numpy(float),
              "copy_paste": df["flag"].to_numpy(float)}
    df["kept"] = parse_rule(KEEP_RULE, list(values)).apply(values).keep
    methods = _method_order(df["method"].unique())
    g = df.groupby("method")
    return {"copy_paste_flag_rate": {m: float(g.get_group(m)["flag"].mean()) for m in methods},
            "copy_paste_mean_score": {m: float(g.get_group(m)["score"].mean()) for m in methods},
            "keep_rule": KEEP_RULE,
            "kept_share": {m: float(g.get_group(m)["kept"].mean()) for m in methods}}


def _method_order(methods) -> list[str]:
    from fpr.galleries.world import METHOD_DRIFT, PROFILES

    known = [m for m in ("oracle", *METHOD_DRIFT, *PROFILES) if m in set(methods)]
    return known + sorted(set(methods) - set(known))


def _stress_tag(config) -> str:
    """A stress condition renders another gallery (siblings, home backgrounds) or other queries (occlusion): the
    demo's gallery names carry it, so that a stressed world never replaces the plain one."""
    sized = (config.identities, config.gallery) not in {(FULL["identities"], FULL["gallery"]),
                                                       (QUICK["identities"], QUICK["gallery"])}
    return ((f"-sib{config.siblings:g}" if config.siblings else "")
            + (f"-home{config.home_background:g}" if config.home_background else "")
            + ("-occl" if config.occlusion else "")
            + (f"-look{config.lookalikes:g}x{config.family_size}" if config.lookalikes else "")
            + (f"-n{config.identities}x{config.gallery}" if sized else ""))


def _general_run(ws_root: Path, gallery: str, queries: pd.DataFrame, general: str, seed: int, device: str):
    """The generations (copies left out: their truth is the copy-paste scorer's business) and the oracle under the
    general-purpose encoder: the other half of the 2x2."""
    from fpr.galleries.world import COPY_METHODS
    from fpr.workflows.indices import build_index
    from fpr.workflows.runs import run_query

    idx = build_index(gallery, general, name=f"{gallery}-{general}", workspace=ws_root, device=device,
                          overwrite=True)
    gen = queries[~queries["method"].isin(COPY_METHODS)]
    return run_query(idx.name, gen, workspace=ws_root, seed=seed, device=device, oracle=True, scorers=[])


def _claims_config(config, seed: int):
    """The world of one more verdict seed: the primary world's sizes, generations only (no copies)."""
    from fpr.galleries.world import COPY_METHODS

    return replace(config, seed=seed, methods=tuple(m for m in config.methods if m not in COPY_METHODS))


def _claims_name(config) -> str:
    return f"world-demo-s{config.seed}{_stress_tag(config)}-claims"


@contextmanager
def _speaking(desc: str) -> Iterator[None]:
    """Off a terminal, a line at least every ``progress.EVERY_S`` seconds while ``desc`` runs, whatever runs
    inside: a first run on a machine compiles the copy-paste and recheck kernels for tens of seconds inside
    ``run_query`` with no phase line of their own (measured: 19 s without a line from either process)."""
    with progress.bar(total=1, desc=desc, unit="step") as line:
        yield
        line.update()


# What a verdict seed runs (torch, the workflows, the pipeline); importing them starts no thread
_PRELOAD = ("torch", "fpr.workflows.galleries", "fpr.workflows.indices", "fpr.workflows.runs", "fpr.workflows.meta",
            "fpr.encoders.trained", "fpr.eval.pipeline")


@contextmanager
def _background_seeds(ws_root: Path, configs: list, encoder: str, general: str | None, device: str,
                      world_cache: bool = False) -> Iterator[dict]:
    """The verdict seeds, each whole (world, gallery, both indices, both runs), in one background process
    while this one evaluates the primary seed: {(world label, seed): a future of :func:`_claims_seed`'s result}
    (``configs``: (world label, config) pairs).

    Empty (they run later, in turn, here) when a process cannot be forked safely. The process is forked
    after the imports both need and before this one loads a model or starts a thread pool of its own
    (OpenBLAS's exists from numpy's import and is reset by its fork handler, as for the render and
    copy-paste pools). It writes its own galleries, indices and runs into the same workspace (every
    write under the workspace lock, as any two fpr processes do), and every number it returns is a pure
    function of its world, so the result is the one-process demo's.
    """
    from fpr.galleries.world import fork_safe

    if not configs or not general or not fork_safe():
        yield {}
        return
    for module in _PRELOAD:  # both processes need them: imported once, here, and inherited by the fork
        import_module(module)
    pool = ProcessPoolExecutor(1, mp_context=mp.get_context("fork"), initializer=_background_init)
    try:
        # one render process there: this process renders the primary world on every core meanwhile
        yield {(label, c.seed): pool.submit(_claims_seed, ws_root, c, encoder, general, device, 1, world_cache)
               for label, c in configs}
    except BaseException:
        # the demo failed or was interrupted here: stop the seeds' work rather than wait for it (the pool
        # has no public way to; a killed writer's transaction is rolled back, its file lock released)
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _background_init() -> None:
    """In the background process, first: torch on one intra-op thread, and stopped with the demo's process.

    One thread because this process may have been forked from one whose OpenMP pool already ran (a second
    demo in one Python session, a test run): a forked child that enters an OpenMP parallel region of the
    parent's pool waits forever; with one thread torch runs every op inline (as DataLoader workers do).
    The seed's numbers do not change: the CPU embedding protocol's bits do not depend on the thread count.
    Stopped with the parent (killed by a time limit, say) instead of finishing a seed nobody waits for:
    Linux only (prctl); elsewhere it runs to its end."""
    import torch

    torch.set_num_threads(1)
    stop_with_parent()


def _claims_seed(ws_root: Path, config, encoder: str, general: str, device: str, render_workers: int = 0,
                 world_cache: bool = False) -> tuple[pd.DataFrame, tuple]:
    """One more world seed for the verdicts: generations only, no copy-paste scorer (the shared work is the
    encoders and the pipeline; the copies and their scorer are the primary seed's)."""
    from fpr.galleries.curate import GallerySpec
    from fpr.galleries.world import World
    from fpr.workflows.galleries import import_gallery
    from fpr.workflows.indices import build_index
    from fpr.workflows.meta import claims_frame
    from fpr.workflows.runs import run_query

    name = _claims_name(config)
    progress.log(f"world seed {config.seed} for the verdicts: {len(config.methods)} methods, both encoders")
    build = World(config).write(ws_root / "demo" / name, workers=render_workers, cache=world_cache)
    with _speaking(f"world seed {config.seed} for the verdicts ({name})"):
        import_gallery(name, build.records, GallerySpec(seed=config.seed), workspace=ws_root, source="world",
                           overwrite=True)
        idx = build_index(name, encoder, name=f"{name}-{encoder}", workspace=ws_root, device=device,
                              overwrite=True)
        queries = pd.DataFrame(build.queries)
        spec = run_query(idx.name, queries, workspace=ws_root, seed=config.seed, device=device, oracle=True,
                             scorers=[])
        gen = _general_run(ws_root, name, queries, general, config.seed, device)
    return claims_frame(spec.per_query, gen.per_query, seed=config.seed), (spec.run_id, gen.run_id)


def run_demo(*, workspace: str | Path | None = None, seed: int = 0, quick: bool = True, out: str | Path | None = None,
             encoder: str = DEMO_ENCODER, siblings: float = 0.0, device: str = "auto", size: int = 96,
             run: str | None = None, copy_paste: bool = True, config: dict | None = None,
             general: str | None = GENERAL_ENCODER, claim_seeds: int | None = None, profiles: Sequence[str] = (),
             home_background: float = 0.0, occlusion: bool = False, world_cache: bool = True,
             world: str = "easy", identities: int | None = None, gallery: int | None = None,
             lookalikes: float | None = None, family_size: int | None = None,
             verdict_worlds: Sequence[str] | None = None) -> DemoResult:
    """Render the world, import it, index it, query every method and the oracle, and compute the validity figures.

    ``quick`` (the default, as ``fpr demo``'s): the smaller world (:data:`QUICK`) and the easy world's verdicts on
    one seed; False (``fpr demo --full``): :data:`FULL`'s world and the verdicts on both named worlds over
    :data:`CLAIM_SEEDS` seeds;
    ``world``: a named world (:data:`WORLDS`: ``easy``, or ``paper``, whose specialist oracle mAP sits in the
    paper's range by look-alikes); ``identities`` (per species), ``gallery`` (images per identity),
    ``lookalikes`` and ``family_size`` (look-alike families: :class:`~fpr.galleries.world.WorldConfig`)
    override it (``fpr demo --world``, ``--identities``, ``--gallery-images``, ``--lookalikes``,
    ``--family-size``);
    ``copy_paste``: also run the copy-paste scorer (flag rates, keep-rule shares);
    ``profiles``: named method profiles (:data:`fpr.galleries.world.PROFILES`) evaluated beside the methods;
    ``siblings``, ``home_background``, ``occlusion``: the world's stress conditions (look-alike identities, a
    home background per identity like camera sites, drift hidden by an occluder; ``fpr demo --siblings``,
    ``--home-background``, ``--occlusion``);
    ``config``: :class:`~fpr.galleries.world.WorldConfig` fields overriding the full/quick sizes;
    ``general``: the general-purpose encoder of the 2x2 and the two claims (None: skip them), judged over
    ``claim_seeds`` world seeds (``seed``, ``seed + 1``, ...; default :data:`CLAIM_SEEDS`, 1 with ``quick``)
    on the demo's world and on each other world of ``verdict_worlds`` (default: both named worlds, the
    demo's world only with ``quick``), the same seeds, generations only (:attr:`DemoResult.claims_worlds`);
    ``world_cache``: the worlds' files from the world cache (``$FPR_CACHE_DIR/worlds``; rendered and stored on
    the first run of a config and world code), the same bytes as rendered (``FPR_WORLD_CACHE=0`` turns it off).
    """
    from fpr.errors import InputError
    from fpr.galleries.world import WorldConfig
    from fpr.store import Workspace

    t0 = time.perf_counter()
    if world not in WORLDS:
        raise InputError(f"unknown demo world '{world}'", hint=f"valid: {', '.join(WORLDS)}")
    chosen = {k: v for k, v in dict(identities=identities, gallery=gallery, lookalikes=lookalikes,
                                    family_size=family_size).items() if v is not None}
    base = dict(seed=seed, siblings=siblings, size=size, profiles=tuple(profiles), home_background=home_background,
                occlusion=occlusion, **(QUICK if quick else FULL))
    config = WorldConfig(**{**base, **WORLDS[world], **chosen, **(config or {})})
    ws = Workspace.open(workspace)
    n_seeds = claim_seeds if claim_seeds is not None else (1 if quick else CLAIM_SEEDS)
    others = [w for w in (verdict_worlds if verdict_worlds is not None else (() if quick else tuple(WORLDS)))
              if w != world]
    bad = [w for w in others if w not in WORLDS]
    if bad:
        raise InputError(f"unknown demo world '{bad[0]}'", hint=f"valid: {', '.join(WORLDS)}")
    extra = ([(world, _claims_config(config, s)) for s in range(seed + 1, seed + n_seeds)]
             + [(w, _claims_config(WorldConfig(**{**base, **WORLDS[w]}), s)) for w in others
                for s in range(seed, seed + n_seeds)]) if general else []
    # forked first, before this process loads a model, starts a thread or compiles a kernel: copy-paste's kernels
    # compiled into numba's cache on the core the demo's own work leaves idle, then the verdict seeds
    with compiling_ahead([COPY_PASTE] if copy_paste else []), \
            _background_seeds(ws.root, extra, encoder, general, device, world_cache) as pending:
        return _run_demo(ws, config, quick=quick, out=out, encoder=encoder, device=device, run=run,
                         copy_paste=copy_paste, general=general, extra=extra, pending=pending, t0=t0,
                         world_cache=world_cache, label=world)


def world_fields(config) -> dict:
    """The fields that tell the demo's worlds apart (what ``claims_worlds`` entries carry as ``config``)."""
    return {"identities": config.identities, "gallery": config.gallery, "references": config.references,
            "queries": config.queries, "lookalikes": config.lookalikes, "family_size": config.family_size,
            "siblings": config.siblings, "home_background": config.home_background, "occlusion": config.occlusion}


def _run_demo(ws, config, *, quick: bool, out, encoder: str, device: str, run: str | None, copy_paste: bool,
              general: str | None, extra: list, pending: dict, t0: float, world_cache: bool,
              label: str = "easy") -> DemoResult:
    from fpr.galleries.curate import GallerySpec
    from fpr.galleries.world import World
    from fpr.workflows.galleries import import_gallery
    from fpr.workflows.indices import build_index
    from fpr.workflows.runs import run_query

    seed, siblings, size = config.seed, config.siblings, config.size
    timings: dict[str, float] = {}
    tag = f"s{seed}" + ("-quick" if quick else "") + _stress_tag(config)
    name = f"world-demo-{tag}"
    images = Path(out).expanduser() if out else ws.root / "demo" / name
    progress.log(f"rendering the world ({len(config.species)} species x {config.identities} identities, "
                 f"{len(config.methods)} methods) into {images}")
    t = time.perf_counter()
    build = World(config).write(images, workers=0, cache=world_cache)
    timings["render_s"] = round(time.perf_counter() - t, 2)

    t = time.perf_counter()
    import_gallery(name, build.records, GallerySpec(seed=seed), workspace=ws.root, source="world",
                       overwrite=True)
    timings["import_s"] = round(time.perf_counter() - t, 2)
    queries = pd.DataFrame(build.queries)
    gen, general_s = None, 0.0
    if general:  # first: it needs none of copy-paste's kernels, which meanwhile compile in the background
        with _speaking(f"world seed {seed}: the general-purpose encoder's index and queries ({name})"):
            t = time.perf_counter()
            gen = _general_run(ws.root, name, queries, general, seed, device)
            general_s = time.perf_counter() - t
    with _speaking(f"world seed {seed}: index and queries ({name})"):
        t = time.perf_counter()
        index_name = f"{name}-{encoder}"
        idx = build_index(name, encoder, name=index_name, workspace=ws.root, device=device, overwrite=True)
        timings["index_s"] = round(time.perf_counter() - t, 2)
        t = time.perf_counter()
        res = run_query(idx.name, queries, run=run, workspace=ws.root, seed=seed, device=device,
                            overwrite=run is not None, oracle=True, scorers=["copy-paste"] if copy_paste else [])
        timings["query_s"] = round(time.perf_counter() - t, 2)
    val = validity(res.per_query, res.aux)
    val["headroom"] = headroom(res.per_query, res.encoder)  # per method: AP = 1 share, AP tie share (fpr report's)
    val["agreement"] = truth_agreement(res.run_id, ws.root, res.per_query, seed=seed)
    claims, general_runs, claims_worlds = None, {}, []
    if general:
        from fpr.workflows.meta import claims_frame, encoder_claims

        t = time.perf_counter() - general_s  # the general run's time counts with the verdicts'
        frames = {label: [claims_frame(res.per_query, gen.per_query, seed=seed)]}
        runs = {label: {seed: (res.run_id, gen.run_id)}}
        configs = {label: config}
        for world_label, cfg in extra:
            job = pending.get((world_label, cfg.seed))
            frame, pair = (job.result() if job is not None
                           else _claims_seed(ws.root, cfg, encoder, general, device, world_cache=world_cache))
            frames.setdefault(world_label, []).append(frame)
            runs.setdefault(world_label, {})[cfg.seed] = pair
            configs.setdefault(world_label, cfg)
        for world_label, world_frames in frames.items():
            c = encoder_claims(pd.concat(world_frames, ignore_index=True), seed=seed).as_json()
            c["info"].update({"general": general, "specialist": encoder})
            claims_worlds.append({"world": world_label, "config": world_fields(configs[world_label]), "claims": c,
                                  "general_runs": runs[world_label]})
        claims, general_runs = claims_worlds[0]["claims"], claims_worlds[0]["general_runs"]
        timings["claims_s"] = round(time.perf_counter() - t, 2)
    timings["total_s"] = round(time.perf_counter() - t0, 2)
    world = {"seed": seed, "world": label, "species": list(config.species), "identities_per_species": config.identities,
             "gallery_per_identity": config.gallery, "references_per_identity": config.references,
             "queries_per_identity_and_method": config.queries, "methods": list(config.methods),
             "profiles": list(config.profiles), "siblings": siblings, "home_background": config.home_background,
             "occlusion": config.occlusion, "lookalikes": config.lookalikes, "family_size": config.family_size,
             "image_size": size, "n_images": build.n_images}
    return DemoResult(res.run_id, name, idx.name, res.encoder, str(images), res.summary_records(), val, timings, world,
                      claims, general_runs, claims_worlds)


def paper_table(summary: list[dict], metric: str) -> list[dict]:
    """One row per method (in drift order); a column per group and overall: 'value [lo,hi]'.

    The same pivot as ``fpr report`` (:func:`fpr.render.paper.pivot`), one metric, one encoder.
    """
    from fpr.galleries.world import METHOD_DRIFT, PROFILES, declared_drift
    from fpr.render import paper as rep
    from fpr.render.cells import format_cell

    p = rep.pivot(summary, metrics=(metric,),
                  methods=rep.method_order(pd.DataFrame(summary), ["oracle", *METHOD_DRIFT, *PROFILES]))
    key = p.columns[0].key
    rows = []
    for m in p.methods:
        d = declared_drift(m)  # a profile's: the expected drift of its draws
        row = {"method": m, "drift": None if d is None else round(d, 3)}
        for g in p.groups:
            row["all" if g == "*" else g] = format_cell(*p.value(g, m, key))
        rows.append(row)
    return rows


def validity_lines(v: dict) -> list[str]:
    def f(x):
        return "n/a" if x is None else f"{x:+.3f}"

    lines = []
    if "oracle_map" in v:
        lines.append(f"oracle (the reference images as queries: real images, the ceiling): mAP {v['oracle_map']:.3f}, "
                     f"Sim {v['oracle_sim']:.3f}")
    lines += [f"validity: Spearman(mAP, drift) across methods {f(v.get('spearman_map_drift_methods'))}, "
             f"per query {f(v.get('spearman_ap_drift_queries'))} (n={v.get('n_queries')}); "
             f"Sim: {f(v.get('spearman_sim_drift_methods'))} / {f(v.get('spearman_sim_drift_queries'))}; "
             f"ordering new-scene@0 > @0.1 > @0.25 > @0.5 > @1 "
             f"{'holds' if v.get('ordering_holds') else 'does NOT hold'}"]
    if "paste_map" in v:
        lines.append(f"paste (a reference cut out and pasted on a new background): mAP {v['paste_map']:.3f}, "
                     f"Sim {v['paste_sim']:.3f} ({v.get('paste_minus_faithful_map', 0):+.3f} mAP vs new-scene@0) -- "
                     "retrieval rewards copying; flag it with the copy-paste scorer")
    for name, mix in (v.get("profile_mix") or {}).items():
        lines.append(f"profile {name} ({mix['n_queries']} queries), drawn (declared): "
                     + ", ".join(f"{m} {share:.2f} ({mix['declared'].get(m, 0.0):.2f})"
                                 for m, share in mix["drawn"].items())
                     + f"; mean drift {mix['mean_drift']:.3f} ({mix['declared_drift']:.3f})")
    if "copy_paste_flag_rate" in v:
        rates, scores, kept = v["copy_paste_flag_rate"], v["copy_paste_mean_score"], v["kept_share"]
        lines.append("copy-paste flag rate (mean score) per method: "
                     + ", ".join(f"{m} {rates[m]:.2f} ({scores[m]:.2f})" for m in rates))
        lines.append(f"kept by '{v['keep_rule']}': " + ", ".join(f"{m} {kept[m]:.2f}" for m in kept))
    return lines
