"""``fpr reproduce``: the paper's tables (Kilrain et al., Finer-Personalization Rank: 1, 2, 5-14) in one command.

Every table is a step fpr already has, run on the ``*-official`` galleries (docs/reproduce-paper.md is the
recipe this automates):

- Table 1, oracle: the references as queries against their dataset's gallery, Sim and mAP per encoder
  (:func:`~fpr.workflows.ablate_official.ablate_official`, setting ``10x100``: the whole gallery);
- Table 14: the same with the background removed before embedding (``background="remove"``);
- Table 2, gallery sampling (WildlifeReID-10k, the specialist): ``random`` and ``kmeans`` galleries of the
  ablation gallery, and the official gallery, for the references and the generated images;
- Tables 5-13: the generated images queried under CLIP, DINO and the dataset's specialist
  (:func:`~fpr.workflows.runs.run_query_encoders`), one table per species / group
  (:func:`~fpr.workflows.reports.paper_report`'s pivot, cut to the group).

A table whose dataset folder, generated-images file or weights are missing is skipped with one line naming
what is missing and how to get it; the others run. The generated images are the user's (fpr evaluates them):
``<queries-dir>/<dataset>.csv`` in the queries-file format of the recipe (step 3).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from fpr import __version__, progress
from fpr.errors import FprError, InputError
from fpr.store import records as db
from fpr.store.workspace import Workspace


@dataclass(frozen=True)
class Dataset:
    key: str
    folder: str  # under --data-root
    gallery: str  # the *-official preset = the stored gallery's name
    specialist: str  # encoder role of its specialist column
    how: str  # where to get the folder


DATASETS: dict[str, Dataset] = {
    "wildlife": Dataset("wildlife", "wildlifereid-10k", "wildlife-official", "miewid",
                        "the WildlifeReID-10k release (metadata.csv + images/), docs/real-data.md"),
    "cub": Dataset("cub", "CUB_200_2011", "cub-official", "bioclip",
                   "the CUB-200-2011 archive (images.txt, classes.txt, ...), docs/real-data.md"),
    "cars": Dataset("cars", "Stanford-Cars", "cars-official", "cars",
                    "the Hugging Face snapshot of Donghyun99/Stanford-Cars, docs/real-data.md"),
}
ABLATION_GALLERY = "wildlife-official-ablation"
# encoder role -> default encoder id; the Cars specialist is one a user trains (fpr encoders train), no default
DEFAULT_ENCODERS: dict[str, str | None] = {"clip": "clip-vit-b-32", "dino": "dinov2-vitb14", "miewid": "miewid-msv2",
                                           "bioclip": "bioclip-2", "cars": None}
ROLE_LABELS = {"clip": "CLIP", "dino": "DINO", "miewid": "MiewID", "bioclip": "BioCLIP", "cars": "SP-Cars"}
# paper table -> (dataset, group) for the per-group result tables; group None = every group of the dataset
GROUP_TABLES: dict[int, tuple[str, str | None]] = {
    5: ("wildlife", "leopard"), 6: ("wildlife", "cow"), 7: ("wildlife", "zebra"), 8: ("wildlife", "tiger"),
    9: ("wildlife", "giraffe"), 10: ("cub", "sparrow"), 11: ("cub", "tern"), 12: ("cub", "wren"), 13: ("cars", None)}
TITLES = {1: "Oracle: references as queries against the gallery", 2: "Gallery sampling (WildlifeReID-10k)",
          14: "Oracle with the background removed"}
ALL_TABLES = (1, 2, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)
ORACLE_SETTING = "10x100"  # the query identities, every gallery image: the plain released baseline


class Missing(Exception):
    """A table's input that is not there: its one line says what and how to get it."""


@dataclass
class Table:
    number: int
    title: str
    status: str  # "done" | "skipped"
    missing: str = ""
    text: str = ""
    latex: str = ""
    records: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict:
        return {"table": self.number, "title": self.title, "status": self.status, "missing": self.missing or None,
                "notes": self.notes, "records": self.records}


@dataclass
class Reproduction:
    tables: list[Table]
    provenance: dict
    out: str | None

    def as_json(self) -> dict:
        return {"schema": "fpr.reproduce/1", "provenance": self.provenance,
                "tables": [t.as_json() for t in self.tables], "out": self.out}


