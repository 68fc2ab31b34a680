"""The OpenAPI document tells the truth (issue #35, item 5 of 'what to build').

Links lead from ``POST /v1/runs`` to every run route (a stateful fuzzer follows them with the run's name), and
the submission schema accepts a text field's value exactly when the service does: checked by validating a
seeded set of generated values against the served schema and against the service's own field checks.
No server is started: the document is the application's, built as ``/openapi.json`` serves it.
"""
from __future__ import annotations

import random
from pathlib import Path

import jsonschema
import pytest

from fpr.errors import FprError
from fpr.serve.app import create_app
from fpr.serve.config import ServeConfig
from fpr.serve.routes.submit import RUN_LINKS, check_fields, fill_openapi
from fpr.serve.uploads import FIELD_BLANKS

SEED = 5
INDICES = ["world-serve-fpr-world-v1", "cub.paper_miewid-2"]
SCORERS = ["clip-t", "copy-paste", "hwpq"]


@pytest.fixture(scope="module")
def doc(tmp_path_factory) -> dict:
    app = create_app(ServeConfig(workspace=tmp_path_factory.mktemp("openapi-ws")))  # touches nothing on disk
    return app.openapi()


def test_submission_links_to_every_run_route(doc):
    run_ops = {op["operationId"]: (path, method) for path, ops in doc["paths"].items()
               for method, op in ops.items() if path.startswith("/v1/runs/{run}")}
    assert sorted(run_ops) == ["cancel_run", "delete_run", "get_run", "get_run_queries", "get_run_report"]
    accepted = doc["paths"]["/v1/runs"]["post"]["responses"]["202"]
    links = accepted["links"]
    assert links == RUN_LINKS
    assert sorted(link["operationId"] for link in links.values()) == sorted(run_ops)
    assert all(link["parameters"] == {"run": "$response.body#/run"} for link in links.values())
    body = accepted["content"]["application/json"]["schema"]
    assert body["required"] == ["run", "status"] and body["properties"]["status"]["enum"] == ["queued"]
    for path, _method in run_ops.values():
        params = [p for op in doc["paths"][path].values() for p in op.get("parameters", []) if p["in"] == "path"]
        assert {p["name"] for p in params} == {"run"}


def test_a_cancelled_run_links_to_reading_and_deleting_it(doc):
    """A stateful fuzzer mostly followed the submission's link to cancel (16 of 40 link steps) and then guessed
    names (404s); a cancelled run still exists, so the cancel answer links on to GET and DELETE of that run."""
    answer = doc["paths"]["/v1/runs/{run}/cancel"]["post"]["responses"]["200"]
    assert answer["links"] == {"GetRun": RUN_LINKS["GetRun"], "DeleteRun": RUN_LINKS["DeleteRun"]}
    assert {link["operationId"] for link in answer["links"].values()} == {"get_run", "delete_run"}
    assert all(link["parameters"] == {"run": "$response.body#/run"} for link in answer["links"].values())


def test_served_document_names_the_workspace_indices_and_the_scorers(doc, tmp_path):
    schema = doc["paths"]["/v1/runs"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert schema["required"] == ["index"] and schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"index", "run", "scope", "scorers", "queries", "images", "archive"}
    # no index in an empty workspace: no index value is valid, as the service accepts none
    assert not _valid(schema, "index", "anything")
    from fpr.scorers import BUILTIN

    for name in BUILTIN:  # every registered built-in scorer, filled in at request time
        assert _valid(schema, "scorers", name)


def _schema(indices=INDICES, scorers=SCORERS) -> dict:
    doc = {"paths": {"/v1/runs": {"post": {"requestBody": {"content": {"multipart/form-data": {}}}}}}}
    fill_openapi(doc, indices, scorers)
    return doc["paths"]["/v1/runs"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]


def _valid(schema: dict, field: str, value: str) -> bool:
    """Whether the schema allows ``field`` = ``value``."""
    return jsonschema.Draft202012Validator(schema["properties"][field]).is_valid(value)


def _accepted(field: str, value: str) -> bool:
    """Whether the service accepts ``field`` = ``value`` (the multipart reader's strip, then its checks)."""
    fields = {field: value.strip(FIELD_BLANKS)}
    if field == "index":
        return fields["index"] in INDICES  # submit._settings: one of the workspace's indices
    try:
        check_fields(fields)
        return True
    except FprError:
        return False


