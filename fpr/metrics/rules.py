"""Keep-rules for ``fpr filter``: a small, safe expression language over per-query values.

    top1 and ap >= 0.5 and clip_t >= 0.25 and not copy_paste

Grammar (parsed with ``ast.parse(mode="eval")`` and a strict whitelist; nothing
is ever evaluated by Python): names, numbers (``-`` allowed), ``true``/``false``,
comparisons ``< <= > >= == !=`` (chained: ``0.2 <= sim < 0.9``), ``and``, ``or``,
``not`` and parentheses. Anything else (calls, attributes, subscripts, strings,
f-strings, lambdas, arithmetic, ...) is rejected with a one-line error.

Values are per-query numbers; a bare name is true when non-zero. Missing values
(NaN: a scorer gave no value, the query was skipped) make a comparison *unknown*,
and logic is three-valued (SQL's): ``false and unknown`` is false, ``true or
unknown`` is true, ``not unknown`` is unknown. A row is kept only when the rule
is true, so a missing value never keeps a row by accident.

A rejected row gets a ``reason``: the first top-level ``and`` clause that is not
true, with the values it used, e.g. ``ap >= 0.5 (ap=0.31)`` or
``clip_t >= 0.25 (clip_t=missing)``.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from fpr.errors import InputError
from fpr.metrics.specs import PER_QUERY_METRICS

MAX_RULE_CHARS = 2000
MAX_NODES = 500

# The per-query values every filter run has (computed by the same code as ``fpr query``).
BASE_VARIABLES = {m.rule: m.description for m in PER_QUERY_METRICS if m.rule}
# rule name -> per-query column, and the names whose values are integers
RULE_COLUMNS = {m.rule: m.column for m in PER_QUERY_METRICS if m.rule}
INTEGER_RULE_NAMES = tuple(m.rule for m in PER_QUERY_METRICS if m.rule and m.integer)

_COMPARE = {ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater, ast.GtE: np.greater_equal,
            ast.Eq: np.equal, ast.NotEq: np.not_equal}
_CONSTANTS = {"true": 1.0, "false": 0.0, "True": 1.0, "False": 0.0}
_WHAT = {ast.Call: "a function call", ast.Attribute: "attribute access ('.')", ast.Subscript: "a subscript ('[]')",
         ast.Lambda: "a lambda", ast.JoinedStr: "an f-string", ast.FormattedValue: "an f-string",
         ast.BinOp: "arithmetic", ast.IfExp: "a conditional expression", ast.Dict: "a dict", ast.List: "a list",
         ast.Tuple: "a tuple", ast.Set: "a set", ast.ListComp: "a comprehension", ast.GeneratorExp: "a comprehension",
         ast.DictComp: "a comprehension", ast.SetComp: "a comprehension", ast.NamedExpr: "an assignment (':=')",
         ast.Starred: "'*'", ast.Await: "await", ast.Yield: "yield", ast.Slice: "a slice", ast.In: "'in'",
         ast.NotIn: "'not in'", ast.Is: "'is'", ast.IsNot: "'is not'"}


@dataclass
class Truth:
    """Three-valued truth per row: ``value`` is meaningful where ``known``."""

    value: np.ndarray  # bool
    known: np.ndarray  # bool

    @property
    def true(self) -> np.ndarray:
        return self.value & self.known


@dataclass
class Rule:
    text: str
    tree: ast.Expression
    names: tuple[str, ...]  # variables the rule uses, in order of first use
    clauses: tuple[ast.expr, ...]  # top-level 'and' operands

    def evaluate(self, values: Mapping[str, np.ndarray]) -> Truth:
        return _truth(_eval(self.tree.body, _as_float(values, self.names)))

    def apply(self, values: Mapping[str, np.ndarray]) -> "RuleResult":
        """Keep mask, plus for each rejected row the first top-level clause that is not true.

        ``reason`` shows the clause with the values it used (``ap >= 0.5 (ap=0.31)``),
        ``clause`` the clause alone (for counting); both are "" for kept rows.
        """
        vals = _as_float(values, self.names)
        n = _n_rows(values)
        keep = np.ones(n, dtype=bool)
        reasons = [""] * n
        clauses = [""] * n
        for clause in self.clauses:
            t = _truth(_eval(clause, vals))
            failed = np.flatnonzero(keep & ~np.broadcast_to(t.true, (n,)))
            if len(failed):
                text = ast.get_source_segment(self.text, clause) or ast.unparse(clause)
                used = [nm for nm in _names_in(clause) if nm not in _CONSTANTS]
                for i in failed:
                    shown = ", ".join(f"{nm}={_fmt(vals[nm][i])}" for nm in used)
                    reasons[i] = f"{text} ({shown})" if shown else text
                    clauses[i] = text
                keep[failed] = False
        return RuleResult(keep, reasons, clauses)


@dataclass
class RuleResult:
    keep: np.ndarray  # bool per row
    reason: list[str]
    clause: list[str]


def _n_rows(values: Mapping[str, np.ndarray]) -> int:
    for v in values.values():
        return len(v)
    return 0


def _fmt(v: float) -> str:
    if not math.isfinite(v):
        return "missing"
    return str(int(v)) if float(v).is_integer() else f"{v:.4g}"


def _as_float(values: Mapping[str, np.ndarray], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    return {nm: np.asarray(values[nm], dtype=np.float64) for nm in names if nm not in _CONSTANTS}


def _names_in(node: ast.AST) -> list[str]:
    seen: list[str] = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id not in seen:
            seen.append(n.id)
    return seen


def parse_rule(text: str, variables: Mapping[str, str] | list[str]) -> Rule:
    """Parse and check a rule against the available variable names; raise a one-line InputError."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("empty --keep rule", hint="e.g. --keep \"top1 and ap >= 0.5\"")
    if len(text) > MAX_RULE_CHARS:
        raise InputError(f"--keep rule is too long ({len(text)} characters, at most {MAX_RULE_CHARS})")
    text = " ".join(text.split())  # one line: newlines would let a reason span rows
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        col = f" at column {exc.offset}" if exc.offset else ""
        raise InputError(f"invalid --keep rule: syntax error{col}: {text}",
                         hint="use names, numbers, comparisons, and/or/not and parentheses") from None
    except (RecursionError, MemoryError, ValueError):
        raise InputError("invalid --keep rule: too deeply nested") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise InputError(f"--keep rule is too complex ({len(nodes)} parts, at most {MAX_NODES})")
    allowed = set(variables)
    for node in nodes:
        _check_node(node, text, allowed)
    names = tuple(n for n in _names_in(tree) if n not in _CONSTANTS)
    body = tree.body
    clauses = tuple(body.values) if isinstance(body, ast.BoolOp) and isinstance(body.op, ast.And) else (body,)
    return Rule(text, tree, names, clauses)


