"""Validation of a RefVNLI-recipe model on held-out world identities, against the paper's baselines.

Subject preservation (``sp``) on a fresh evaluation world (identities never trained on):
the query's mean score over its references must rank ``faithful`` (the identity in a new
scene) above ``drift-0.5`` (half the markings redrawn), ``generic`` (another individual)
and ``near-copy`` (a reference's own scene and layout with 25% of the markings redrawn:
a context that flatters pixel similarity). Baselines: ``Sim`` (mean cosine to the
references) with the specialist encoder (``fpr-world-v3``) and with a general stand-in
(``pixels-16``).

Textual alignment (``ta``) on a held-out ``fpr refvnli data`` folder: per (target,
prompt) of scene-positive pairs, the matching prompt must outrank the swapped one and
the one-detail-edited one. Baseline: the model's own dual-encoder cosine (the same
scene and text towers scored CLIP-T style, without the joint head).

Every AUROC comes with a stratified bootstrap interval (:func:`fpr.metrics.separation.auroc_interval`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fpr.metrics.separation import auroc_interval

SP_NEGATIVES = ("drift-0.5", "generic", "near-copy", "ref-pose@1")  # ref-pose@1: the reference's layout, another individual
TA_NEGATIVES = ("swapped", "changed-detail")


@dataclass(frozen=True)
class Separation:
    task: str  # sp or ta
    positive: str
    negative: str
    scorer: str
    n_pos: int
    n_neg: int
    auroc: float
    lo: float
    hi: float

    def as_row(self) -> dict:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _separations(task: str, df: pd.DataFrame, by: str, positive: tuple[str, str], negatives: tuple[str, ...],
                 scorers: tuple[str, ...], seed: int, n_boot: int) -> list[Separation]:
    """AUROC of each scorer column: rows whose ``by`` is ``positive[0]`` over those of each negative value."""
    out = []
    for col in scorers:
        pos = df.loc[df[by] == positive[0], col].to_numpy()
        for neg_value in negatives:
            neg = df.loc[df[by] == neg_value, col].to_numpy()
            a, lo, hi = auroc_interval(pos, neg, seed=seed, key=(task, col, neg_value), n_boot=n_boot)
            out.append(Separation(task, positive[1], neg_value, col, len(pos), len(neg), a, lo, hi))
    return out


def _sims(encoder_id: str, queries: pd.DataFrame, root: Path, device: str) -> np.ndarray:
    """Sim: per query, the mean cosine between its image and its references (one encoder)."""
    from fpr.images import load_rgb
    from fpr.scorers.encoding import cached_encoder
    from fpr.scorers.refvnli.model import identity_vectors

    enc = cached_encoder(encoder_id, device)
    paths = sorted(set(queries.path) | {p for r in queries.reference_paths for p in r.split(";")})
    vecs = dict(zip(paths, identity_vectors(enc, [load_rgb(root / p) for p in paths]).numpy()))
    return np.array([np.mean([vecs[q] @ vecs[r] for r in refs.split(";")])
                     for q, refs in zip(queries.path, queries.reference_paths)])


def world_sp(model: str, workdir: str | Path, *, seed: int, identities: int, queries: int, device: str = "cpu",
             n_boot: int = 1000, general: str = "pixels-16", specialist: str = "fpr-world-v3"
             ) -> tuple[list[Separation], pd.DataFrame]:
    """SP separations on a held-out world (seed ``seed``); also the per-query scores."""
    from fpr.galleries.world import World, WorldConfig
    from fpr.scorers import QueryBatch, run_scorers

    root = Path(workdir) / f"world-seed{seed}"
    World(WorldConfig(seed=seed, identities=identities, gallery=1, references=3, queries=queries,
                      methods=("faithful",) + SP_NEGATIVES)).write(root, progress_desc="held-out world")
    q = pd.read_csv(root / "queries.csv")
    batch = QueryBatch(list(q.query_id), [str(root / p) for p in q.path], list(q.identity), list(q.group),
                       list(q.prompt), [[str(root / p) for p in r.split(";")] for r in q.reference_paths],
                       device=device, options={"refvnli.model": model})
    scores = run_scorers(["refvnli"], batch).pivot(index="query_id", columns="metric", values="value")
    q["refvnli_sp"] = scores.loc[q.query_id, "sp"].to_numpy()
    q[f"sim_{specialist}"] = _sims(specialist, q, root, device)
    q[f"sim_{general}"] = _sims(general, q, root, device)
    out = _separations("sp", q, "method", ("faithful", "faithful"), SP_NEGATIVES,
                       ("refvnli_sp", f"sim_{specialist}", f"sim_{general}"), seed, n_boot)
    return out, q


def data_ta(model: str, data: str | Path, *, device: str = "cpu", n_boot: int = 1000, seed: int = 0
            ) -> tuple[list[Separation], pd.DataFrame]:
    """TA separations on a held-out ``fpr refvnli data`` folder: the model's TA head and its dual-encoder cosine."""
    from fpr.errors import InputError
    from fpr.images import load_rgb
    from fpr.scorers.refvnli.model import load_model
    from fpr.scorers.refvnli.scorer import model_source
    from fpr.workflows.refvnli_train import read_triplets

    kind, model = model_source(model)
    if kind != "fpr":
        raise InputError("the TA validation reads the dual-encoder cosine of an `fpr refvnli train` model",
                         where=model, hint="pass refvnli.model=builtin or a folder written by `fpr refvnli train`")
    files = read_triplets(data)
    t = files.table
    if "pair_kind" not in t.columns or "prompt_kind" not in t.columns:
        raise InputError("refvnli triplets lack 'pair_kind' or 'prompt_kind'", where=str(files.folder),
                         hint="rebuild the folder with `fpr refvnli data`")
    t = t[t.pair_kind == "scene-positive"].drop_duplicates(["target_path", "prompt"]).reset_index(drop=True)
    loaded = load_model(model, device)
    images = {p: load_rgb(files.paths[p]) for p in set(t.reference_path) | set(t.target_path)}
    probs, cos = loaded.score([images[p] for p in t.reference_path], [images[p] for p in t.target_path],
                              list(t.prompt))
    t["refvnli_ta"], t["dual_encoder_cosine"] = probs[:, 0], cos
    out = _separations("ta", t, "prompt_kind", ("positive", "matching"), TA_NEGATIVES,
                       ("refvnli_ta", "dual_encoder_cosine"), seed, n_boot)
    return out, t


__all__ = ["SP_NEGATIVES", "Separation", "TA_NEGATIVES", "data_ta", "world_sp"]
