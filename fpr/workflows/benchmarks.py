"""Sealed benchmarks: an operator registers an index (gallery + encoder) and a protocol; submitters' generations
are scored by :func:`fpr.workflows.runs.run_query` (what ``fpr query`` calls) and ranked on a leaderboard.

The gallery never leaves the server: nothing here returns a gallery path or image, only the gallery's
fingerprint, the encoder's checksum and the scores. A submission is pinned by its **submission hash**
(:func:`submission_hash`): the SHA-256 of the canonical JSON of the sorted ``(relative path, image sha256)``
list of the images its queries table names, the gallery fingerprint, the encoder checksum and fpr's version,
so anyone holding the images recomputes it (:func:`verify_submission`). A withdrawn row is hidden from the
leaderboard and kept in the history with who, when and why. The per-token daily limit
(:func:`take_submission_slot`) is counted in the store. Retrieval cards are served redacted
(:func:`submission_cards`: identities, ranks and scores, no gallery path or image).
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import fpr
from fpr import keys
from fpr.errors import ConflictError, InputError, LimitError, NotFoundError
from fpr.images import IMAGE_SUFFIXES
from fpr.metrics.headroom import ap_one_share
from fpr.scorers import parse_scorer_list
from fpr.store import benchmarks as bdb
from fpr.store import records as db
from fpr.store.records import check_name
from fpr.store.workspace import Workspace
from fpr.tables import read_table, resolve_path
from fpr.workflows.runs import RunResult, run_query

if TYPE_CHECKING:
    import pandas as pd

COPY_PASTE = "copy-paste"
CARD_FIELDS = ("method", "description", "link", "params")
MAX_DESCRIPTION = 2000
MAX_LINK = 500
MAX_PARAMS = 8192
LINK_RE = re.compile(r"https?://[!-~]+")
QUERY_COLUMNS = ("path", "identity", "group")  # the method column is the card's method
# What a submitter may see of a row (never the run's image folder, never a gallery path).
PUBLIC_KEYS = ("submission_id", "benchmark", "method", "description", "link", "params", "submitter", "created_at",
               "map", "map_lo", "map_hi", "ap_one_share", "copy_paste_rate", "sim", "n_queries", "n_evaluated",
               "n_images", "submission_hash", "gallery_fingerprint", "weights_checksum", "fpr_version")
WITHDRAWAL_KEYS = ("withdrawn_by", "withdrawn_at", "withdrawn_reason")


@dataclass(frozen=True)
class MethodCard:
    """What a submitter says about the method: a name (a method name), a description, a link, optional params."""

    method: str
    description: str
    link: str = ""
    params: dict = field(default_factory=dict)


def _text(value: str, name: str, limit: int, what: str = "method card field") -> str:
    if len(value) > limit:
        raise InputError(f"{what} '{name}' is longer than {limit} characters")
    if any(ord(c) < 32 and c not in "\t" for c in value):
        raise InputError(f"{what} '{name}' holds a control character (one line of text)")
    return value


def check_card(fields: dict) -> MethodCard:
    """A :class:`MethodCard` from text fields (``params``: a JSON object, as text or a dict), or one-line errors."""
    unknown = sorted(set(fields) - set(CARD_FIELDS))
    if unknown:
        raise InputError(f"unknown method card field '{unknown[0][:40]}'", hint=f"fields: {', '.join(CARD_FIELDS)}")
    method = check_name(str(fields.get("method") or "").strip(), "method")
    description = _text(str(fields.get("description") or "").strip(), "description", MAX_DESCRIPTION)
    if not description:
        raise InputError("method card field 'description' is required", hint="one line saying what the method is")
    link = _text(str(fields.get("link") or "").strip(), "link", MAX_LINK)
    if link and not LINK_RE.fullmatch(link):
        raise InputError("method card field 'link' must be an http:// or https:// URL without spaces")
    params = fields.get("params") or {}
    if isinstance(params, str):
        _text(params.replace("\n", " ").replace("\r", " "), "params", MAX_PARAMS)
        try:
            params = json.loads(params) if params.strip() else {}
        except ValueError as exc:
            raise InputError(f"method card field 'params' is not JSON ({str(exc).splitlines()[0][:80]})",
                             hint='send a JSON object such as {"steps": 50}') from None
    if not isinstance(params, dict):
        raise InputError("method card field 'params' must be a JSON object", hint='e.g. {"steps": 50}')
    return MethodCard(method, description, link, params)


# --------------------------------------------------------------------------- registration

def register_benchmark(name: str, index: str, *, scope: str = "group", scorers: Sequence[str] | str = (),
                       by: str = "local", workspace: str | Path | None = None, overwrite: bool = False) -> dict:
    """Register ``index`` (its gallery and encoder) as the sealed benchmark ``name`` with ranking ``scope`` and
    auxiliary ``scorers`` (such as ``copy-paste``); returns its public row."""
    from fpr.eval.relevance import check_scope

    check_name(name, "benchmark")
    check_scope(scope)
    scorer_names = parse_scorer_list(scorers)
    ws = Workspace.open(workspace)
    row = db.get_index(ws, index)
    bdb.store_benchmark(ws, {"name": name, "index_name": index, "gallery": row.gallery, "encoder": row.encoder,
                             "scope": scope, "scorers": scorer_names, "gallery_fingerprint": row.gallery_fingerprint,
                             "weights_checksum": row.weights_checksum, "created_by": by}, overwrite=overwrite)
    return public_benchmark(bdb.get_benchmark(ws, name))


def public_benchmark(row: dict) -> dict:
    """A benchmark as anyone may see it: no gallery name (a folder's name, often) and no index internals."""
    return {k: row.get(k) for k in ("name", "encoder", "scope", "scorers", "gallery_fingerprint", "weights_checksum",
                                    "created_at", "n_submissions")}


def list_benchmarks(*, workspace: str | Path | None = None) -> list[dict]:
    return [public_benchmark(b) for b in bdb.list_benchmarks(Workspace.open(workspace))]


def sealed_names(*, workspace: str | Path | None = None) -> dict[str, set[str]]:
    """``{"indices": ..., "galleries": ...}`` that sealed benchmarks use (what the service hides from non-admins)."""
    rows = bdb.list_benchmarks(Workspace.open(workspace))
    return {"indices": {b["index_name"] for b in rows}, "galleries": {b["gallery"] for b in rows}}


# --------------------------------------------------------------------------- images and their hash

def image_hashes(folder: str | Path, names: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """Sorted (name, sha256) of the images ``names`` (relative to ``folder``, or absolute); without ``names``, of
    every image file under ``folder`` (by suffix, hidden parts skipped). A named file that is missing has the
    sha256 ``''`` (it can match no published hash)."""
    root = Path(folder)
    if not root.is_dir():
        raise NotFoundError("no such folder of images", where=str(root))
    if names is None:
        rel = [p.relative_to(root) for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
        names = [r.as_posix() for r in rel if not any(part.startswith(".") for part in r.parts)]
    out = []
    for name in sorted(set(names)):
        path = root / name
        out.append((name, keys.file_sha256(path) if path.is_file() else ""))
    return out


def table_images(df: pd.DataFrame) -> list[str]:
    """The images a queries table names (``path`` and every ``reference_paths`` entry), as written."""
    names = [str(v).strip() for v in df["path"]]
    if "reference_paths" in df.columns:
        names += [p.strip() for v in df["reference_paths"].fillna("") for p in str(v).split(";") if p.strip()]
    return sorted(set(names))


def submission_hash(images: Sequence[Sequence[str]], gallery_fingerprint: str, weights_checksum: str,
                    version: str) -> str:
    """SHA-256 hex of the canonical JSON (:func:`fpr.keys.fingerprint`) of the sorted ``(path, sha256)`` pairs, the
    gallery fingerprint, the encoder checksum and fpr's version."""
    return keys.fingerprint({"images": sorted([str(p), str(h)] for p, h in images),
                             "gallery_fingerprint": gallery_fingerprint, "weights_checksum": weights_checksum,
                             "fpr_version": version})


def verify_submission(submission: str | dict, folder: str | Path, *, workspace: str | Path | None = None) -> dict:
    """Recompute a submission's hash from the images in ``folder``: ``submission`` is an id (looked up in the
    workspace) or its row as published (``GET /v1/submissions/{id}``). ``match`` says whether it is the row's."""
    row = submission if isinstance(submission, dict) else public_submission(_submission(
        Workspace.open(workspace), submission), with_images=True)
    missing = [k for k in ("submission_hash", "gallery_fingerprint", "weights_checksum", "fpr_version") if
               not row.get(k)]
    if missing:
        raise InputError(f"the submission row lacks {', '.join(missing)}", hint="pass the JSON of GET "
                                                                                "/v1/submissions/<id>")
    published = [p for p, _ in row.get("images") or []] or None  # a row without its list: every image there
    images = image_hashes(folder, published)
    computed = submission_hash(images, row["gallery_fingerprint"], row["weights_checksum"], row["fpr_version"])
    out = {"submission_id": row.get("submission_id"), "expected": row["submission_hash"], "computed": computed,
           "match": computed == row["submission_hash"], "n_images": len(images)}
    if not out["match"] and row.get("images"):
        published, local = dict(map(tuple, row["images"])), dict(images)
        out["differing"] = sorted(p for p in set(published) | set(local) if published.get(p) != local.get(p))[:20]
    return out


# --------------------------------------------------------------------------- submitting

def day_of(stamp: str) -> str:
    return stamp[:10]


def _next_day(day: str) -> str:
    start = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=timezone.utc) + timedelta(days=1)
    return start.strftime("%Y-%m-%dT%H:%M:%SZ")


def _limit_error(limit: int, day: str) -> LimitError:
    return LimitError(f"this token has made its {limit} benchmark submission(s) for {day} (UTC); the limit resets "
                      f"at {_next_day(day)}", hint="FPR_BENCHMARK_DAILY_SUBMISSIONS sets it")


def check_submission_slot(holder: str, limit: int, *, workspace: str | Path | None = None) -> int:
    """How many submissions ``holder`` made today; LimitError (naming when it resets) at ``limit``."""
    day = day_of(keys.utc_now())
    used = bdb.quota_used(Workspace.open(workspace), holder, day)
    if used >= limit:
        raise _limit_error(limit, day)
    return used


def take_submission_slot(holder: str, limit: int, *, workspace: str | Path | None = None) -> int:
    """Count one submission of ``holder`` today (in the store, one transaction); LimitError at ``limit``."""
    day = day_of(keys.utc_now())
    used = bdb.take_quota(Workspace.open(workspace), holder, day, limit)
    if used is None:
        raise _limit_error(limit, day)
    return used


def _queries(df: pd.DataFrame, method: str, images_root: Path) -> pd.DataFrame:
    """The submitted queries table with the card's method and paths resolved against ``images_root``."""
    df = df.copy()
    df["method"] = method
    df["path"] = [resolve_path(str(v).strip(), images_root) for v in df["path"]]
    if "reference_paths" in df.columns:
        df["reference_paths"] = [";".join(resolve_path(p.strip(), images_root) for p in str(v or "").split(";")
                                          if p.strip()) for v in df["reference_paths"].fillna("")]
    return df


def results_row(result: RunResult, method: str, copy_paste: bool) -> dict:
    """The leaderboard numbers of a run: its summary row of ``method`` over every group (as ``fpr query`` prints it),
    the share of evaluated queries with AP = 1 and, when the benchmark runs it, the copy-paste flag rate."""
    rows = [r for r in result.summary_records() if r["method"] == method and r["group"] == "*"]
    if not rows:
        raise InputError(f"the run has no evaluated query of method '{method}'")
    s = rows[0]
    out = {k: s.get(k) for k in ("map", "map_lo", "map_hi", "sim", "n_queries")}
    out["n_evaluated"] = int((result.per_query["status"] == "ok").sum())
    out["ap_one_share"] = ap_one_share(result.per_query).get(method)
    out["copy_paste_rate"] = s.get(f"{COPY_PASTE}.flag") if copy_paste else None
    return out


def submit_to_benchmark(benchmark: str, queries: str | Path, *, card: MethodCard | dict,
                        images_root: str | Path | None = None, submitter: str = "local", token_id: str | None = None,
                        submission: str | None = None, run: str | None = None,
                        workspace: str | Path | None = None, device: str = "auto") -> dict:
    """Score generations on a sealed benchmark with :func:`run_query` and store the submission; returns its public
    row. ``queries``: path, identity, group[, prompt, reference_paths, query_id] (the card names the method); image
    paths are relative to ``images_root`` (default: the table's folder); the images it names are hashed."""
    card = card if isinstance(card, MethodCard) else check_card(card)
    ws = Workspace.open(workspace)
    bench = bdb.get_benchmark(ws, benchmark)
    index = db.get_index(ws, bench["index_name"])
    if (index.gallery_fingerprint, index.weights_checksum) != (bench["gallery_fingerprint"],
                                                               bench["weights_checksum"]):
        raise ConflictError(f"benchmark '{benchmark}': its index was rebuilt since it was registered (another gallery "
                            "or encoder); no submission is scored against a different benchmark",
                            hint="the operator registers it again (fpr benchmark register --overwrite)")
    root = Path(images_root) if images_root is not None else Path(queries).resolve().parent
    sid = check_name(submission, "submission") if submission else keys.new_id("sub", random_hex=6)
    run_id = run or f"bench-{sid}"
    table = read_table(Path(queries), required=QUERY_COLUMNS, what="queries file")
    images = image_hashes(root, table_images(table))
    missing = [name for name, digest in images if not digest]
    if missing:
        raise InputError(f"the queries table names {len(missing)} image(s) that are not there, e.g. "
                         f"'{missing[0][:120]}'", where=str(queries), hint="paths are relative to the images folder")
    res = run_query(bench["index_name"], _queries(table, card.method, root), run=run_id, workspace=ws.root,
                    scope=bench["scope"], scorers=bench["scorers"], device=device)
    version = fpr.__version__
    row = {"submission_id": sid, "benchmark": benchmark, "run_id": res.run_id, "method": card.method,
           "card": asdict(card), "submitter": submitter, "token_id": token_id, "images": [list(i) for i in images],
           "gallery_fingerprint": bench["gallery_fingerprint"], "weights_checksum": bench["weights_checksum"],
           "fpr_version": version,
           "submission_hash": submission_hash(images, bench["gallery_fingerprint"], bench["weights_checksum"],
                                              version),
           "results": results_row(res, card.method, COPY_PASTE in bench["scorers"]), "created_at": keys.utc_now()}
    bdb.store_submission(ws, row)
    return public_submission(row)


# --------------------------------------------------------------------------- reading, withdrawing

def public_submission(row: dict, *, with_images: bool = False, with_withdrawal: bool = False) -> dict:
    """A stored submission as anyone may see it (the card, the numbers, the hash and what it pins)."""
    flat = {**row, **(row.get("card") or {}), **(row.get("results") or {}), "n_images": len(row.get("images") or [])}
    out = {k: flat.get(k) for k in PUBLIC_KEYS}
    if with_images:
        out["images"] = row.get("images") or []
    if with_withdrawal:
        out.update({k: row.get(k) for k in WITHDRAWAL_KEYS})
    return out


def _submission(ws: Workspace, submission_id: str) -> dict:
    rows = bdb.submissions(ws, submission_id=submission_id)
    if not rows:
        raise NotFoundError(f"no submission named '{submission_id[:80]}'")
    return rows[0]


def get_submission(submission_id: str, *, workspace: str | Path | None = None) -> dict:
    """One submission (withdrawn ones too, with who, when and why), with its images' hashes."""
    return public_submission(_submission(Workspace.open(workspace), submission_id), with_images=True,
                             with_withdrawal=True)


def submission_run(submission_id: str, *, workspace: str | Path | None = None) -> str:
    """The run id that holds a submission's per-query rows."""
    return _submission(Workspace.open(workspace), submission_id)["run_id"]


def submission_cards(submission_id: str, *, workspace: str | Path | None = None) -> list[dict]:
    """A submission's retrieval cards, redacted: per query its id, identity, group, AP and its stored top-k as
    (rank, identity, score, relevant). Never a gallery path, file name, item id or image."""
    from fpr.eval.relevance import gallery_items

    ws = Workspace.open(workspace)
    sub = _submission(ws, submission_id)
    gallery = bdb.get_benchmark(ws, sub["benchmark"])["gallery"]
    identity = {it.item_id: it.identity for it in gallery_items(ws, gallery)}
    stored, _ = db.run_tables(ws, sub["run_id"])
    ranks = db.run_rankings(ws, sub["run_id"])
    top = {qid: [{"rank": int(r.rank), "identity": identity.get(int(r.item_id)), "score": float(r.score),
                  "relevant": bool(r.relevant)} for r in g.itertuples()] for qid, g in ranks.groupby("query_id")}
    return [{"query_id": q.query_id, "identity": q.identity, "group": q.group_name, "status": q.status,
             "ap": None if q.ap != q.ap else float(q.ap), "top": top.get(q.query_id, [])}
            for q in stored.itertuples()]


def _rank_key(row: dict) -> tuple:
    value = row.get("map")
    return (value is None or value != value, -(value or 0.0), row.get("created_at") or "", row["submission_id"])


def leaderboard(benchmark: str, *, workspace: str | Path | None = None) -> dict:
    """The benchmark and its ranked rows (by mAP, then the earlier submission): withdrawn rows left out."""
    ws = Workspace.open(workspace)
    bench = public_benchmark(bdb.get_benchmark(ws, benchmark))
    rows = [public_submission(r) for r in bdb.submissions(ws, benchmark) if r.get("withdrawn_at") is None]
    rows.sort(key=_rank_key)
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return {"benchmark": bench, "rows": rows}


def submission_history(benchmark: str, *, workspace: str | Path | None = None) -> list[dict]:
    """Every submission of the benchmark, oldest first, withdrawn ones with who withdrew them, when and why."""
    ws = Workspace.open(workspace)
    bdb.get_benchmark(ws, benchmark)
    return [public_submission(r, with_withdrawal=True) for r in bdb.submissions(ws, benchmark)]


def withdraw_submission(submission_id: str, *, reason: str, by: str = "local",
                        workspace: str | Path | None = None) -> dict:
    """Hide a row from the leaderboard; it stays in the history with ``by``, the time and ``reason``."""
    reason = _text(str(reason or "").strip(), "reason", MAX_DESCRIPTION, what="withdrawal")
    if not reason:
        raise InputError("a withdrawal needs a reason", hint="say why in one line (--reason)")
    ws = Workspace.open(workspace)
    bdb.withdraw_submission(ws, submission_id, by=by, at=keys.utc_now(), reason=reason)
    return get_submission(submission_id, workspace=ws.root)
