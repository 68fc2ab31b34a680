"""`fpr sql` cannot damage the workspace: every write form fails in one line and changes no byte."""
from __future__ import annotations

import hashlib

import pytest
from click.testing import CliRunner

from fpr import api
from fpr.cli.main import cli

WRITE_FORMS = [
    "COPY (SELECT 1) TO '{ws}/fpr.duckdb'",
    "COPY (SELECT 1) TO '{ws}/indices/pets-pixels-16/card.json'",
    "COPY query_results TO '{ws}/../leak.csv'",
    "EXPORT DATABASE '{ws}/../exported'",
    "ATTACH '{ws}/../other.duckdb' (READ_WRITE)",
    "ATTACH ':memory:' AS m",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "SET threads = 1",
    "CREATE TABLE x (a INTEGER)",
    "INSERT INTO runs (run_id) VALUES ('evil')",
    "DELETE FROM query_results",
    "UPDATE runs SET scope = 'all'",
    "DROP TABLE runs",
    "ALTER TABLE runs ADD COLUMN evil INTEGER",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM '{ws}/../queries.csv'",
    "CALL sqlite_attach('{ws}/../x.sqlite')",
]


def _digest(folder) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != ".fpr.lock"}


@pytest.fixture
def migrated(old_workspace):
    api.list_runs(workspace=old_workspace / "ws")  # migrate first: the migration itself writes
    return old_workspace


@pytest.mark.parametrize("form", WRITE_FORMS)
def test_every_write_form_is_refused_and_changes_nothing(migrated, form):
    ws = migrated / "ws"
    before, entries = _digest(migrated), sorted(p.name for p in migrated.iterdir())
    res = CliRunner().invoke(cli, ["--workspace", str(ws), "sql", form.format(ws=ws)])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("fpr: error: SQL error:") and res.stderr.count("\n") == 1
    assert "Traceback" not in res.output and "internal error" not in res.output
    assert _digest(migrated) == before
    assert sorted(p.name for p in migrated.iterdir()) == entries


def test_reads_still_work(migrated):
    df = api.sql("SELECT run_id, count(*) AS n FROM query_results GROUP BY run_id ORDER BY run_id",
                 workspace=migrated / "ws")
    assert df.to_dict("records") == [{"run_id": "r1", "n": 12}, {"run_id": "r2", "n": 12}]
    # temporary objects live in memory only and are allowed
    assert api.sql("CREATE TEMP TABLE t AS SELECT 1 AS a", workspace=migrated / "ws")["Count"].tolist() == [1]