def parse_tables(text: str | Sequence[int] | None) -> list[int]:
    """``"1,2,5-14"`` -> [1, 2, 5, ..., 14] (the paper's tables fpr reproduces; 3 and 4 are hyperparameters)."""
    if text is None:
        return list(ALL_TABLES)
    parts = [p.strip() for p in text.split(",")] if isinstance(text, str) else [str(p) for p in text]
    out: list[int] = []
    for p in filter(None, parts):
        try:
            lo, hi = (int(x) for x in p.split("-")) if "-" in p else (int(p), int(p))
        except ValueError:
            raise InputError(f"--tables takes numbers and ranges like 1,2,5-14, got '{p}'") from None
        for n in range(lo, hi + 1):
            if n not in ALL_TABLES:
                raise InputError(f"table {n} is not one fpr reproduces", hint="the paper's tables 1, 2 and 5-14")
            if n not in out:
                out.append(n)
    if not out:
        raise InputError("--tables names no table", hint="e.g. --tables 1,2,5-14")
    return out


def parse_encoders(pairs: Sequence[str] | dict | None) -> dict[str, str | None]:
    """``["cars=my-cars-encoder", ...]`` over the defaults (roles: clip, dino, miewid, bioclip, cars)."""
    out = dict(DEFAULT_ENCODERS)
    items = pairs.items() if isinstance(pairs, dict) else [p.split("=", 1) if "=" in p else (p, None)
                                                           for p in (pairs or ())]
    for role, enc in items:
        if role not in out or not enc:
            raise InputError(f"--encoder takes ROLE=ENCODER with ROLE one of {', '.join(out)}, got '{role}'",
                             hint="e.g. --encoder cars=my-cars-encoder")
        out[role] = enc
    return out


# --------------------------------------------------------------------------- what is there
class Inputs:
    """The data root, the encoders and the workspace one reproduction reads; each ``need_*`` raises
    :class:`Missing` with the line a skipped table prints."""

    def __init__(self, data_root: Path, queries_dir: Path, encoders: dict, workspace, device: str):
        self.data_root, self.queries_dir, self.encoders = data_root, queries_dir, encoders
        self.workspace, self.device = workspace, device
        self.checksums: dict[str, str | None] = {}
        self.galleries: dict[str, str] = {}

    def need_encoder(self, role: str) -> str:
        from fpr.encoders.registry import describe, get_spec

        enc = self.encoders[role]
        if enc is None:
            raise Missing(f"no {ROLE_LABELS[role]} encoder: train one on Stanford Cars (fpr encoders train) and "
                          f"pass --encoder {role}=<its id>")
        try:
            row = describe(get_spec(enc))
        except FprError as e:
            raise Missing(f"encoder '{enc}' ({ROLE_LABELS[role]}): {e.one_line()}") from None
        if row["status"] != "available":
            raise Missing(f"weights of {enc} ({ROLE_LABELS[role]}) not found; get them: fpr encoders fetch {enc} "
                          "(docs/real-data.md moves them to an offline machine)")
        self.checksums[enc] = row["checksum"]
        return enc

    def need_gallery(self, ds: Dataset, preset: str | None = None) -> str:
        from fpr.workflows.galleries import build_preset_gallery

        preset = preset or ds.gallery
        if preset in self.galleries:
            return preset
        root = self.data_root / ds.folder
        if not root.is_dir():
            raise Missing(f"dataset folder {root} not found: put {ds.how} there")
        ws = Workspace.open(self.workspace)
        if db.gallery_exists(ws, preset):
            progress.log(f"using the stored gallery {preset} (delete it to rebuild from {root})")
        else:
            try:
                build_preset_gallery(preset, root, workspace=self.workspace)
            except FprError as e:
                raise Missing(f"{root} cannot be read as {preset}: {e.one_line()}") from None
        self.galleries[preset] = db.get_gallery(Workspace.open(self.workspace), preset).fingerprint
        return preset

    def need_queries(self, ds: Dataset) -> Path:
        path = self.queries_dir / f"{ds.key}.csv"
        if not path.is_file():
            raise Missing(f"generated images of {ds.key} not found: write {path} (one row per generated image: "
                          "path, identity, group, method, prompt; docs/reproduce-paper.md step 3)")
        return path


# --------------------------------------------------------------------------- the tables
def _oracle_rows(inp: Inputs, background: str) -> tuple[list[dict], list[str]]:
    """Table 1 / 14: per dataset and encoder, the baseline (references as queries) over the whole gallery."""
    from fpr.workflows.ablate_official import ablate_official

    rows, notes = [], []
    for ds in DATASETS.values():
        try:
            gallery = inp.need_gallery(ds)
        except Missing as m:
            notes.append(f"{ds.key}: {m}")
            continue
        for role in ("clip", "dino", ds.specialist):
            try:
                enc = inp.need_encoder(role)
            except Missing as m:
                notes.append(f"{ds.key} {ROLE_LABELS[role]}: {m}")
                continue
            res = ablate_official(gallery, enc, settings=ORACLE_SETTING, selection=[], workspace=inp.workspace,
                                  device=inp.device, store=False, background=background)
            star = res.rows[(res.rows["group"] == "*") & (res.rows["method"] == "*")].iloc[0]
            rows.append({"dataset": ds.key, "encoder": ROLE_LABELS[role], "encoder_id": enc,
                         "sim": float(star["baseline_sim"]), "map": float(star["baseline_map"]),
                         "queries": int(star["baseline_n"])})
    if not rows:
        raise Missing("; ".join(notes))
    return rows, notes