def _check_node(node: ast.AST, text: str, allowed: set[str]) -> None:
    where = f" at column {node.col_offset + 1}" if hasattr(node, "col_offset") else ""
    if isinstance(node, (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, ast.Load)):
        return
    if isinstance(node, ast.Compare):
        return
    if type(node) in _COMPARE:
        return
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, (ast.USub, ast.UAdd)) and not isinstance(node.operand, ast.Constant):
            raise InputError(f"invalid --keep rule: '-' applies to numbers only{where}: {text}")
        return
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)) or \
                not math.isfinite(float(node.value)):
            kind = "a string is" if isinstance(node.value, (str, bytes)) else f"the constant {node.value!r} is"
            raise InputError(f"invalid --keep rule: {kind} not allowed{where}: {text}",
                             hint="compare names with numbers, e.g. ap >= 0.5")
        return
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return
        if node.id not in allowed:
            raise InputError(f"invalid --keep rule: unknown name '{node.id}'{where}",
                             hint="available: " + ", ".join(sorted(allowed)))
        return
    what = _WHAT.get(type(node), f"'{type(node).__name__}'")
    raise InputError(f"invalid --keep rule: {what} is not allowed{where}: {text}",
                     hint="use names, numbers, comparisons, and/or/not and parentheses")


def _eval(node: ast.AST, vals: dict[str, np.ndarray]):
    """Numbers come back as float arrays, conditions as :class:`Truth`."""
    if isinstance(node, ast.BoolOp):
        parts = [_truth(_eval(v, vals)) for v in node.values]
        out = parts[0]
        for p in parts[1:]:
            out = _eval_and(out, p) if isinstance(node.op, ast.And) else _eval_or(out, p)
        return out
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.Not):
            t = _truth(_eval(node.operand, vals))
            return Truth(~t.value & t.known, t.known)
        v = _eval(node.operand, vals)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Compare):
        left = _number(_eval(node.left, vals))
        out = None
        for op, comp in zip(node.ops, node.comparators):
            right = _number(_eval(comp, vals))
            known = np.isfinite(left) & np.isfinite(right)
            with np.errstate(invalid="ignore"):
                t = Truth(_COMPARE[type(op)](left, right) & known, known)
            out = t if out is None else _eval_and(out, t)
            left = right
        return out
    if isinstance(node, ast.Constant):
        return np.float64(node.value)
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return np.float64(_CONSTANTS[node.id])
        return vals[node.id]
    raise AssertionError(f"unchecked node {type(node).__name__}")  # parse_rule rejects everything else


def _eval_and(a: Truth, b: Truth) -> Truth:
    false = (a.known & ~a.value) | (b.known & ~b.value)
    true = a.true & b.true
    return Truth(true, true | false)


def _eval_or(a: Truth, b: Truth) -> Truth:
    true = a.true | b.true
    false = (a.known & ~a.value) & (b.known & ~b.value)
    return Truth(true, true | false)


def _number(v) -> np.ndarray:
    if isinstance(v, Truth):
        return np.where(v.known, v.value.astype(np.float64), np.nan)
    return np.asarray(v, dtype=np.float64)


def _truth(v) -> Truth:
    if isinstance(v, Truth):
        return v
    arr = np.asarray(v, dtype=np.float64)
    known = np.isfinite(arr)
    return Truth((arr != 0) & known, known)
