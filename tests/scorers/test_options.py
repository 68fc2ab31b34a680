"""Scorer options are declared (name, type, default, help) and checked in one place before a run."""
from __future__ import annotations

import pytest

from fpr.errors import InputError
from fpr.scorers import all_scorers, check_scorer_options, get_scorer
from fpr.scorers.options import Option, check_options, resolve
from fpr.workflows.scorers import list_scorers, scorer_options

DECLARED = {"s": (Option("k", int, 4, "how many", minimum=2), Option("mode", str, "pair", "mode",
                                                                       choices=("pair", "choice")),
                  Option("on", bool, False, "switch"), Option("t", float, 0.5, "threshold"))}


def test_resolve_fills_defaults_and_types_values():
    assert resolve("s", DECLARED["s"], {}) == {"k": 4, "mode": "pair", "on": False, "t": 0.5}
    got = resolve("s", DECLARED["s"], {"s.k": "7", "s.mode": "choice", "s.on": "yes", "s.t": "0.25"})
    assert got == {"k": 7, "mode": "choice", "on": True, "t": 0.25}
    assert type(got["k"]) is int and type(got["t"]) is float


@pytest.mark.parametrize("options, message", [
    ({"s.kk": "3"}, "scorer 's' has no option 'kk'.*valid options: k, mode, on, t"),
    ({"other.k": "3"}, "scorer option 'other.k' is for scorer 'other', which this run does not use.*valid scorers "
                       "in this run: s"),
    ({"s.k": "three"}, "scorer option s.k must be an integer, got 'three'"),
    ({"s.k": "1"}, "scorer option s.k must be >= 2, got '1'"),
    ({"s.mode": "both"}, "scorer option s.mode must be one of pair, choice, got 'both'"),
    ({"s.on": "maybe"}, "scorer option s.on must be true or false, got 'maybe'"),
    ({"nodot": "1"}, "must be written <scorer>.<name>=<value>"),
])
def test_a_bad_option_is_one_line_naming_the_valid_choices(options, message):
    with pytest.raises(InputError) as exc:
        check_options(DECLARED, options)
    text = exc.value.one_line() if hasattr(exc.value, "one_line") else str(exc.value)
    assert "\n" not in text
    import re
    assert re.search(message, text), text


def test_every_registered_scorer_declares_valid_options():
    for name, sc in all_scorers().items():
        names = [o.name for o in sc.options]
        assert len(names) == len(set(names)), name
        for o in sc.options:
            assert isinstance(o, Option) and o.help, (name, o)
            assert o.value(name, None) == o.default  # the default passes its own declaration
            if o.default is not None:
                assert o.value(name, str(o.default)) == o.default, (name, o.name)
        assert sc.option_values({}) == {o.name: o.default for o in sc.options}


def test_a_typo_in_a_real_scorers_option_is_refused_before_the_run():
    with pytest.raises(InputError, match="scorer 'copy-paste' has no option 'treshold'.*threshold"):
        check_scorer_options(["copy-paste"], {"copy-paste.treshold": "0.5"})
    with pytest.raises(InputError, match="copy-paste.threshold must be a number, got 'high'"):
        check_scorer_options(["copy-paste"], {"copy-paste.threshold": "high"})
    check_scorer_options(["copy-paste", "clip-t"], {"copy-paste.threshold": "0.5", "clip-t.batch_size": "8"})


def test_listing_shows_declared_options_with_defaults():
    rows = {r["name"]: r for r in list_scorers()}
    assert rows["copy-paste"]["options"] == ",".join(f"copy-paste.{o.name}" for o in get_scorer("copy-paste").options)
    assert rows["clip-t"]["metrics"] == "clip-t.score"
    opts = {r["option"]: r for r in scorer_options("copy-paste")}
    assert opts["copy-paste.threshold"]["default"] == "0.38" and opts["copy-paste.threshold"]["type"] == "float"
    judge = {r["option"] for r in scorer_options("viescore")}
    assert {"viescore.model", "viescore.image_size", "viescore.concurrency"} <= judge