def _sampling_rows(inp: Inputs) -> tuple[list[dict], list[str]]:
    """Table 2: random and k-means galleries (the ablation gallery) and the official gallery, for the references
    (oracle) and the generated images (mean over methods), under the Re-ID specialist."""
    from fpr.workflows.ablate_official import ablate_official

    ds = DATASETS["wildlife"]
    enc = inp.need_encoder(ds.specialist)
    queries = inp.need_queries(ds)
    official = inp.need_gallery(ds)
    ablation = inp.need_gallery(ds, ABLATION_GALLERY)
    common = dict(workspace=inp.workspace, device=inp.device, store=False)
    sel = ablate_official(ablation, enc, queries, settings=ORACLE_SETTING, cluster_encoder=enc, **common).rows
    own = ablate_official(official, enc, queries, settings=ORACLE_SETTING, selection=[], **common).rows
    rows = []
    for label, df, variant in (("random", sel, "random-k10"), ("k-means", sel, "kmeans-k10"),
                               ("official", own, f"n{ORACLE_SETTING.replace('x', '-m')}")):
        star = df[(df["variant"] == variant) & (df["group"] == "*") & (df["method"] == "*")].iloc[0]
        rows.append({"sampling": label, "oracle_map": float(star["baseline_map"]),
                     "oracle_sim": float(star["baseline_sim"]), "generated_map": float(star["generated_map"]),
                     "generated_sim": float(star["generated_sim"]), "gallery_images": int(star["gallery_images"])})
    return rows, [f"encoder {enc}; k-means on {enc}'s raw features"]


def _group_runs(inp: Inputs, dataset: str, cache: dict) -> tuple:
    """The dataset's generated images under CLIP, DINO and its specialist: one multi-encoder run, its pivot."""
    from fpr.workflows.reports import paper_report
    from fpr.workflows.runs import run_query_encoders

    if dataset in cache:
        return cache[dataset]
    ds = DATASETS[dataset]
    gallery = inp.need_gallery(ds)  # the dataset folder first: without it the queries file is moot
    queries = inp.need_queries(ds)
    encs, notes = [], []
    for role in ("clip", "dino", ds.specialist):
        try:
            encs.append((role, inp.need_encoder(role)))
        except Missing as m:
            notes.append(f"{ROLE_LABELS[role]} column left out: {m}")
    if not encs:
        raise Missing("; ".join(notes))
    scorers = ["clip-t"] if ("clip", DEFAULT_ENCODERS["clip"]) in encs else []
    if not scorers:
        notes.append(f"CLIP-T column left out: it needs {DEFAULT_ENCODERS['clip']}'s weights")
    run = f"reproduce-{dataset}"
    run_query_encoders(gallery, [e for _, e in encs], queries, run=run, workspace=inp.workspace, overwrite=True,
                       device=inp.device, scorers=scorers)
    cache[dataset] = (paper_report(run, workspace=inp.workspace), notes)
    return cache[dataset]


def _group_table(number: int, inp: Inputs, cache: dict) -> Table:
    from fpr.render import paper as rep

    dataset, group = GROUP_TABLES[number]
    (data, p), notes = _group_runs(inp, dataset, cache)
    keep = [g for g in p.groups if g == group] if group else list(p.groups)
    if not keep:
        raise Missing(f"no queries of group '{group}' in {inp.queries_dir / (dataset + '.csv')} "
                      f"(groups there: {', '.join(g for g in p.groups if g != rep.OVERALL)})")
    sub = rep.Pivot(keep, p.methods, p.columns, {k: v for k, v in p.cells.items() if k[0] in keep},
                    {k: v for k, v in p.n_queries.items() if k[0] in keep})
    title = f"{dataset}: {group}" if group else f"{dataset}: every group"
    return Table(number, title, "done", text=rep.render(sub, "table"), latex=rep.render(sub, "latex"),
                 records=sub.records(), notes=notes)


def _rows_table(number: int, rows: list[dict], notes: list[str]) -> Table:
    from fpr.render.cells import render_rows, rows_latex

    cols = list(rows[0])
    return Table(number, TITLES[number], "done", text=render_rows(_rounded(rows), "table", cols),
                 latex=rows_latex(_rounded(rows), cols, caption=f"Table {number}: {TITLES[number]} (fpr reproduce)."),
                 records=rows, notes=notes)


