"""The Python API: every ``fpr`` command is one function, owned by a module below.

    import fpr
    fpr.import_gallery("leopards", fpr.read_folder("data/leopards"))
    fpr.build_index("leopards", "miewid-msv2")
    result = fpr.run_query("leopards-miewid-msv2", "generated.csv")
    result.summary   # a DataFrame: a row per (encoder, method, group), plus group "*" per method
    result.to_dict() # the fpr.run-result/1 document (fpr/schemas/run-result-v1.json)

Functions take ``workspace=None`` (meaning ``$FPR_WORKSPACE`` or ``./fpr-workspace``).

:data:`PUBLIC` is the one public list: name -> the module that owns it (user operations
in :mod:`fpr.workflows`, records and constants where they are defined). ``fpr.NAME`` and
``fpr.api.NAME`` resolve through it on first use and return the owner's own object, so
signatures and docstrings are the real ones, and model code (torch, timm, open_clip) is
imported only when a name that needs it is used: ``fpr --help``, ``runs``, ``report``,
``sql`` and ``export`` start without it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

_OWNERS: dict[str, tuple[str, ...]] = {
    "fpr.workflows.galleries": ("GalleryInfo", "import_gallery", "curate_gallery", "list_galleries", "gallery_items",
                                "show_gallery", "delete_gallery", "build_preset_gallery", "galleries_from_source"),
    "fpr.workflows.indices": ("IndexInfo", "build_index", "list_indices", "load_index", "delete_index"),
    "fpr.workflows.runs": ("RunResult", "run_query", "run_query_encoders", "read_queries", "load_run", "report",
                           "delete_run", "run_ids", "runs_document"),
    "fpr.workflows.evaluate": ("Evaluated", "evaluate_folders"),
    "fpr.workflows.memory": ("Evaluator", "Scores"),
    "fpr.workflows.examples": ("Examples", "write_examples"),
    "fpr.workflows.difficulty": ("Difficulty", "gallery_difficulty", "indexed_difficulty", "identities_of_interest"),
    "fpr.workflows.listing": ("list_runs", "require_workspace", "run_content_version"),
    "fpr.workflows.reports": ("ReportData", "report_data", "report_document", "paper_report", "html_report",
                              "export_run", "export_document", "compare"),
    "fpr.workflows.scoring": ("score_run", "score_from_table"),
    "fpr.workflows.embeddings": ("embed",),
    "fpr.workflows.sql": ("sql",),
    "fpr.workflows.encoders": ("list_encoders", "fetch_weights", "import_weights"),
    "fpr.workflows.training": ("training_source", "train_encoder"),
    "fpr.workflows.meta": ("meta", "meta_imagenhub", "meta_claims", "encoder_claims", "claims_frame"),
    "fpr.workflows.scorers": ("list_scorers", "scorer_options"),
    "fpr.workflows.ablate": ("ablate", "ablate_backgrounds"),
    "fpr.workflows.ablate_official": ("ablate_official",),
    "fpr.workflows.filter": ("filter_queries",),
    "fpr.workflows.plan": ("plan",),
    "fpr.workflows.reproduce": ("Reproduction", "reproduce"),
    "fpr.workflows.benchmarks": ("MethodCard", "check_card", "register_benchmark", "list_benchmarks",
                                 "submit_to_benchmark", "leaderboard", "submission_history", "withdraw_submission",
                                 "get_submission", "submission_run", "submission_cards", "verify_submission",
                                 "submission_hash", "image_hashes", "check_submission_slot", "take_submission_slot",
                                 "sealed_names"),
    "fpr.workflows.refvnli": ("build_refvnli_data",),
    "fpr.workflows.trajectories": ("export_trajectories",),
    "fpr.workflows.vistar": ("VistarReport", "vistar_run", "role_report"),
    "fpr.workflows.explain": ("Explanation", "explain", "explain_queries"),
    "fpr.galleries.curate": ("GallerySpec",),
    "fpr.galleries.records": ("ImageRecord",),
    "fpr.galleries.manifest": ("read_manifest", "read_folder"),
    "fpr.encoders.registry": ("load_encoder",),
    "fpr.encoders.embed": ("embed_paths",),
    "fpr.encoders.background": ("with_background", "background_of_key"),
    "fpr.eval.relevance": ("SCOPES", "SKIP_NO_RELEVANT"),
    "fpr.eval.pipeline": ("SKIP_UNREADABLE",),
}

PUBLIC: dict[str, str] = {name: module for module, names in _OWNERS.items() for name in names}
__all__ = sorted(PUBLIC)


def __getattr__(name: str) -> Any:
    module = PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'fpr.api' has no attribute {name!r}")
    from fpr.registry import import_object

    value = import_object(f"{module}:{name}")
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(PUBLIC))


if TYPE_CHECKING:  # what editors and type checkers see (every PUBLIC name; tests/test_api.py checks); the names
    # resolve lazily at run time
    from fpr.workflows.galleries import (
        GalleryInfo, build_preset_gallery, curate_gallery, delete_gallery, galleries_from_source, gallery_items,
        import_gallery, list_galleries, show_gallery)
    from fpr.workflows.indices import IndexInfo, build_index, delete_index, list_indices, load_index
    from fpr.workflows.evaluate import Evaluated, evaluate_folders
    from fpr.workflows.memory import Evaluator, Scores
    from fpr.workflows.examples import Examples, write_examples
    from fpr.workflows.difficulty import Difficulty, gallery_difficulty, identities_of_interest, indexed_difficulty
    from fpr.workflows.explain import Explanation, explain, explain_queries
    from fpr.workflows.plan import plan
    from fpr.workflows.reproduce import Reproduction, reproduce
    from fpr.workflows.benchmarks import (
        MethodCard, check_card, check_submission_slot, get_submission, image_hashes, leaderboard, list_benchmarks,
        register_benchmark, sealed_names, submission_cards, submission_hash, submission_history, submission_run,
        submit_to_benchmark, take_submission_slot, verify_submission, withdraw_submission)
    from fpr.workflows.runs import (
        RunResult, delete_run, load_run, read_queries, report, run_ids, run_query, run_query_encoders, runs_document)
    from fpr.workflows.listing import list_runs, require_workspace, run_content_version
    from fpr.workflows.reports import (
        ReportData, compare, export_document, export_run, html_report, paper_report, report_data, report_document)
    from fpr.workflows.scoring import score_from_table, score_run
    from fpr.workflows.embeddings import embed
    from fpr.workflows.sql import sql
    from fpr.workflows.encoders import fetch_weights, import_weights, list_encoders
    from fpr.workflows.training import train_encoder, training_source
    from fpr.workflows.meta import claims_frame, encoder_claims, meta, meta_claims, meta_imagenhub
    from fpr.workflows.scorers import list_scorers, scorer_options
    from fpr.workflows.ablate import ablate, ablate_backgrounds
    from fpr.workflows.ablate_official import ablate_official
    from fpr.workflows.filter import filter_queries
    from fpr.workflows.refvnli import build_refvnli_data
    from fpr.workflows.trajectories import export_trajectories
    from fpr.workflows.vistar import VistarReport, role_report, vistar_run
    from fpr.galleries.curate import GallerySpec
    from fpr.galleries.records import ImageRecord
    from fpr.galleries.manifest import read_folder, read_manifest
    from fpr.encoders.registry import load_encoder
    from fpr.encoders.embed import embed_paths
    from fpr.encoders.background import background_of_key, with_background
    from fpr.eval.relevance import SCOPES, SKIP_NO_RELEVANT
    from fpr.eval.pipeline import SKIP_UNREADABLE
