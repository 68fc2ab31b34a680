"""``copy-paste``: flags generations that reproduce a reference image instead of re-rendering the subject.

Paper section 5.1: an editing-style generator that pastes the reference subject
into a new scene gets near-perfect retrieval scores, which then reflect
memorisation, not identity preservation. A copy keeps the reference's *pixels in
their arrangement*: whatever it moved, resized, cropped, flipped, slightly
rotated, recoloured or recompressed, many small textured patches of the
reference are found in the query exactly where one similarity transform puts
them. A re-rendering of the subject (a new pose, viewpoint, body warp)
reproduces the markings but not their exact arrangement, so only a few patches
land within a fraction of a pixel of where the transform predicts.

Per query and reference (the ``copy-paste.max_refs`` most similar by appearance,
default 5), both in greyscale at 128 px on the longer side, lightly blurred, and in
*both directions* (the reference's patches sought in the query, and the query's in
the reference: a reference on a busy background spends its most textured patches
there, a copy on a plain one keeps them on the subject):

1. the image whose patches are sought is cut into 8x8 patches (half-overlapping) at
   6 scales (x1.41 .. x0.59, steps of 2^(1/4); with both directions, size ratios of
   about 0.53 to 1.9 are covered); the 96 most textured per scale are kept;
2. the 24 most textured patches per scale, and their mirror images (for a
   mirrored copy), are matched at every second position of the other image by
   normalised cross-correlation after removing each window's mean and linear
   gradient (flat areas and smooth gradients match nothing; brightness, contrast
   and mild colour changes do not matter); best matches with NCC >= 0.7 propose,
   per scale and mirror, the similarity transform (rotation up to 12 degrees,
   scale within 12% of the level) most of them agree with (within 2 px);
3. each proposal first counts the patches that reach NCC >= 0.7 within 1 px of
   where it puts them; the 3 best (per reference and direction) are *refined*:
   the patches found within 2 px are collected with sub-pixel positions, the pair
   hypothesis most agree with at 0.6 px is refitted on its inliers and the fit is
   repeated on the matches within 0.6, 0.4, 0.3 px;
4. every patch of that scale is then *verified* where the refined transform puts
   it: its NCC peak within 1 px is >= 0.7 and the NCC *at* the predicted sub-pixel
   position is at most 0.02 below that peak (a copy's patch sits exactly there; an
   edge, e.g. a stripe, which cannot be located along its edge, is still checked
   across it). A re-rendering of the subject (a new pose, a body warp) reproduces
   the markings but not their exact arrangement, so only a few patches pass.

The search stops as soon as one arrangement verifies 90% of the patches.

Metrics
``score``
    in [0, 1], higher = more copy-like: the fraction of the textured patches (at
    least 24 counted) verified in one arrangement, max over the checked
    references, scales, mirror and both directions. Also reported as ``pixel``.
``flag``
    1 when ``score >= copy-paste.threshold`` (default: see DEFAULTS, calibrated).
``pixel_matches``
    the number of verified patches behind the score.
``mirrored``
    1 when the best evidence is a mirrored arrangement.
``forward``, ``reverse``
    the best fraction with the reference's patches sought in the query, and with
    the query's patches sought in the reference (``score`` is the one with more
    verified patches; a direction not tried because the other already verified
    90% is reported as 0).
``appearance``
    max cosine similarity between the query and its references under a general
    encoder (option ``copy-paste.encoder``, default ``pixels-16``). It ranks the
    references, and decides alone when no reference has a textured patch (flat
    cartoons): then ``score`` is the appearance, the flag is
    ``appearance >= 0.98`` (``copy-paste.appearance_threshold``) and a ``note``
    says so. A *query* with no textured patch (uniform, blank, black, blurred)
    while a reference has some cannot be checked: every metric but
    ``appearance`` is NaN and the ``note`` says why; the batch goes on.

The default threshold is calibrated on calibration seeds of the built-in world
and validated on other seeds by ``benchmarks/calibrate_copy_paste.py`` (table in
``benchmarks/results/copy_paste_calibration.md``); ``docs/workflows.md`` says how
to recalibrate it on one's own labelled queries. Limitations: copies rotated by
more than about 12 degrees, or warped, are not caught; a subject smaller than
about a third of the frame leaves few patches; periodic textures shared by
reference and query (brick walls, tiles) can produce consistent matches; a
faithful generation that happens to take a reference's pose almost exactly
scores in between. A query outside the calibrated domain (tiny, thin, low texture, upsampled or
blurred: :class:`Domain`, floors measured by ``benchmarks/copy_paste_domain.py``) is scored as
usual, its ``note`` says why it is outside, and one warning per run counts them.

Every NCC is one fixed expression (exact float64 products of the float32 rows, a fixed summation tree,
rounded to float32), computed by compiled kernels; the search's BLAS product only proposes candidates
(the windows within its error bound of the row maximum are recomputed), and ``appearance`` is the correctly
rounded dot product. Still through BLAS: the detrending's small products (N x 64 by 64 x 3) that make the
templates and windows (bit-identical under OpenBLAS's SkylakeX and Haswell kernels, checked; not proven for
every BLAS).

The family's modules: ``patches`` (the constants, the domain, an image's patches and windows), ``match`` (one
pair of images: :func:`~fpr.scorers.copy_paste.match.pixel_match`), this one (the scorer and its batch over
forked worker processes), and the compiled kernels ``kernels`` (NCC loops and decisions), ``exact`` (NumPy's
complex arithmetic ported) and ``align`` (a proposal's refinement in one call), each tested against NumPy.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import os
import sys
import threading
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd
from PIL import Image
from threadpoolctl import threadpool_limits

from fpr import progress
from fpr.encoders.embed import embed_paths
from fpr.images import load_rgb
from fpr.scorers import QueryBatch, Scorer, register_scorer
from fpr.scorers.encoding import cached_encoder
from fpr.scorers.options import Option
from fpr.scorers.copy_paste.patches import (DEFAULTS, DEFAULT_ENCODER, Domain, EARLY_STOP, NO_QUERY_TEXTURE,
    QueryWindows, ReferencePatches, WORK_SIDE, _grey)
from fpr.scorers.copy_paste.match import compile_kernels, pixel_match


class CopyPaste(Scorer):
    name = "copy-paste"
    description = ("flags generations that reproduce a reference image (pasted, moved, resized, mirrored, "
                   "recoloured, on a new background) instead of re-rendering the subject")
    needs = frozenset({"image", "references"})
    metrics = ("score", "flag", "pixel", "pixel_matches", "mirrored", "forward", "reverse", "appearance")
    primary_metric = "flag"  # what a keep-rule means by `copy_paste`
    options = (
        Option("encoder", str, DEFAULT_ENCODER, "general encoder for the appearance signal"),
        Option("max_refs", int, DEFAULTS["max_refs"], "references pixel-checked per query, most similar first",
               minimum=1),
        Option("threshold", float, DEFAULTS["threshold"], "flag at this score (calibrated on the world)"),
        Option("appearance_threshold", float, DEFAULTS["appearance_threshold"],
               "flag at this appearance when no reference has texture to match"),
    )

    # per query a pure function of its image, its references (in order), the options and the appearance
    # encoder (tests/scorers/test_score_cache.py): kept in the score cache (fpr.scorers.cache)
    deterministic = True
    version_modules = ("fpr.scorers.copy_paste.scorer", "fpr.scorers.copy_paste.patches",
                       "fpr.scorers.copy_paste.match", "fpr.scorers.copy_paste.kernels",
                       "fpr.scorers.copy_paste.align", "fpr.scorers.copy_paste.exact")

    def cache_inputs(self, batch: QueryBatch) -> dict:
        """The appearance encoder's embedding key (weights, preprocessing, device class) and numba's version
        (it compiles the kernels)."""
        from importlib.metadata import version

        encoder = cached_encoder(self.option_values(batch.options)["encoder"], batch.device)
        return {"appearance": encoder.cache_key, "numba": version("numba")}

    def provenance(self, batch: QueryBatch) -> dict:
        coverage = reference_coverage(batch)
        return {"references": coverage} if coverage else {}

    def check(self, batch: QueryBatch) -> None:
        """The warning about queries checked only against their identity's reference set: here, on the whole
        batch, because queries found in the score cache never reach :meth:`score`."""
        super().check(batch)
        coverage = reference_coverage(batch)
        outside = sum(bool(Domain.of(load_rgb(p)).reasons()) for p in batch.paths)
        if outside:
            progress.warn(f"copy-paste: {outside} of {len(batch)} queries are outside its calibrated domain (tiny, "
                          "thin, low-texture, upsampled or blurred images; the reason is in each one's note): their scores "
                          "are less reliable, non-copies may be flagged; see docs/workflows.md, copy-paste")
        if coverage.get("identity_references"):
            progress.warn(f"copy-paste compared {coverage['identity_references']} of {len(batch)} queries only with "
                          "their identity's reference images (the queries file has no reference_paths for them): "
                          f"{coverage['unchecked_share']:.0%} of those identities' images (their gallery images) "
                          "were not checked, so a copy of one of them is not flagged; give each query the images it "
                          "was conditioned on as reference_paths")

    def score(self, batch: QueryBatch) -> pd.DataFrame:
        opts = self.option_values(batch.options)
        max_refs, threshold, app_t = opts["max_refs"], opts["threshold"], opts["appearance_threshold"]
        rows = [i for i, refs in enumerate(batch.reference_paths) if refs]
        if not rows:
            return pd.DataFrame(columns=["query_id", "metric", "value", "note"])
        enc = cached_encoder(opts["encoder"], batch.device)
        ref_paths = sorted({p for i in rows for p in batch.reference_paths[i]})
        ref_vecs = dict(zip(ref_paths, embed_paths(enc, ref_paths, desc="copy-paste: embedding references").vectors))
        q_vecs = embed_paths(enc, [batch.paths[i] for i in rows], desc="copy-paste: embedding queries").vectors
        return self._match(batch, rows, ref_vecs, q_vecs, max_refs, threshold, app_t)

    def _match(self, batch, rows, ref_vecs, q_vecs, max_refs, threshold, app_t) -> pd.DataFrame:
        jobs = []
        for j, i in enumerate(rows):
            paths = batch.reference_paths[i]
            sims = np.array([_exact_dot(ref_vecs[r], q_vecs[j]) for r in paths])
            order = np.argsort(-sims, kind="stable")[:max(1, max_refs)]
            jobs.append(_Job(batch.query_ids[i], batch.paths[i], tuple(paths[k] for k in order), float(sims.max())))
        settings = _Settings(max(EARLY_STOP, threshold), threshold, app_t)
        out = [r for rows_of_query in _run_jobs(jobs, settings) for r in rows_of_query]
        return pd.DataFrame(out, columns=["query_id", "metric", "value", "note"])


def _exact_dot(u: np.ndarray, v: np.ndarray) -> float:
    """The dot product rounded once to float64 (float32 products are exact in float64; fsum rounds correctly):
    the appearance cannot depend on the BLAS kernel (a float64 BLAS dot's last bits do)."""
    return math.fsum(u.astype(np.float64) * v.astype(np.float64))


def reference_coverage(batch: QueryBatch) -> dict:
    """What copy-paste compares against: queries with the queries file's own ``reference_paths``, queries that fall
    back on their identity's reference set, and the share of those identities' images (references + gallery
    images) left unchecked. Empty when the batch does not say where its references came from."""
    if batch.explicit_references is None:
        return {}
    implicit = [i for i, e in enumerate(batch.explicit_references) if not e and batch.reference_paths[i]]
    out = {"reference_paths": sum(bool(e) for e in batch.explicit_references), "identity_references": len(implicit)}
    if implicit and batch.gallery_identities is not None:
        per_key: dict[tuple[str, str], int] = {}
        for g, ident in zip(batch.gallery_groups or [], batch.gallery_identities):
            per_key[(g, ident)] = per_key.get((g, ident), 0) + 1
        gallery = sum(per_key.get((batch.groups[i], batch.identities[i]), 0) for i in implicit)
        refs = sum(len(batch.reference_paths[i]) for i in implicit)
        out["unchecked_share"] = gallery / (gallery + refs) if gallery + refs else 0.0
    else:
        out["unchecked_share"] = 0.0
    return out


@dataclass(frozen=True)
class _Job:
    """One query to match: its references ordered most similar first, and that best appearance."""

    query_id: str
    path: str
    refs: tuple[str, ...]
    appearance: float


@dataclass(frozen=True)
class _Settings:
    stop: float  # a score after which no other reference or direction can change the flag
    threshold: float
    appearance_threshold: float


CHUNK = 24  # queries per task of a worker process


def _match_processes(n_jobs: int) -> int:
    """Worker processes for ``n_jobs`` queries; 1 = match in this process.

    The matching is many small NumPy operations that hold the GIL (two threads gained 5% on 2 cores,
    measured), so large batches go to forked processes. Only from the main thread and outside Ray:
    the HTTP service matches in worker threads and Ray actors hold RPC threads, and forking while
    another thread holds a lock can hang the child; those callers match in their own process.
    """
    if (n_jobs < 2 * CHUNK or threading.current_thread() is not threading.main_thread() or "ray" in sys.modules
            or "fork" not in mp.get_all_start_methods()):
        return 1
    return max(1, min(os.cpu_count() or 1, 8, n_jobs // CHUNK))


def _run_jobs(jobs: list[_Job], settings: _Settings) -> list[list[tuple]]:
    n = _match_processes(len(jobs))
    if n <= 1:
        return _match_chunk(jobs, settings, _ReferenceCache(), desc="copy-paste: matching")
    compile_kernels()  # before forking: the workers inherit them instead of each loading or compiling its own
    # tasks of queries that share their first reference, so a worker computes its patches once
    order = sorted(range(len(jobs)), key=lambda k: (jobs[k].refs[:1], k))
    chunks = [order[c:c + CHUNK] for c in range(0, len(order), CHUNK)]
    results: list[list[tuple] | None] = [None] * len(jobs)
    with ProcessPoolExecutor(n, mp_context=mp.get_context("fork")) as pool, \
            progress.bar(total=len(jobs), desc=f"copy-paste: matching ({n} processes)", unit="query") as bar:
        futures = {pool.submit(_match_chunk, [jobs[k] for k in c], settings): c for c in chunks}
        for fut in as_completed(futures):
            for k, rows in zip(futures[fut], fut.result()):
                results[k] = rows
            bar.update(len(futures[fut]))
    return results


_WORKER_CACHE: "_ReferenceCache | None" = None  # one per process: reference patches outlive a task


def _match_chunk(jobs: list[_Job], settings: _Settings, cache: "_ReferenceCache | None" = None,
                 desc: str | None = None) -> list[list[tuple]]:
    """Rows of each job, in order; ``cache`` None: the worker process's own reference cache."""
    global _WORKER_CACHE
    if cache is None:
        if _WORKER_CACHE is None:
            _WORKER_CACHE = _ReferenceCache()
        cache = _WORKER_CACHE
    with threadpool_limits(1):  # many small matrix products: one BLAS thread each beats threads fighting
        items = progress.bar(jobs, desc=desc, unit="query") if desc else jobs
        return [_query_rows(job, cache, settings) for job in items]


class _ReferenceCache:
    """References are shared by many queries: their patches and windows are computed once."""

    def __init__(self, size: int = 256):
        self.size, self.items = size, OrderedDict()

    def get(self, path: str) -> "_Prepared":
        if path not in self.items:
            self.items[path] = _Prepared(load_rgb(path))
            if len(self.items) > self.size:
                self.items.popitem(last=False)
        return self.items[path]


class _Prepared:
    """An image's patches (sought in the other image) and windows (searched), each made on first use (a
    direction not tried, because the other already found a nearly complete copy, costs nothing), from one
    greyscale conversion at the working size (their scale-1 image)."""

    def __init__(self, image: Image.Image):
        self.image, self.grey = image, _grey(image, WORK_SIDE)

    @cached_property
    def patches(self) -> ReferencePatches:
        return ReferencePatches.of(self.image, self.grey)

    @cached_property
    def windows(self) -> QueryWindows:
        return QueryWindows.of(self.image, self.grey)


def _query_rows(job: _Job, refs: _ReferenceCache, settings: _Settings) -> list[tuple]:
    """The scorer's rows for one query checked against its references (most similar first)."""
    image = load_rgb(job.path)
    qid, stop, threshold, app_t, appearance = (job.query_id, settings.stop, settings.threshold,
                                               settings.appearance_threshold, job.appearance)
    query = _Prepared(image)
    best, fwd, rev, checkable = (0.0, 0, False), 0.0, 0.0, False
    for path in job.refs:
        if best[0] >= stop:  # a nearly complete copy found: nothing can change the flag
            break
        ref = refs.get(path)
        checkable = checkable or len(ref.patches.templates) > 0
        # both ways: the reference's patches in the query, and the query's in the reference (a
        # reference on a busy background spends its textured patches there; a copy on a plain
        # one keeps them on the subject)
        for forward in (True, False):
            if best[0] >= stop:
                break
            m = pixel_match(query.windows, ref.patches) if forward else pixel_match(ref.windows, query.patches)
            fwd, rev = (max(fwd, m[0]), rev) if forward else (fwd, max(rev, m[0]))
            if (m[1], m[0]) > (best[1], best[0]):
                best = m
    frac, count, mirrored = best
    note = ""
    domain = Domain.of(query.image, query.grey).note()
    if checkable and len(query.patches.templates) == 0:
        # a uniform, blank, black or blurred query: none of its patches can be sought, and the references'
        # patches found nowhere in it say nothing about a copy of their flat parts
        frac = count = mirrored = fwd = rev = score = flag = float("nan")
        note = NO_QUERY_TEXTURE
    elif checkable:
        score = float(frac)
        flag = float(score >= threshold)
    else:  # nothing textured to match: only a near-duplicate appearance can tell
        frac = count = mirrored = fwd = rev = float("nan")
        score, flag = float(np.clip(appearance, 0, 1)), float(appearance >= app_t)
        note = "no reference has a textured patch: score = appearance"
    if domain and note != NO_QUERY_TEXTURE:
        note = f"{note}; {domain}" if note else domain
    return [(qid, "score", score, note), (qid, "flag", flag, note), (qid, "pixel", frac, note),
            (qid, "pixel_matches", float(count), note), (qid, "mirrored", float(mirrored), note),
            (qid, "forward", fwd, note), (qid, "reverse", rev, note), (qid, "appearance", appearance, "")]


register_scorer(CopyPaste())
