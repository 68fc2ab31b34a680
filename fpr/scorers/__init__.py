"""Auxiliary per-query scorers, joined to retrieval results on the query id.

This package's top modules are the framework (this base class and registry, ``options``, ``cache``,
``encoding``) and ``judges/`` the kit shared by model-judge scorers; the scorers live one package per
family (``copy_paste/``, ``vistar/``, ``refvnli/``, ``dreambench/``, ``conditional/``, ``embedding/``),
whose modules may import each other and the framework, never another family (tests/test_layering.py).
A scorer is one module in a family defining a :class:`Scorer` subclass and
calling :func:`register_scorer`, plus its name and module in ``BUILTIN`` (so that finding one scorer
imports its module only), or, for a third-party package, an entry point in the ``fpr.scorers`` group
(``name = "package.module"`` or ``"package.module:object"``); :data:`SCORERS` is the
:class:`fpr.registry.Registry` of them. It declares what
it needs (``image``, ``references``, ``prompt``, an encoder) and its options
(:class:`~fpr.scorers.options.Option`: checked before a run starts), and
returns a long table ``query_id, metric, value`` and optionally ``note`` (text
beside a value: OCR output, a judge's trajectory, or why a value is missing: a
missing value is NaN with its reason, never a guess); fpr stores it in the
``aux_scores`` table keyed by (run_id, query_id, scorer, metric).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from fpr.errors import InputError, NotFoundError, choices_hint
from fpr.registry import Registry
from fpr.scorers.cache import score_with_cache
from fpr.scorers.options import Option, check_options, resolve

# Each built-in scorer's name and the module that registers it (tests/test_layering.py checks the table
# against what each module registers).
BUILTIN = {"clip-t": "fpr.scorers.embedding.clip_t", "copy-paste": "fpr.scorers.copy_paste.scorer",
           "vistar-tr": "fpr.scorers.vistar.tr", "vistar-cse": "fpr.scorers.vistar.cse",
           "vistar-gc": "fpr.scorers.vistar.gc", "vistar-li": "fpr.scorers.vistar.li",
           "vistar-psc": "fpr.scorers.vistar.psc", "vistar-cpa": "fpr.scorers.vistar.cpa",
           "refvnli": "fpr.scorers.refvnli.scorer", "dreambench-concept": "fpr.scorers.dreambench.concept",
           "dreambench-prompt": "fpr.scorers.dreambench.prompt", "viescore": "fpr.scorers.conditional.viescore",
           "cigeval": "fpr.scorers.conditional.cigeval", "hwpq": "fpr.scorers.vistar.hwpq"}


@dataclass
class QueryBatch:
    """The queries of a run, as scorers see them (rows aligned)."""

    query_ids: list[str]
    paths: list[str]
    identities: list[str]
    groups: list[str]
    prompts: list[str | None]
    reference_paths: list[list[str]]  # explicit per-query references, else the identity's reference set
    query_vectors: np.ndarray | None = None  # embeddings under the run's encoder
    encoder_id: str | None = None
    device: str = "auto"
    options: dict = field(default_factory=dict)  # scorer options, e.g. {"copy-paste.encoder": "pixels-16"}
    workspace: Path | None = None  # the run's workspace folder (per-workspace caches, e.g. model judges)
    extras: list[dict] | None = None  # per query: the queries table's other columns (expected_text, panels, ...)
    # The gallery the run retrieves from, rows aligned (FAISS order), for gallery-aware scorers such as
    # ``dreambench-concept.mode=choice``; ``gallery_scores(query_vectors)`` -> (Q, G) similarities
    # under the run's encoder. Wired for scorers whose ``uses_gallery`` says so, else None.
    gallery_paths: list[str] | None = None
    gallery_identities: list[str] | None = None
    gallery_groups: list[str] | None = None
    gallery_scores: Callable[[np.ndarray], np.ndarray] | None = None
    # per query: True when ``reference_paths`` came from the queries table, False when they are the identity's
    # reference set (None: unknown). Scorers that compare against references say what they could not check.
    explicit_references: list[bool] | None = None

    def __len__(self) -> int:
        return len(self.query_ids)


class Scorer:
    name: str = ""
    description: str = ""
    needs: frozenset[str] = frozenset()  # subset of {"image", "references", "prompt"}
    metrics: tuple[str, ...] = ()  # every metric it may return (checked on each run: another is a scorer bug)
    primary_metric: str | None = None  # the one metric that stands for it (keep-rules, tables); one of metrics
    options: tuple[Option, ...] = ()
    # True: its values are a pure function of its options and each query's own inputs (image, references,
    # prompt; fpr.scorers.cache says what the key covers), so they are kept in the score cache across runs.
    deterministic: bool = False
    # the modules whose source decides its values (default: its own); an edit of one is a new cache version
    version_modules: tuple[str, ...] = ()
    # per-query fields beyond image, references and prompt that decide a deterministic scorer's values
    # ("identity", "group", or a column of the queries table): part of its cache key
    query_fields: tuple[str, ...] = ()

    def option_values(self, options: dict | None) -> dict:
        """Typed values of this scorer's declared options (defaults filled) from ``<name>.<option>`` keys."""
        return resolve(self.name, self.options, options)

    def score(self, batch: QueryBatch) -> pd.DataFrame:  # columns: query_id, metric, value[, note]
        raise NotImplementedError

    def provenance(self, batch: QueryBatch) -> dict:
        """What decides this scorer's values beyond its name (model, endpoint, prompt versions); {} if nothing."""
        return {}

    def cache_inputs(self, batch: QueryBatch) -> dict:
        """For a ``deterministic`` scorer: what else decides its values on this batch beyond its code, options
        and each query's files (:mod:`fpr.scorers.cache`), e.g. the embedding key of a model it loads; {} if
        nothing."""
        return {}

    def uses_gallery(self, options: dict) -> bool:
        """Whether, with these options, it reads the run's query vectors and gallery scores (``fpr score``
        then re-embeds the run's queries, from the embedding cache where they are)."""
        return False

    def check(self, batch: QueryBatch) -> None:
        if "prompt" in self.needs and not any(p for p in batch.prompts):
            raise InputError(f"scorer '{self.name}' needs prompts but the queries have no 'prompt' column values",
                             hint="add a prompt column to the queries file")


