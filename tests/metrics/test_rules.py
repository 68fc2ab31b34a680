"""The keep-rule language of ``fpr filter``: grammar, three-valued logic, reasons, and refusal of anything else."""
from __future__ import annotations

import numpy as np
import pytest

from fpr.errors import InputError
from fpr.metrics.rules import parse_rule

NAMES = ["ap", "sim", "top1", "top5", "first_hit_rank", "clip_t", "copy_paste"]


def values(**kw):
    n = len(next(iter(kw.values())))
    base = {k: np.zeros(n) for k in NAMES}
    base.update({k: np.asarray(v, dtype=float) for k, v in kw.items()})
    return base


def test_paper_rule_keeps_and_explains():
    rule = parse_rule("top1 and ap >= 0.5 and clip_t >= 0.25 and not copy_paste", NAMES)
    v = values(top1=[1, 1, 0, 1, 1], ap=[0.9, 0.3, 0.9, 0.9, 0.9], clip_t=[0.3, 0.3, 0.3, np.nan, 0.3],
               copy_paste=[0, 0, 0, 0, 1])
    res = rule.apply(v)
    assert res.keep.tolist() == [True, False, False, False, False]
    assert res.reason == ["", "ap >= 0.5 (ap=0.3)", "top1 (top1=0)", "clip_t >= 0.25 (clip_t=missing)",
                          "not copy_paste (copy_paste=1)"]
    assert res.clause[1:] == ["ap >= 0.5", "top1", "clip_t >= 0.25", "not copy_paste"]


def test_chained_comparisons_parentheses_or_not():
    v = values(ap=[0.1, 0.5, 0.99], sim=[0.0, 0.0, 0.0], top5=[0, 0, 1])
    assert parse_rule("0.2 <= ap < 0.95", NAMES).apply(v).keep.tolist() == [False, True, False]
    assert parse_rule("(0.2 <= ap < 0.95) or top5", NAMES).apply(v).keep.tolist() == [False, True, True]
    assert parse_rule("not (ap > 0.2 and top5)", NAMES).apply(v).keep.tolist() == [True, True, False]
    assert parse_rule("ap > -1 and sim == 0 and first_hit_rank != 3", NAMES).apply(v).keep.all()
    assert parse_rule("true", NAMES).apply(v).keep.all()
    assert not parse_rule("false or ap > 2", NAMES).apply(v).keep.any()


def test_missing_values_never_keep_a_row():
    v = values(ap=[np.nan, np.nan, 0.9], copy_paste=[np.nan, 1, np.nan])
    # SQL logic: unknown is not true, and "not unknown" is unknown
    assert parse_rule("not copy_paste", NAMES).apply(v).keep.tolist() == [False, False, False]
    assert parse_rule("ap > 0.5 or ap <= 0.5", NAMES).apply(v).keep.tolist() == [False, False, True]
    # ... but a known answer wins: true or unknown = true, false and unknown = false
    assert parse_rule("ap > 0.5 or copy_paste", NAMES).apply(v).keep.tolist() == [False, True, True]
    assert parse_rule("(copy_paste or true)", NAMES).apply(v).keep.all()


@pytest.mark.parametrize("text, fragment", [
    ("__import__('os')", "function call"),
    ("__import__('os').system('echo pwned')", "not allowed"),
    ("ap.__class__", "attribute access"),
    ("ap.__class__.__mro__", "attribute access"),
    ("ap[0]", "subscript"),
    ("[ap][0]", "not allowed"),
    ("len(ap)", "function call"),
    ("lambda: ap", "lambda"),
    ("(lambda x: x)(ap)", "not allowed"),
    ("f'{ap}' == 1", "f-string"),
    ("ap + 1 > 2", "arithmetic"),
    ("ap if top1 else sim", "conditional"),
    ("(x := 1)", "assignment"),
    ("'a' == ap", "string"),
    ("ap in [1, 2]", "'in'"),
    ("ap is None", "not allowed"),
    ("[x for x in ap]", "comprehension"),
    ("ap > 1e999", "inf"),
    ("ap > -sim", "numbers only"),
    ("__builtins__", "unknown name"),
    ("foo >= 1", "unknown name 'foo'"),
    ("ap >=", "syntax error"),
    ("import os", "syntax error"),
    ("ap >= 0.5; import os", "syntax error"),
    ("", "empty"),
    ("ap > 0 and " * 400 + "ap > 0", "too long"),
])
def test_everything_else_is_refused_in_one_line(text, fragment):
    with pytest.raises(InputError) as err:
        parse_rule(text, NAMES)
    msg = err.value.one_line()
    assert fragment in msg
    assert "\n" not in msg


def test_unknown_name_lists_the_available_ones():
    with pytest.raises(InputError) as err:
        parse_rule("clipt >= 0.2", NAMES)
    assert "available: ap, clip_t, copy_paste" in err.value.one_line()


def test_rule_is_one_line_and_names_are_collected():
    rule = parse_rule("top1\n and ap >= 0.5\n and not copy_paste", NAMES)
    assert "\n" not in rule.text
    assert rule.names == ("top1", "ap", "copy_paste")
