"""Sealed benchmarks through the workflow functions (the service and the CLI call the same ones)."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from fpr import api
from fpr.errors import ConflictError, InputError, LimitError
from tests.sealed_world import INDEX, leaks, sealed_world, submission_folder


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    ws = root / "ws"
    by_method, gallery_files = sealed_world(root, ws)
    api.register_benchmark("world-sealed", INDEX, scorers="copy-paste", by="ops", workspace=ws)
    subs = {}
    for method, token in (("faithful", "t1"), ("generic", "t2")):
        queries = submission_folder(by_method[method], root / f"sub-{method}")
        card = {"method": f"m-{method}", "description": f"the world's {method} method",
                "link": "https://example.org/paper", "params": '{"steps": 50}'}
        subs[method] = api.submit_to_benchmark("world-sealed", queries, card=card, submitter=f"user-{method}",
                                               token_id=token, workspace=ws, device="cpu")
    return {"ws": ws, "root": root, "subs": subs, "gallery": gallery_files, "by_method": by_method}


def test_leaderboard_rows_equal_runs_of_the_same_images(bench):
    board = api.leaderboard("world-sealed", workspace=bench["ws"])
    rows = board["rows"]
    assert [r["method"] for r in rows] == ["m-faithful", "m-generic"]  # faithful keeps identity: ranks first
    assert [r["rank"] for r in rows] == [1, 2]
    for method in ("faithful", "generic"):
        queries = bench["root"] / f"sub-{method}" / "queries.csv"
        df = pd.read_csv(queries).assign(method=f"m-{method}")
        df.to_csv(queries.with_name("cli.csv"), index=False)
        res = api.run_query(INDEX, queries.with_name("cli.csv"), run=f"cli-{method}", workspace=bench["ws"],
                            scorers="copy-paste", device="cpu")
        ref = [r for r in res.summary_records() if r["group"] == "*"][0]
        row = next(r for r in rows if r["method"] == f"m-{method}")
        for key in ("map", "map_lo", "map_hi", "sim", "n_queries"):
            assert row[key] == pytest.approx(ref[key], abs=0, rel=0), key
        ok = res.per_query[res.per_query["status"] == "ok"]
        assert row["ap_one_share"] == pytest.approx(float((ok["ap"] == 1.0).mean()))
        assert row["copy_paste_rate"] == pytest.approx(ref["copy-paste.flag"])
        assert row["n_images"] == len(bench["by_method"][method])
        assert row["description"] == f"the world's {method} method" and row["params"] == {"steps": 50}


def test_no_gallery_path_or_stem_in_what_a_submitter_reads(bench):
    ws = bench["ws"]
    texts = [json.dumps(api.leaderboard("world-sealed", workspace=ws)),
             json.dumps(api.submission_history("world-sealed", workspace=ws)),
             json.dumps(api.list_benchmarks(workspace=ws))]
    texts += [json.dumps(api.get_submission(s["submission_id"], workspace=ws)) for s in bench["subs"].values()]
    for text in texts:
        assert leaks(text, bench["gallery"]) == []
    one = bench["gallery"][0]  # the check finds what it looks for
    assert leaks(f"x {one.stem} y", bench["gallery"]) and leaks(b"<" + one.read_bytes() + b">", bench["gallery"])


def test_submission_hash_is_recomputed_from_the_images(bench):
    ws, sub = bench["ws"], bench["subs"]["faithful"]
    folder = bench["root"] / "sub-faithful"
    images = sorted([p.relative_to(folder).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest()]
                    for p in folder.rglob("*.png"))
    recipe = {"images": images, "gallery_fingerprint": sub["gallery_fingerprint"],
              "weights_checksum": sub["weights_checksum"], "fpr_version": sub["fpr_version"]}
    expected = hashlib.sha256(json.dumps(recipe, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert sub["submission_hash"] == expected
    by_id = api.verify_submission(sub["submission_id"], folder, workspace=ws)
    assert by_id["match"] and by_id["computed"] == expected and by_id["n_images"] == len(images)
    published = json.loads(json.dumps(api.get_submission(sub["submission_id"], workspace=ws)))
    copy = bench["root"] / "held-by-someone"
    shutil.copytree(folder, copy)
    assert api.verify_submission(published, copy)["match"]  # no workspace needed: the published row suffices
    first = copy / images[0][0]
    first.write_bytes(first.read_bytes() + b"\0")
    changed = api.verify_submission(published, copy)
    assert not changed["match"] and changed["differing"] == [images[0][0]]


def test_withdrawn_row_leaves_the_leaderboard_and_stays_in_the_history(bench, tmp_path):
    ws = bench["ws"]
    sid = bench["subs"]["generic"]["submission_id"]
    out = api.withdraw_submission(sid, reason="tuned on the hidden gallery", by="ops", workspace=ws)
    assert (out["withdrawn_by"], out["withdrawn_reason"]) == ("ops", "tuned on the hidden gallery")
    assert [r["submission_id"] for r in api.leaderboard("world-sealed", workspace=ws)["rows"]] == \
        [bench["subs"]["faithful"]["submission_id"]]
    history = {r["submission_id"]: r for r in api.submission_history("world-sealed", workspace=ws)}
    assert len(history) == 2 and history[sid]["withdrawn_at"] and history[sid]["withdrawn_by"] == "ops"
    with pytest.raises(ConflictError, match="already withdrawn"):
        api.withdraw_submission(sid, reason="again", by="ops", workspace=ws)
    with pytest.raises(InputError, match="needs a reason"):
        api.withdraw_submission(bench["subs"]["faithful"]["submission_id"], reason=" ", workspace=ws)


def test_daily_quota_is_counted_in_the_store(bench):
    ws = bench["ws"]
    assert api.take_submission_slot("tok-q", 2, workspace=ws) == 1
    assert api.take_submission_slot("tok-q", 2, workspace=ws) == 2
    with pytest.raises(LimitError, match=r"limit resets at \d{4}-\d\d-\d\dT00:00:00Z"):
        api.take_submission_slot("tok-q", 2, workspace=ws)
    with pytest.raises(LimitError):
        api.check_submission_slot("tok-q", 2, workspace=ws)  # a fresh read of the store, not a counter in memory
    assert api.check_submission_slot("tok-other", 2, workspace=ws) == 0


@pytest.mark.parametrize("fields, message", [
    ({"method": "a b", "description": "x"}, "invalid method name"),
    ({"method": "m"}, "'description' is required"),
    ({"method": "m", "description": "x", "link": "javascript:alert(1)"}, "must be an http"),
    ({"method": "m", "description": "x", "params": "[1, 2]"}, "must be a JSON object"),
    ({"method": "m", "description": "x", "params": "{nope"}, "is not JSON"),
    ({"method": "m", "description": "two\nlines"}, "control character"),
    ({"method": "m", "description": "x", "colour": "red"}, "unknown method card field 'colour'"),
])
def test_method_cards_are_checked_at_the_door(fields, message):
    with pytest.raises(InputError, match=message) as err:
        api.check_card(fields)
    assert "\n" not in err.value.one_line()


def test_a_benchmark_name_is_registered_once(bench):
    with pytest.raises(ConflictError, match="already exists"):
        api.register_benchmark("world-sealed", INDEX, workspace=bench["ws"])


def test_retrieval_cards_are_redacted_and_true(bench):
    ws, sub = bench["ws"], bench["subs"]["faithful"]
    cards = api.submission_cards(sub["submission_id"], workspace=ws)
    assert leaks(json.dumps(cards), bench["gallery"]) == []
    run = api.submission_run(sub["submission_id"], workspace=ws)
    per_query = api.load_run(run, workspace=ws, summary=False).per_query.set_index("query_id")
    items = {it.item_id: it for it in api.gallery_items("sealed", workspace=ws)}
    assert sorted(c["query_id"] for c in cards) == sorted(per_query.index)
    for card in cards:
        assert card["ap"] == pytest.approx(per_query.loc[card["query_id"], "ap"])
        top = card["top"]
        assert [t["rank"] for t in top] == list(range(1, len(top) + 1)) and len(top) >= 2
        assert all(a["score"] >= b["score"] for a, b in zip(top, top[1:]))
        assert all(t["relevant"] == (t["identity"] == card["identity"]) for t in top)
        assert {t["identity"] for t in top} <= {it.identity for it in items.values() if it.group == card["group"]}
        assert set(top[0]) == {"rank", "identity", "score", "relevant"}  # no path, no item id