def _rounded(rows: list[dict]) -> list[dict]:
    return [{k: (f"{v:.3f}" if isinstance(v, float) and math.isfinite(v) else v) for k, v in r.items()} for r in rows]


def _one(number: int, inp: Inputs, cache: dict) -> Table:
    if number in GROUP_TABLES:
        return _group_table(number, inp, cache)
    build: dict[int, Callable[[], tuple[list[dict], list[str]]]] = {
        1: lambda: _oracle_rows(inp, "keep"), 14: lambda: _oracle_rows(inp, "remove"), 2: lambda: _sampling_rows(inp)}
    rows, notes = build[number]()
    return _rows_table(number, rows, notes)


# --------------------------------------------------------------------------- the command
def reproduce(tables: str | Sequence[int] | None = None, *, data_root: str | Path = ".",
              queries_dir: str | Path | None = None, out: str | Path | None = None,
              encoders: Sequence[str] | dict | None = None, workspace: str | Path | None = None,
              device: str = "auto", command: str | None = None) -> Reproduction:
    """Run every asked-for table whose inputs are there, skip the others with one line each, and (with ``out``)
    write ``tables.json``, ``tables.txt`` and ``tables.tex`` there."""
    numbers = parse_tables(tables)
    root = Path(data_root)
    inp = Inputs(root, Path(queries_dir) if queries_dir else root / "generated", parse_encoders(encoders),
                 workspace, device)
    done: list[Table] = []
    cache: dict = {}
    for n in numbers:
        title = TITLES.get(n) or "{}: {}".format(*GROUP_TABLES[n])
        try:
            done.append(_one(n, inp, cache))
        except Missing as m:
            done.append(Table(n, title, "skipped", missing=str(m)))
    result = Reproduction(done, provenance(inp, command), str(out) if out else None)
    if out:
        write_outputs(result, Path(out))
    return result


def provenance(inp: Inputs, command: str | None) -> dict:
    from fpr.keys import utc_now

    return {"fpr_version": __version__, "git_commit": git_commit(), "command": command or " ".join(sys.argv),
            "created": utc_now(), "data_root": str(inp.data_root), "queries_dir": str(inp.queries_dir),
            "dataset_fingerprints": dict(inp.galleries), "encoder_checksums": dict(inp.checksums),
            "encoders": {k: v for k, v in inp.encoders.items() if v}}


def git_commit(start: Path | None = None) -> str | None:
    """The commit fpr's own source tree is checked out at (None outside a git checkout); read from the files,
    so no git binary is needed."""
    here = (start or Path(__file__)).resolve()
    for folder in [here, *here.parents]:
        dot = folder / ".git"
        if dot.is_file():  # a worktree: "gitdir: <path>"
            dot = Path(dot.read_text().split(":", 1)[1].strip())
        if dot.is_dir():
            return _resolve_head(dot)
    return None


def _resolve_head(gitdir: Path) -> str | None:
    head = (gitdir / "HEAD").read_text().strip()
    if not head.startswith("ref:"):
        return head
    ref = head.split(":", 1)[1].strip()
    common = gitdir / "commondir"
    bases = [gitdir] + ([(gitdir / common.read_text().strip()).resolve()] if common.is_file() else [])
    for base in bases:
        if (base / ref).is_file():
            return (base / ref).read_text().strip()
        packed = base / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                if line.endswith(" " + ref):
                    return line.split()[0]
    return None


def render_text(result: Reproduction) -> str:
    """The terminal's view: each table that ran, then one line per skipped table."""
    out = []
    for t in result.tables:
        if t.status == "done":
            out += [f"Table {t.number}: {t.title}", t.text] + [f"  note: {n}" for n in t.notes] + [""]
    out += [f"Table {t.number} skipped: {t.missing}" for t in result.tables if t.status == "skipped"]
    p = result.provenance
    out.append(f"fpr {p['fpr_version']}" + (f" (commit {p['git_commit'][:12]})" if p["git_commit"] else "")
               + f"; datasets {', '.join(f'{k} {v[:12]}' for k, v in p['dataset_fingerprints'].items()) or 'none'}")
    return "\n".join(out)


def write_outputs(result: Reproduction, out: Path) -> None:
    from fpr.files import atomic_write_text, ensure_dir
    from fpr.render.cells import dumps

    ensure_dir(out)
    atomic_write_text(out / "tables.json", dumps(result.as_json()))
    atomic_write_text(out / "tables.txt", render_text(result) + "\n")
    tex = [f"% fpr reproduce: {result.provenance['command']}"]
    tex += [f"% Table {t.number}: {t.title}\n{t.latex}" for t in result.tables if t.status == "done"]
    tex += [f"% Table {t.number} skipped: {t.missing}" for t in result.tables if t.status == "skipped"]
    atomic_write_text(out / "tables.tex", "\n\n".join(tex) + "\n")
