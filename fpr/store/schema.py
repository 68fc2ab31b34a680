"""Every table of the workspace, declared once.

A column is declared here and nowhere else: the DDL of a new workspace, the
migrations of an old one, the insert of a run, the export, the per-query
metrics a summary averages and the names a filter keep-rule may use all derive
from these declarations. The per-query metric columns of ``query_results`` come from
``fpr.metrics.specs.PER_QUERY_METRICS``: adding one is a ``MetricSpec`` there plus
one :class:`AddColumn` migration here.

Versions: the workspace records ``meta.schema_version``. Version 1 is the schema
written by fpr 0.1.0. :data:`MIGRATIONS` holds the ordered steps from each
version to the next; :data:`SCHEMA_VERSION` is the newest. A new workspace is
created directly at the newest version from the declarations; an old one is
migrated step by step (tests check both end in the same schema).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from fpr.metrics.specs import PER_QUERY_METRICS, MetricSpec


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    default: str | None = None  # SQL default expression
    metric: MetricSpec | None = None  # a per-query metric (declared in fpr/metrics/specs.py)
    export: bool = True  # part of `fpr export`

    def ddl(self) -> str:
        return f'"{self.name}" {self.type}' + (f" DEFAULT {self.default}" if self.default else "")


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()
    description: str = ""

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"table {self.name} declares no column {name!r}")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def ddl(self) -> str:
        parts = [c.ddl() for c in self.columns]
        if self.primary_key:
            parts.append("PRIMARY KEY (" + ", ".join(f'"{k}"' for k in self.primary_key) + ")")
        return f"CREATE TABLE {self.name} (" + ", ".join(parts) + ")"


NOW = "current_timestamp"


def build_tables(metrics: tuple[MetricSpec, ...] = PER_QUERY_METRICS) -> dict[str, Table]:
    """Every table, its ``query_results`` metric columns from ``metrics`` (the declarations)."""
    return {t.name: t for t in (
        Table("meta", (Column("key", "VARCHAR"), Column("value", "VARCHAR")), ("key",),
              "schema version and other workspace facts"),
        Table("galleries", (
            Column("name", "VARCHAR"), Column("source", "VARCHAR"), Column("spec", "JSON"),
            Column("fingerprint", "VARCHAR"), Column("n_items", "INTEGER"), Column("n_reference", "INTEGER"),
            Column("n_gallery", "INTEGER"), Column("n_identities", "INTEGER"), Column("n_groups", "INTEGER"),
            Column("report", "JSON"), Column("created_at", "TIMESTAMP", NOW)), ("name",),
            "one row per stored gallery"),
        Table("gallery_items", (
            Column("gallery", "VARCHAR"), Column("item_id", "INTEGER"), Column("path", "VARCHAR"),
            Column("content_hash", "VARCHAR"), Column("identity", "VARCHAR"), Column("group_name", "VARCHAR"),
            Column("role", "VARCHAR")), ("gallery", "item_id"),
            "images of a gallery: role 'gallery' (ranked) or 'reference' (prompts the generator, never ranked)"),
        Table("indices", (
            Column("name", "VARCHAR"), Column("gallery", "VARCHAR"), Column("encoder", "VARCHAR"),
            Column("weights_checksum", "VARCHAR"), Column("gallery_fingerprint", "VARCHAR"), Column("dim", "INTEGER"),
            Column("n_items", "INTEGER"),
            Column("path", "VARCHAR"),  # folder of the current version, relative to the workspace
            Column("card", "JSON"), Column("created_at", "TIMESTAMP", NOW),
            Column("version", "VARCHAR")),  # '' for a 0.1.0 index (files directly in indices/<name>/)
            ("name",), "the pointer row of each index: which version folder is current"),
        Table("runs", (
            Column("run_id", "VARCHAR"), Column("index_name", "VARCHAR"), Column("gallery", "VARCHAR"),
            Column("encoder", "VARCHAR"), Column("scope", "VARCHAR"), Column("n_queries", "INTEGER"),
            Column("n_evaluated", "INTEGER"), Column("n_skipped", "INTEGER"), Column("queries_file", "VARCHAR"),
            Column("params", "JSON"), Column("provenance", "JSON"), Column("created_at", "TIMESTAMP", NOW),
            Column("index_version", "VARCHAR"), Column("gallery_fingerprint", "VARCHAR"),
            Column("weights_checksum", "VARCHAR")), ("run_id",),
            "one evaluation of a queries table against one index version"),
        Table("query_results", (
            Column("run_id", "VARCHAR", export=False), Column("query_id", "VARCHAR"),
            Column("row_number", "INTEGER", export=False), Column("path", "VARCHAR"),
            Column("content_hash", "VARCHAR", export=False), Column("method", "VARCHAR"),
            Column("identity", "VARCHAR"), Column("group_name", "VARCHAR"), Column("prompt", "VARCHAR"),
            Column("reference_paths", "VARCHAR"), Column("status", "VARCHAR"),
            *(Column(m.column, m.sql_type, metric=m) for m in metrics if m.schema_version == 1),
            Column("n_references", "INTEGER"),
            Column("extra", "JSON", export=False),  # the queries file's other columns, exported as columns
            Column("sim_source", "VARCHAR"),  # which references Sim used: sim_reference | reference_paths | identity
            # metrics added by a migration: appended, where ALTER TABLE puts them in an old workspace
            *(Column(m.column, m.sql_type, metric=m) for m in metrics if m.schema_version > 1)),
            ("run_id", "query_id"), "one row per query of a run"),
        Table("aux_scores", (
            Column("run_id", "VARCHAR"), Column("query_id", "VARCHAR"), Column("scorer", "VARCHAR"),
            Column("metric", "VARCHAR"), Column("value", "DOUBLE"),
            Column("note", "VARCHAR")),  # text beside the value: OCR text, a trajectory, why the value is missing
            ("run_id", "query_id", "scorer", "metric"), "auxiliary per-query scores, long format"),
        Table("rankings", (
            Column("run_id", "VARCHAR"), Column("query_id", "VARCHAR"), Column("rank", "INTEGER"),
            Column("item_id", "INTEGER"), Column("score", "DOUBLE"), Column("relevant", "BOOLEAN")), (),
            "the top-k gallery items of each query"),
        Table("ablations", (
            Column("ablation", "VARCHAR"), Column("variant", "VARCHAR"), Column("gallery", "VARCHAR"),
            Column("encoder", "VARCHAR"), Column("per_identity", "INTEGER"), Column("identities", "INTEGER"),
            Column("sampling", "VARCHAR"), Column("repeat", "INTEGER"), Column("seed", "INTEGER"),
            Column("method", "VARCHAR"), Column("oracle_map", "DOUBLE"), Column("oracle_sim", "DOUBLE"),
            Column("oracle_n", "INTEGER"), Column("generated_map", "DOUBLE"), Column("generated_sim", "DOUBLE"),
            Column("generated_n", "INTEGER"), Column("gallery_images", "INTEGER"), Column("params", "JSON"),
            Column("created_at", "TIMESTAMP", NOW)), ("ablation", "variant", "repeat", "method"),
            "one row per (ablation, variant, repeat, method)"),
        Table("vistar_prompts", (
            Column("run_id", "VARCHAR"), Column("query_id", "VARCHAR"), Column("prompt_id", "VARCHAR"),
            Column("role", "VARCHAR"), Column("aspect", "VARCHAR"), Column("split", "VARCHAR"),
            Column("core", "VARCHAR"), Column("params", "JSON"),
            Column("scorer", "VARCHAR"), Column("metric", "VARCHAR")),  # what measures the aspect
            ("run_id", "query_id"), "VISTAR routing of each query of a run: its structured prompt's "
                                    "[role|aspect], Core/Hard split, text and control parameters"),
        Table("benchmarks", (
            Column("name", "VARCHAR"), Column("index_name", "VARCHAR"), Column("gallery", "VARCHAR"),
            Column("encoder", "VARCHAR"), Column("scope", "VARCHAR"), Column("scorers", "JSON"),
            Column("gallery_fingerprint", "VARCHAR"), Column("weights_checksum", "VARCHAR"),
            Column("created_by", "VARCHAR"), Column("created_at", "TIMESTAMP", NOW)), ("name",),
            "sealed benchmarks: an index (gallery + encoder) and a protocol submissions are scored with"),
        Table("submissions", (
            Column("submission_id", "VARCHAR"), Column("benchmark", "VARCHAR"), Column("run_id", "VARCHAR"),
            Column("method", "VARCHAR"), Column("card", "JSON"), Column("submitter", "VARCHAR"),
            Column("token_id", "VARCHAR"), Column("images", "JSON"),  # [[relative path, sha256], ...] sorted
            Column("gallery_fingerprint", "VARCHAR"), Column("weights_checksum", "VARCHAR"),
            Column("fpr_version", "VARCHAR"), Column("submission_hash", "VARCHAR"), Column("results", "JSON"),
            Column("created_at", "VARCHAR"), Column("withdrawn_by", "VARCHAR"), Column("withdrawn_at", "VARCHAR"),
            Column("withdrawn_reason", "VARCHAR")), ("submission_id",),
            "one scored submission to a sealed benchmark; a withdrawn one stays, with who, when and why"),
        Table("submission_quota", (
            Column("holder", "VARCHAR"), Column("day", "VARCHAR"), Column("n", "INTEGER")), ("holder", "day"),
            "submissions each token made per UTC day (the service's daily limit counts here, not in memory)"),
    )}


# VISTAR's evaluation tensor S[R x A x G x N] in long form: one row per routed query, the model
# being the query's method and the score the aspect's scorer metric (NULL until it is scored).
VIEWS: dict[str, str] = {  # name -> SELECT; created after the tables (new workspace) or by its migration
    "vistar_tensor":
        "SELECT p.run_id, p.role, p.aspect, q.method AS model, p.prompt_id, p.split, p.query_id, "
        "a.value AS score, a.note FROM vistar_prompts p "
        "JOIN query_results q ON q.run_id = p.run_id AND q.query_id = p.query_id "
        "LEFT JOIN aux_scores a ON a.run_id = p.run_id AND a.query_id = p.query_id "
        "AND a.scorer = p.scorer AND a.metric = p.metric",
}


def view_ddl(name: str) -> str:
    return f"CREATE VIEW {name} AS {VIEWS[name]}"


TABLES: dict[str, Table] = build_tables()


# `fpr export` leads with these (the layout of fpr 0.1), then the other exported columns in declaration order.
EXPORT_FIRST = ("query_id", "path", "method", "identity", "group_name", "ap", "first_hit_rank", "n_relevant", "sim")


def export_columns() -> list[str]:
    declared = [c.name for c in TABLES["query_results"].columns if c.export]
    return list(EXPORT_FIRST) + [c for c in declared if c not in EXPORT_FIRST]


def per_query_metrics() -> list[Column]:
    """The per-query metric columns of ``query_results``, in declaration order."""
    return [c for c in TABLES["query_results"].columns if c.metric is not None]


# --------------------------------------------------------------------------- migrations

@dataclass(frozen=True)
class AddColumn:
    """Add a declared column to an existing table; ``backfill`` is an UPDATE's SET expression."""

    table: str
    column: str
    backfill: str | None = None

    def statements(self) -> list[str]:
        col = TABLES[self.table].column(self.column)
        out = [f"ALTER TABLE {self.table} ADD COLUMN {col.ddl()}"]
        if self.backfill:
            out.append(f'UPDATE {self.table} SET "{self.column}" = {self.backfill}')
        return out