SCORERS: Registry[Scorer] = Registry("scorer", "fpr.scorers", BUILTIN, name_of=lambda s: s.name, item_type=Scorer)
_SCORERS = SCORERS.items  # the registered scorers by name (tests add toys here)


def register_scorer(scorer: Scorer, *, replace: bool = False) -> Scorer:
    if scorer.primary_metric is not None and scorer.primary_metric not in scorer.metrics:
        raise ValueError(f"scorer {scorer.name!r}: primary_metric {scorer.primary_metric!r} is not one of its "
                         f"metrics {scorer.metrics}")
    return SCORERS.register(scorer, replace=replace)


def check_declared_metrics(scorer: Scorer, df: pd.DataFrame) -> None:
    """A scorer returns only the metrics it declares (``metrics``): another name is a bug in that scorer,
    reported naming it, never stored as if it were a metric of the run."""
    if not {"query_id", "metric", "value"} <= set(df.columns):
        raise RuntimeError(f"scorer {scorer.name} returned columns {list(df.columns)}")
    undeclared = sorted(set(df["metric"].astype(str)) - set(scorer.metrics))
    if undeclared:
        raise RuntimeError(f"scorer {scorer.name} returned metrics it does not declare: {', '.join(undeclared)} "
                           f"(declared: {', '.join(scorer.metrics)})")


def all_scorers() -> dict[str, Scorer]:
    """Every scorer: the built-in modules and the plugins, all imported."""
    return SCORERS.all()


def get_scorer(name: str) -> Scorer:
    """The scorer ``name``, importing only its module; unknown is one line listing the valid names."""
    return SCORERS.get(name)


def parse_scorer_list(text: str | list[str] | tuple[str, ...] | None) -> list[str]:
    if not text:
        return []
    names = text.split(",") if isinstance(text, str) else list(text)
    names = [n.strip() for n in names if n.strip()]
    for n in names:
        get_scorer(n)
    return names


def check_scorer_options(names: list[str], options: dict | None) -> None:
    """Every ``--scorer-option`` names a scorer of ``names`` and one of its declared options, with a valid
    value; called before any image is embedded."""
    check_options({n: get_scorer(n).options for n in names}, options)


def uses_gallery(names: list[str], options: dict | None) -> bool:
    """Whether any of the named scorers reads the run's query vectors and gallery scores."""
    return any(get_scorer(n).uses_gallery(dict(options or {})) for n in names)


def run_scorers(names: list[str], batch: QueryBatch) -> pd.DataFrame:
    frames = []
    provenance = {}
    check_scorer_options(names, batch.options)
    for name in names:
        scorer = get_scorer(name)
        scorer.check(batch)
        df = score_with_cache(scorer, batch)
        provenance[name] = scorer.provenance(batch)
        check_declared_metrics(scorer, df)
        df = df.reindex(columns=["query_id", "metric", "value", "note"]).copy()
        df.insert(1, "scorer", name)
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["query_id", "scorer", "metric", "value", "note"])
    out = pd.concat(frames, ignore_index=True)
    out["value"] = pd.to_numeric(out["value"], errors="coerce").astype(float)
    out["note"] = out["note"].astype(object).where(out["note"].notna(), None)
    out.attrs["provenance"] = {k: v for k, v in provenance.items() if v}  # per scorer, for the run's provenance
    return out
