"""Tokens: parsing, constant-time check, revocation on file change; 401/403 over HTTP; no token in logs."""
from __future__ import annotations

import json
import os
import time

import pytest

from fpr.errors import InputError
from fpr.serve.auth import AuthError, TokenStore, parse_tokens
from fpr.serve.config import ServeConfig, is_loopback
from tests.patience import Deadline
from tests.serve.conftest import TOKENS


def test_parse_tokens_names_and_comments():
    entries = parse_tokens("# team\nabc alice.smith\n\n  def  \n")
    assert [(e.token, e.name) for e in entries][0] == (b"abc", "alice.smith")
    assert entries[1].token == b"def" and entries[1].name.startswith("token-") and len(entries[1].name) == 14
    assert "def" not in entries[1].name


def test_token_store_reloads_on_change(tmp_path):
    f = tmp_path / "tokens"
    f.write_text("t1 one\nt2 two\n")
    store = TokenStore(f)
    assert store.check("Bearer t1").name == "one" and store.check("bearer t2").name == "two"
    with pytest.raises(AuthError) as e:
        store.check(None)
    assert e.value.status == 401
    with pytest.raises(AuthError) as e:
        store.check("Basic dDE6eA==")
    assert e.value.status == 401
    with pytest.raises(AuthError) as e:
        store.check("Bearer t3")
    assert e.value.status == 403
    f.write_text("t2 two\n")  # revoke t1 (size changes, so the reload does not depend on mtime resolution)
    with pytest.raises(AuthError) as e:
        store.check("Bearer t1")
    assert e.value.status == 403
    assert store.check("Bearer t2").name == "two"
    f.unlink()
    with pytest.raises(AuthError):
        store.check("Bearer t2")


def test_no_token_file_means_open_on_loopback_only(tmp_path, monkeypatch):
    monkeypatch.delenv("FPR_API_TOKENS_FILE", raising=False)
    assert TokenStore(None).check(None).name == "anonymous"
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("example.org")
    ServeConfig.from_env(tmp_path, host="127.0.0.1")
    with pytest.raises(InputError, match="refusing to listen on 0.0.0.0 without tokens"):
        ServeConfig.from_env(tmp_path, host="0.0.0.0")
    f = tmp_path / "tokens"
    f.write_text("t1\n")
    monkeypatch.setenv("FPR_API_TOKENS_FILE", str(f))
    assert ServeConfig.from_env(tmp_path, host="0.0.0.0").tokens_file == f
    monkeypatch.setenv("FPR_MAX_UPLOAD_MB", "3")
    assert ServeConfig.from_env(tmp_path).max_upload_bytes == 3 * 1024 * 1024
    monkeypatch.setenv("FPR_SERVE_ORIGINS", "https://fpr.lab.example/, http://localhost:3000")
    assert ServeConfig.from_env(tmp_path).origins == {"https://fpr.lab.example", "http://localhost:3000"}
    monkeypatch.setenv("FPR_SERVE_ORIGINS", "fpr.lab.example")
    with pytest.raises(InputError, match="FPR_SERVE_ORIGINS must list http:// or https:// origins"):
        ServeConfig.from_env(tmp_path)
    monkeypatch.delenv("FPR_SERVE_ORIGINS")
    monkeypatch.setenv("FPR_MAX_UPLOAD_MB", "lots")
    with pytest.raises(InputError, match="FPR_MAX_UPLOAD_MB must be an integer"):
        ServeConfig.from_env(tmp_path)


@pytest.mark.slow
def test_http_auth(server):
    anon = server.client(user=None)
    assert anon.get("/v1/health").status_code == 200  # health needs no token
    r = anon.get("/v1/runs")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert "missing Authorization" in r.json()["error"]
    r = anon.get("/v1/galleries", headers={"Authorization": "Bearer not-a-token"})
    assert r.status_code == 403 and r.json() == {"error": "token not accepted (unknown or revoked)"}
    assert server.client("bob").get("/v1/indices").status_code == 200


@pytest.mark.slow
def test_http_revoked_token(server):
    bob = server.client("bob")
    assert bob.get("/v1/runs").status_code == 200
    original = server.tokens_file.read_text()
    try:
        server.tokens_file.write_text("\n".join(l for l in original.splitlines() if not l.endswith(" bob")) + "\n")
        assert bob.get("/v1/runs").status_code == 403
        assert server.client("alice").get("/v1/runs").status_code == 200
    finally:
        server.tokens_file.write_text(original)
    assert bob.get("/v1/runs").status_code == 200


@pytest.mark.slow
def test_request_log_is_json_without_tokens(server):
    server.client("alice").get("/v1/encoders")
    deadline = Deadline(10)
    while True:  # the log line is written after the response: polled, not slept for
        lines = [json.loads(l) for l in server.log.read_text().splitlines() if l.startswith("{")]
        reqs = [l for l in lines if l.get("event") == "request" and l["path"] == "/v1/encoders"]
        if reqs or deadline.passed():
            break
        time.sleep(0.05)
    assert reqs and reqs[-1]["status"] == 200 and reqs[-1]["user"] == "alice" and reqs[-1]["method"] == "GET"
    text = server.log.read_text()
    assert not any(tok in text for tok in TOKENS.values())


@pytest.mark.slow
def test_listings_match_the_api(server):
    from fpr import api
    from fpr.render.cells import to_jsonable

    c = server.client()
    ws = str(server.workspace)
    assert c.get("/v1/galleries").json() == to_jsonable(api.list_galleries(workspace=ws))
    assert c.get("/v1/indices").json() == to_jsonable(api.list_indices(workspace=ws))
    enc = {e["id"]: e for e in c.get("/v1/encoders").json()}
    assert enc["fpr-world-v1"]["dim"] == 128 and enc["fpr-world-v1"]["status"] == "available"
    health = server.client(None).get("/v1/health").json()
    assert health["status"] == "ok" and health["device"] == "cpu" and health["version"] == "0.1.0"
    assert os.path.isdir(server.workspace / "serve" / "jobs")


def test_token_lines_with_scopes(tmp_path):
    entries = parse_tokens("abc alice-smith scope=admin\ndef\nghi bob scope=read\n")
    assert [(e.name, e.scope) for e in entries][:1] == [("alice-smith", "admin")]
    assert entries[1].scope == "submit"  # a line without a scope: today's token files keep submitting
    assert entries[2].scope == "read"
    with pytest.raises(InputError, match="^token file line 2: unknown scope 'write'"):  # refused at start now
        parse_tokens("abc alice\njkl eve scope=write\n")
    f = tmp_path / "tokens"
    f.write_text("abc alice scope=admin\ndef bob\nghi carol scope=read\n")
    store = TokenStore(f)
    alice, bob, carol = (store.check(f"Bearer {t}") for t in ("abc", "def", "ghi"))
    assert alice.can("admin") and bob.can("submit") and not bob.can("admin") and not carol.can("submit")
    assert bob.token_id != alice.token_id and "def" not in bob.token_id
    with pytest.raises(AuthError, match="token not accepted"):
        store.check("Bearer jkl")
    with pytest.raises(AuthError, match="token 'carol' has scope 'read'; submitting needs scope 'submit'"):
        carol.require("submit", "submitting")
