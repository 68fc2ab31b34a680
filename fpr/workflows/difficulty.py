"""How hard a gallery is for an encoder: the oracle's mAP and AP = 1 share (paper, Table 1's real-images row).

The oracle queries are the gallery's reference images (real, never in the searchable gallery:
:mod:`fpr.eval.oracle`), evaluated by the one pipeline (:func:`fpr.eval.pipeline.evaluate`) exactly as
``fpr query --oracle`` evaluates them, but nothing is stored: the numbers equal that run's oracle rows.
The oracle is the ceiling of every method, so a gallery whose oracle mostly scores AP = 1 cannot tell
methods near the top apart (they tie); the paper's MiewID reaches oracle mAP 0.803 on its Re-ID gallery.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from fpr.defaults import EMBED_BATCH_SIZE
from fpr.errors import InputError
from fpr.eval import inputs, pipeline, relevance
from fpr.eval.oracle import oracle_queries
from fpr.eval.pipeline import EvalSettings
from fpr.metrics.headroom import SATURATED
from fpr.store.workspace import Workspace
from fpr.workflows.common import embedder, index_encoder

# The oracle's AP = 1 share at or above which a gallery is called saturated is the one threshold of
# fpr.metrics.headroom (why a half: there): at least half of the real images' queries tie at the top, so methods
# as good as a real photograph cannot be ordered (the specialist on the easy world: 0.90-0.98; on the
# paper-difficulty world: 0.01-0.09, benchmarks/results/paper_world.md).
SATURATED_AP_ONE = SATURATED


@dataclass
class Difficulty:
    """A gallery's difficulty for the encoder of an index: the oracle's mAP and AP = 1 share."""

    index: str
    gallery: str
    encoder: str
    n_queries: int  # oracle queries evaluated (one per reference image)
    oracle_map: float
    ap_one_share: float  # oracle queries with AP exactly 1

    @property
    def saturated(self) -> bool:
        return self.ap_one_share >= SATURATED_AP_ONE

    def line(self, hint: str = "use more identities per group or nearest impostors (fpr gallery curate "
                                "--impostors K --impostor-encoder E)") -> str:
        """One line: the numbers, and whether the gallery can rank methods near the top (``hint``: what to do
        when it cannot)."""
        head = (f"gallery difficulty ({self.encoder}): oracle mAP {self.oracle_map:.3f}, AP = 1 for "
                f"{self.ap_one_share:.0%} of {self.n_queries} oracle queries (the paper's MiewID: mAP 0.803)")
        if self.saturated:
            return head + f" -- too easy to rank methods near the top (they tie at AP = 1): {hint}"
        return head + " -- hard enough to rank methods near the top"

    def as_json(self) -> dict:
        return {**asdict(self), "saturated": self.saturated, "line": self.line()}


def gallery_difficulty(index: str, *, workspace: str | Path | None = None, device: str = "auto",
                       batch_size: int = EMBED_BATCH_SIZE, workers: int | None = None) -> Difficulty:
    """The oracle mAP and AP = 1 share of an index's gallery (its reference images as queries; nothing stored)."""
    ws = Workspace.open(workspace)
    opened = relevance.open_index(ws, index)
    oracle = oracle_queries(opened.items)
    if oracle.empty:
        raise InputError(f"gallery '{opened.index.card.gallery}' has no reference images: no oracle to measure "
                         "its difficulty with", hint="import the gallery with reference images (role 'reference')")
    qdf = inputs.normalize_queries(oracle, where="oracle")
    enc = index_encoder(opened, None, device)
    # an identity with references but no gallery image has no oracle AP: left out, as fpr query
    # --skip-missing-identities leaves it out (curation drops such identities, so this is rare)
    settings = EvalSettings(device=device, batch_size=batch_size, workers=workers, top_k=0,
                            skip_missing_identities=True)
    ev = pipeline.evaluate(qdf, opened.labels, opened.index, embedder(enc, batch_size, workers), settings,
                           where="oracle", encoder_id=enc.id, workspace=ws.root, dim=enc.spec.dim)
    ap = ev.per_query["ap"].to_numpy(float)[ev.ok]
    return Difficulty(index, opened.index.card.gallery, enc.id, int(len(ap)),
                      float(np.mean(ap)) if len(ap) else float("nan"),
                      float(np.mean(ap == 1.0)) if len(ap) else float("nan"))


def indexed_difficulty(gallery: str, encoder: str, *, workspace: str | Path | None = None, device: str = "auto",
                       overwrite: bool = True) -> Difficulty:
    """Build (or rebuild) the index ``<gallery>-<encoder>`` and measure the gallery's difficulty on it: what
    ``fpr gallery import|curate --impostors K --impostor-encoder E`` prints after curating."""
    from fpr.workflows.indices import build_index

    idx = build_index(gallery, encoder, workspace=workspace, device=device, overwrite=overwrite)
    return gallery_difficulty(idx.name, workspace=workspace, device=device)


def identities_of_interest(path: str | Path) -> tuple[str, ...]:
    """The identities a table names (a queries CSV, say): ``group/identity`` per row with a group column,
    else ``identity``; each once, in first-seen order."""
    from fpr.tables import read_table

    df = read_table(path, required=("identity",), what="identities of interest")
    names = (df["group"].astype(str) + "/" + df["identity"].astype(str) if "group" in df.columns
             else df["identity"].astype(str))
    return tuple(dict.fromkeys(names.str.strip()))