@dataclass(frozen=True)
class Sql:
    statement: str

    def statements(self) -> list[str]:
        return [self.statement]


@dataclass(frozen=True)
class Migration:
    to_version: int
    description: str
    steps: tuple = field(default_factory=tuple)
    python: Callable | None = None  # optional fn(con) after the steps


MIGRATIONS: tuple[Migration, ...] = (
    Migration(2, "fpr 0.2: index versions, run provenance columns, Sim source, scorer notes; "
                 "index paths relative to the workspace", (
        AddColumn("indices", "version", "''"),
        # 0.1.0 stored the index folder as given on the command line (relative to the caller's
        # directory, or absolute); its layout was always <workspace>/indices/<name>.
        Sql("UPDATE indices SET path = 'indices/' || name"),
        AddColumn("runs", "index_version", "''"),
        AddColumn("runs", "gallery_fingerprint", "json_extract_string(provenance, '$.gallery_fingerprint')"),
        AddColumn("runs", "weights_checksum", "json_extract_string(provenance, '$.weights_checksum')"),
        AddColumn("query_results", "sim_source",
                  "CASE WHEN status <> 'ok' THEN NULL WHEN coalesce(reference_paths, '') <> '' "
                  "THEN 'reference_paths' ELSE 'identity' END"),
        AddColumn("aux_scores", "note"),
    )),
    Migration(3, "VISTAR routing of queries (vistar_prompts) and the evaluation tensor view (vistar_tensor)", (
        Sql(TABLES["vistar_prompts"].ddl()),
        Sql(view_ddl("vistar_tensor")),
    )),
    # runs stored before keep NULL: their scores are not stored, so it cannot be recomputed from the workspace
    Migration(4, "top margin per-query metric (fpr.metrics.top_margin); NULL for runs stored before", (
        AddColumn("query_results", "top_margin"),
    )),
    # like the top margin: the rankings stored are top-k only, so older runs keep NULL
    Migration(5, "AP@10 and R-precision per-query metrics (fpr.metrics.ranking); NULL for runs stored before", (
        AddColumn("query_results", "ap10"),
        AddColumn("query_results", "r_precision"),
    )),
    Migration(6, "sealed benchmarks, their submissions (with withdrawals) and the per-token daily quota", (
        Sql(TABLES["benchmarks"].ddl()),
        Sql(TABLES["submissions"].ddl()),
        Sql(TABLES["submission_quota"].ddl()),
    )),
)

SCHEMA_VERSION = 1 + len(MIGRATIONS)
assert [m.to_version for m in MIGRATIONS] == list(range(2, SCHEMA_VERSION + 1)), "migrations must be consecutive"