def _values(rng: random.Random, field: str, n: int) -> list[str]:
    """Valid values, near misses and noise for one field."""
    names = {"index": INDICES, "scope": ["all", "group"], "scorers": SCORERS}.get(field, ["run-1", "r.2_x", "A"])
    blanks = ["", " ", "\t", "\r\n", "\n ", "\x0b", "\x0c", "\xa0", "\u2028", "\x1c", "\x85", "\ufeff"]
    alphabet = "aZ09._-,@/ #=\t\n\xe9\u0430\x00" + "".join(names)
    out = ["", " ", ",", ", ,", "a" * 128, "a" * 129, "-run", ".run", "run/x", "../x", "scope=all"]
    for _ in range(n):
        kind = rng.random()
        if kind < 0.4:  # a valid value wrapped in blanks (some of which the service keeps)
            k = rng.randint(1, 3) if field == "scorers" else 1
            sep = rng.choice([",", ", ", " ,", ",,", " "])
            core = sep.join(rng.choice(names) for _ in range(k))
            out.append(rng.choice(blanks) + core + rng.choice(blanks))
        elif kind < 0.7:  # one character changed
            v = list(rng.choice(names))
            v[rng.randrange(len(v))] = rng.choice(alphabet)
            out.append("".join(v))
        else:
            out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))))
    return out


@pytest.mark.parametrize("field", ["index", "run", "scope", "scorers"])
def test_schema_accepts_a_field_value_exactly_when_the_service_does(field):
    schema = _schema()
    rng = random.Random(f"{SEED}-{field}")
    values = _values(rng, field, 600)
    disagree = [v for v in values if _valid(schema, field, v) != _accepted(field, v)]
    assert disagree == []
    n_ok = sum(_accepted(field, v) for v in values)
    assert 30 < n_ok < len(values) - 30  # both sides exercised


def test_the_schema_refuses_what_the_form_reader_refuses():
    schema = _schema()
    base = {"index": INDICES[0], "queries": "x"}
    v = jsonschema.Draft202012Validator(schema)
    assert v.is_valid(base) and v.is_valid({"index": INDICES[0], "archive": "z"})
    assert not v.is_valid({"index": INDICES[0]})  # no queries table: 422
    assert not v.is_valid({"queries": "x"})  # no index: 422
    assert not v.is_valid(dict(base, extra="1"))  # an unknown field: 400
    assert not v.is_valid(dict(base, run="x" * 65537))  # over MAX_FIELD_BYTES: 413


def test_the_root_leads_to_the_documentation_page(tmp_path):
    """``/`` answered 404 (issue #33): it redirects to ``/docs``, the page shipped in the package. The
    application is asked without being started (no workers, nothing written)."""
    from starlette.testclient import TestClient

    app = create_app(ServeConfig(workspace=tmp_path / "ws"))
    client = TestClient(app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 5000))
    res = client.get("/", follow_redirects=False)
    assert res.status_code == 307 and res.headers["location"] == "/docs"
    page = client.get("/", follow_redirects=True)
    assert page.status_code == 200 and page.text.lstrip().lower().startswith("<!doctype html")
    assert not (tmp_path / "ws").exists()


def test_benchmark_submission_links_to_every_submission_route(doc):
    from fpr.serve.routes.benchmarks import SUBMISSION_LINKS

    sub_ops = {op["operationId"]: path for path, ops in doc["paths"].items() for op in ops.values()
               if path.startswith("/v1/submissions/{submission}")}
    assert sorted(sub_ops) == ["get_submission", "get_submission_cards", "withdraw_submission"]
    accepted = doc["paths"]["/v1/benchmarks/{benchmark}/submissions"]["post"]["responses"]["202"]
    assert accepted["links"] == SUBMISSION_LINKS
    assert sorted(link["operationId"] for link in accepted["links"].values()) == sorted(sub_ops)
    assert accepted["content"]["application/json"]["schema"]["required"] == ["submission", "run", "status"]
    for path in sub_ops.values():
        params = [p for op in doc["paths"][path].values() for p in op.get("parameters", []) if p["in"] == "path"]
        assert {p["name"] for p in params} == {"submission"}
    body = doc["paths"]["/v1/benchmarks/{benchmark}/submissions"]["post"]["requestBody"]["content"]
    schema = body["multipart/form-data"]["schema"]
    assert set(schema["properties"]) == {"method", "description", "link", "params", "queries", "images", "archive"}
    assert schema["required"] == ["method", "description"]
